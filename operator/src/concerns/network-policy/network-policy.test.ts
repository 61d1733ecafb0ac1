import { describe, expect, it } from "vitest";
import { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { networkPolicyChildren, runtimeNetworkPolicy } from "./network-policy.ts";
import type { Owner } from "../../reconcile/settings.ts";

const agent: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "uid-1" } };

describe("runtimeNetworkPolicy", () => {
  it("admits the TLS port from anywhere, metrics from the listed namespaces, the local API from the Agent's namespace", () => {
    const np = runtimeNetworkPolicy(
      agent,
      { metricsNamespaces: ["monitoring", "ops", "monitoring"] },
      { localApiPort: 9443 },
    ) as any;
    expect(np.metadata).toMatchObject({
      name: "alice",
      namespace: "team",
      ownerReferences: [expect.objectContaining({ kind: "Agent", uid: "uid-1" })],
    });
    expect(np.spec.podSelector).toEqual({
      matchLabels: { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": "alice" },
    });
    expect(np.spec.policyTypes).toEqual(["Ingress"]);
    expect(np.spec.ingress).toEqual([
      { ports: [{ port: "https", protocol: "TCP" }] },
      {
        _from: [
          {
            namespaceSelector: {
              matchExpressions: [{ key: "kubernetes.io/metadata.name", operator: "In", values: ["monitoring", "ops"] }],
            },
          },
        ],
        ports: [{ port: "metrics", protocol: "TCP" }],
      },
      { _from: [{ podSelector: {} }], ports: [{ port: "local-api", protocol: "TCP" }] },
    ]);
  });

  it("admits metrics from nowhere when no namespace is listed, and no local API port without its Service", () => {
    expect((runtimeNetworkPolicy(agent, { metricsNamespaces: [] }) as any).spec.ingress).toEqual([
      { ports: [{ port: "https", protocol: "TCP" }] },
    ]);
  });

  it("admits the ports the sidecars declare, never one of the runtime's", () => {
    const pod = DeploymentSettings.parse({
      sidecars: [
        {
          name: "ui",
          image: "ui:1",
          ports: [
            { containerPort: 3000 },
            { containerPort: 9090 },
            { containerPort: 9443 },
            { containerPort: 5353, protocol: "UDP" },
          ],
        },
        { name: "other", image: "o:1", ports: [{ containerPort: 3000 }] },
      ],
    });
    const rules = (runtimeNetworkPolicy(agent, { metricsNamespaces: [] }, { pod, localApiPort: 9443 }) as any).spec
      .ingress;
    expect(rules.at(-1)).toEqual({
      ports: [
        { port: 3000, protocol: "TCP" },
        { port: 5353, protocol: "UDP" },
      ],
    });
  });

  it("is rendered only when the install asks for it", () => {
    expect(networkPolicyChildren(agent, undefined)).toEqual([]);
    expect(networkPolicyChildren(agent, { metricsNamespaces: [] })).toHaveLength(1);
  });
});
