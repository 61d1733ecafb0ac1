import { describe, expect, it } from "vitest";
import { parse, parseDocument, visit } from "yaml";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { agentEndpoint, desiredAgentChildren, type AgentResource } from "./desired.ts";
import { agentStatus } from "./status.ts";

const meta = {
  name: "alice",
  namespace: "team",
  uid: "uid-1",
  generation: 1,
  creationTimestamp: "2026-01-01T00:00:00Z",
  annotations: {
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
    "ifp.dev/capabilities-updated": "2026-01-01T00:00:00Z",
    "example.com/x": "y",
  },
};
const agent = (spec: Record<string, unknown> = {}): AgentResource => {
  const a = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: meta,
    spec: { agentId: "alice@example", capabilities: [{ name: "a.b", description: "x" }], ...spec },
  });
  return { ...a, metadata: meta };
};
const settings = { runtimeImage: "img:1", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n:4222" };
const inputs = {
  settings,
  signing: { secretName: "alice-signing", created: "2026-01-01T00:00:01Z", publicKey: "k".repeat(43) },
  tlsSecret: "alice-tls",
};
const byKind = (children: ReturnType<typeof desiredAgentChildren>) =>
  Object.fromEntries(children.map((c) => [c.kind, c as any]));

describe("desiredAgentChildren", () => {
  it("is deterministic: same input, same children", () => {
    expect(desiredAgentChildren(agent(), inputs)).toEqual(desiredAgentChildren(agent(), inputs));
  });

  it("names, labels and owns every child, the Deployment last", () => {
    const children = desiredAgentChildren(agent(), inputs);
    expect(children.map((c) => `${c.kind}/${c.metadata!.name}`)).toEqual([
      "ConfigMap/alice-manifest",
      "Service/alice",
      "Deployment/alice",
    ]);
    for (const c of children) {
      expect(c.metadata!.namespace).toBe("team");
      expect(c.metadata!.ownerReferences).toEqual([
        {
          apiVersion: "ifp.dev/v1alpha1",
          kind: "Agent",
          name: "alice",
          uid: "uid-1",
          controller: true,
          blockOwnerDeletion: true,
        },
      ]);
      expect(c.metadata!.labels).toMatchObject({
        "app.kubernetes.io/managed-by": "ifp-operator",
        "app.kubernetes.io/instance": "alice",
        "app.kubernetes.io/component": "agent",
      });
    }
  });

  it("runs the pods under the Agent's own ServiceAccount with no token but the runtime container's (identity.ts)", () => {
    const pod = byKind(desiredAgentChildren(agent(), inputs)).Deployment.spec.template.spec;
    expect(pod.serviceAccountName).toBe("alice-runtime");
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: "kube-api",
      mountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
      readOnly: true,
    });
  });

  it("renders the manifest the runtime reads, with the project's annotations only", () => {
    const m = parse(byKind(desiredAgentChildren(agent(), inputs)).ConfigMap.data["manifest.yaml"]);
    expect(m).toMatchObject({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "alice", namespace: "team", uid: "uid-1" },
      spec: { agentId: "alice@example", localApi: { port: 8081 } },
    });
    expect(m.metadata.annotations).toEqual({
      "ifp.dev/capabilities-updated": "2026-01-01T00:00:00Z",
      "ifp.dev/signing-key-created": "2026-01-01T00:00:01Z",
    });
    expect(Agent.safeParse(m).success).toBe(true);
  });

  it("writes the manifest without YAML anchors or aliases, an object shared by two peers written out twice", () => {
    // Two directory peers holding the same key list (one object in memory).
    const keys = [{ keyId: "k1", publicKey: "p".repeat(43) }];
    const directory = [
      { agentId: "bob@example", keys },
      { agentId: "carol@example", keys },
    ] as AgentResource["spec"]["peers"];
    const text: string = byKind(desiredAgentChildren(agent(), { ...inputs, directory })).ConfigMap.data[
      "manifest.yaml"
    ];
    const found: string[] = [];
    visit(parseDocument(text), {
      Alias: (_k, n) => void found.push(`*${n.source}`),
      Node: (_k, n) => void (n.anchor && found.push(`&${n.anchor}`)),
    });
    expect(found).toEqual([]);
    expect(parse(text).spec.peers.map((p: { agentId: string; keys: unknown }) => [p.agentId, p.keys])).toEqual([
      ["bob@example", keys],
      ["carol@example", keys],
    ]);
  });

  it("exposes only the HTTPS port, never the local application API", () => {
    const svc = byKind(desiredAgentChildren(agent({ localApi: { port: 9999 } }), inputs)).Service;
    expect(svc.spec.ports).toEqual([{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }]);
    expect(svc.spec.selector).toEqual({
      "app.kubernetes.io/name": "ifp-runtime",
      "app.kubernetes.io/instance": "alice",
    });
  });

  it("runs the start contract with the image, replicas and NATS credentials asked for", () => {
    const d = byKind(
      desiredAgentChildren(agent({ replicas: 3, image: "mine:2" }), {
        ...inputs,
        settings: { ...settings, natsCredsSecret: { name: "nats", key: "user.creds" }, natsAuthSecret: "nats-auth" },
      }),
    ).Deployment;
    expect(d.spec.replicas).toBe(3);
    const c = d.spec.template.spec.containers[0];
    expect(c.image).toBe("mine:2");
    expect(c.args).toContain("--signing-key=/etc/ifp/signing/signing.key");
    expect(c.env).toEqual(
      expect.arrayContaining([
        { name: "IFP_NATS_CREDS", value: "/etc/ifp/nats/nats.creds" },
        { name: "IFP_NATS_TOKEN", valueFrom: { secretKeyRef: { name: "nats-auth", key: "token", optional: true } } },
      ]),
    );
    expect(d.spec.template.spec.volumes).toContainEqual({
      name: "nats",
      secret: { secretName: "nats", items: [{ key: "user.creds", path: "nats.creds" }] },
    });
  });

  it("mounts the introduction tokens the Agent names and hands them to the runtime, and nothing without them", () => {
    const plain = byKind(desiredAgentChildren(agent(), inputs)).Deployment.spec.template.spec;
    expect(plain.containers[0].args.some((a: string) => a.startsWith("--introduction-secret-file"))).toBe(false);
    expect(plain.volumes.map((v: { name: string }) => v.name)).not.toContain("introduction");
    const pod = byKind(
      desiredAgentChildren(agent({ inbox: { introductionTokens: { secretName: "intro", key: "list" } } }), inputs),
    ).Deployment.spec.template.spec;
    const c = pod.containers[0];
    expect(c.args).toContain("--introduction-secret-file=/etc/ifp/introduction/tokens");
    expect(c.volumeMounts).toContainEqual({ name: "introduction", mountPath: "/etc/ifp/introduction", readOnly: true });
    expect(pod.volumes).toContainEqual({
      name: "introduction",
      secret: { secretName: "intro", items: [{ key: "list", path: "tokens" }] },
    });
  });

  it("mounts the A2A bearer tokens of spec.a2a and hands them to the runtime; nothing while A2A is off", () => {
    const tokens = { bearerTokenSecret: { name: "a2a-clients", key: "list" } };
    const off = byKind(desiredAgentChildren(agent({ a2a: { authentication: tokens } }), inputs)).Deployment.spec
      .template.spec;
    expect(off.containers[0].args.some((a: string) => a.startsWith("--a2a-token-file"))).toBe(false);
    expect(off.volumes.map((v: { name: string }) => v.name)).not.toContain("a2a-tokens");
    const pod = byKind(desiredAgentChildren(agent({ a2a: { enabled: true, authentication: tokens } }), inputs))
      .Deployment.spec.template.spec;
    expect(pod.containers[0].args).toContain("--a2a-token-file=/etc/ifp/a2a/tokens");
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: "a2a-tokens",
      mountPath: "/etc/ifp/a2a",
      readOnly: true,
    });
    expect(pod.volumes).toContainEqual({
      name: "a2a-tokens",
      secret: { secretName: "a2a-clients", items: [{ key: "list", path: "tokens" }] },
    });
  });

  it("serves the A2A gRPC binding on port a2a-grpc of the pod, the Service and the NetworkPolicy only while A2A is on", () => {
    const withPolicies = { ...inputs, settings: { ...settings, runtimeNetworkPolicies: { metricsNamespaces: [] } } };
    const grpcRule = { port: "a2a-grpc", protocol: "TCP" };
    const off = byKind(desiredAgentChildren(agent(), withPolicies));
    expect(off.Deployment.spec.template.spec.containers[0].args.some((a: string) => a.includes("grpc"))).toBe(false);
    expect(off.Service.spec.ports.map((p: { name: string }) => p.name)).toEqual(["https"]);
    expect(off.NetworkPolicy.spec.ingress[0].ports).not.toContainEqual(grpcRule);
    const on = byKind(desiredAgentChildren(agent({ a2a: { enabled: true } }), withPolicies));
    const runtime = on.Deployment.spec.template.spec.containers[0];
    expect(runtime.args).toContain("--a2a-grpc-port=8444");
    expect(runtime.ports).toContainEqual({ name: "a2a-grpc", containerPort: 8444, protocol: "TCP" });
    expect(on.Service.spec.ports).toContainEqual({
      name: "a2a-grpc",
      port: 8444,
      targetPort: "a2a-grpc",
      protocol: "TCP",
    });
    expect(on.NetworkPolicy.spec.ingress[0].ports).toContainEqual(grpcRule);
  });

  it("with a handler, mounts the hand-off secret into the runtime and gives it to the sidecars that do not set it themselves", () => {
    const plain = byKind(desiredAgentChildren(agent(), inputs)).Deployment.spec.template.spec;
    expect(plain.containers[0].args.some((a: string) => a.startsWith("--handoff-secret-file"))).toBe(false);
    expect(plain.volumes.map((v: { name: string }) => v.name)).not.toContain("handoff");
    const own = { name: "IFP_HANDOFF_SECRET", value: "their own" };
    const pod = byKind(
      desiredAgentChildren(
        agent({
          handler: { url: "http://127.0.0.1:8080" },
          deployment: {
            sidecars: [
              { name: "app", image: "app:1" },
              { name: "other", image: "o:1", env: [own] },
            ],
          },
        }),
        inputs,
      ),
    ).Deployment.spec.template.spec;
    const [runtime, app, other] = pod.containers;
    expect(runtime.args).toContain("--handoff-secret-file=/etc/ifp/handoff/handoff.key");
    expect(runtime.volumeMounts).toContainEqual({ name: "handoff", mountPath: "/etc/ifp/handoff", readOnly: true });
    expect(runtime.env ?? []).not.toContainEqual(expect.objectContaining({ name: "IFP_HANDOFF_SECRET" }));
    expect(pod.volumes).toContainEqual({
      name: "handoff",
      secret: { secretName: "alice-handoff", items: [{ key: "handoff.key", path: "handoff.key" }] },
    });
    expect(app.env).toEqual([
      { name: "IFP_HANDOFF_SECRET", valueFrom: { secretKeyRef: { name: "alice-handoff", key: "handoff.key" } } },
    ]);
    expect(other.env).toEqual([own]);
  });

  describe("runtime pod security and pull secrets", () => {
    const pod = (extra: Record<string, unknown>) =>
      byKind(desiredAgentChildren(agent(), { ...inputs, settings: { ...settings, ...extra } })).Deployment.spec.template
        .spec;
    it.each([
      {
        name: "default: UID/GID 10001, no pull secrets",
        extra: {},
        sc: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
        pull: undefined,
      },
      {
        name: "none leaves the UID and GID to the cluster",
        extra: { runtimeRunAsUser: null, runtimeRunAsGroup: null },
        sc: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
        pull: undefined,
      },
      {
        name: "a fixed UID and GID, pull secrets",
        extra: { runtimeRunAsUser: 1000, runtimeRunAsGroup: 0, runtimeImagePullSecrets: ["regcred", "mirror"] },
        sc: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 0, seccompProfile: { type: "RuntimeDefault" } },
        pull: [{ name: "regcred" }, { name: "mirror" }],
      },
    ])("$name", ({ extra, sc, pull }) => {
      const spec = pod(extra);
      expect(spec.securityContext).toEqual(sc);
      expect(spec.imagePullSecrets).toEqual(pull);
      expect(spec.containers[0].securityContext).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ["ALL"] },
      });
    });
    it("renders the default byte for byte as before the settings existed", () => {
      const explicit = JSON.stringify(
        desiredAgentChildren(agent(), {
          ...inputs,
          settings: { ...settings, runtimeRunAsUser: 10001, runtimeRunAsGroup: 10001, runtimeImagePullSecrets: [] },
        }),
      );
      expect(explicit).toBe(JSON.stringify(desiredAgentChildren(agent(), inputs)));
      expect(explicit).not.toContain("imagePullSecrets");
    });
  });

  it("changes the config hash with the spec and the signing key, not with other annotations", () => {
    const hash = (a: AgentResource, i = inputs) =>
      byKind(desiredAgentChildren(a, i)).Deployment.spec.template.metadata.annotations["ifp.dev/config-hash"];
    const base = hash(agent());
    expect(hash(agent({ displayName: "Alice" }))).not.toBe(base);
    expect(hash(agent(), { ...inputs, signing: { ...inputs.signing, publicKey: "j".repeat(43) } })).not.toBe(base);
    const other = agent();
    other.metadata = { ...meta, annotations: { ...meta.annotations, "example.com/x": "changed" }, generation: 7 };
    expect(hash(other)).toBe(base);
  });

  it("scales without rolling: spec.replicas reaches the Deployment, not the manifest or the config hash", () => {
    const dep = (a: AgentResource) => byKind(desiredAgentChildren(a, inputs)).Deployment;
    const one = dep(agent()),
      three = dep(agent({ replicas: 3 }));
    expect(three.spec.replicas).toBe(3);
    expect(three.spec.template.metadata.annotations["ifp.dev/config-hash"]).toBe(
      one.spec.template.metadata.annotations["ifp.dev/config-hash"],
    );
    expect(byKind(desiredAgentChildren(agent({ replicas: 3 }), inputs)).ConfigMap.data["manifest.yaml"]).not.toMatch(
      /replicas/,
    );
  });
});

describe("agentEndpoint and agentStatus", () => {
  it("uses spec.baseUrl, else the Service's in-cluster URL", () => {
    expect(agentEndpoint(agent())).toBe("https://alice.team.svc");
    expect(agentEndpoint(agent({ baseUrl: "https://alice.example.org" }))).toBe("https://alice.example.org");
  });

  it("always gives the runtime a base URL, so that no document, card or signature check takes a request's Host", () => {
    const baseUrlOf = (a: AgentResource) =>
      parse(byKind(desiredAgentChildren(a, inputs)).ConfigMap.data["manifest.yaml"]).spec.baseUrl;
    expect(baseUrlOf(agent())).toBe("https://alice.team.svc");
    expect(baseUrlOf(agent({ baseUrl: "https://alice.example.org" }))).toBe("https://alice.example.org");
    expect(baseUrlOf(agent({ expose: { ingress: { host: "alice.example.net" } } }))).toBe("https://alice.example.net");
  });

  it("mounts the tokens for A2A agents it sends to (spec.a2a.peerTokenSecret), whether or not A2A is served", () => {
    const none = byKind(desiredAgentChildren(agent(), inputs)).Deployment.spec.template.spec;
    expect(none.containers[0].args.some((a: string) => a.startsWith("--a2a-peer-token-file"))).toBe(false);
    const pod = byKind(desiredAgentChildren(agent({ a2a: { peerTokenSecret: { name: "a2a-peers" } } }), inputs))
      .Deployment.spec.template.spec;
    expect(pod.containers[0].args).toContain("--a2a-peer-token-file=/etc/ifp/a2a-peers/tokens");
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: "a2a-peer-tokens",
      mountPath: "/etc/ifp/a2a-peers",
      readOnly: true,
    });
    expect(pod.volumes).toContainEqual({
      name: "a2a-peer-tokens",
      secret: { secretName: "a2a-peers", items: [{ key: "tokens", path: "tokens" }] },
    });
    expect(pod.volumes.map((v: { name: string }) => v.name)).not.toContain("a2a-tokens");
  });

  it("reports the A2A URLs of an Agent with spec.a2a enabled, and none without", () => {
    const observed = { applied: [], deployment: undefined, signing: inputs.signing };
    expect(agentStatus(agent(), observed).status).not.toHaveProperty("a2a");
    expect(agentStatus(agent({ a2a: { enabled: true } }), observed).status.a2a).toEqual({
      card: "https://alice.team.svc/.well-known/agent-card.json",
      jsonRpc: "https://alice.team.svc/a2a/v1",
      rest: "https://alice.team.svc/a2a/rest",
      grpc: "alice.team.svc:8444",
    });
    // spec.baseUrl names the host the gRPC target is on too; the port is the a2a-grpc one.
    const exposed = agentStatus(agent({ baseUrl: "https://alice.example.com:9443", a2a: { enabled: true } }), observed);
    expect(exposed.status.a2a).toMatchObject({
      jsonRpc: "https://alice.example.com:9443/a2a/v1",
      grpc: "alice.example.com:8444",
    });
  });

  it("reports the endpoint, capability hash, key and replicas", () => {
    const { status, conditions } = agentStatus(agent(), {
      applied: [],
      deployment: {
        metadata: { generation: 1 },
        spec: { replicas: 1 },
        status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1 },
      },
      signing: inputs.signing,
      tlsSecret: "alice-tls",
    });
    expect(status).toMatchObject({
      endpoint: "https://alice.team.svc",
      signingKey: {
        keyId: "key-1",
        publicKey: "k".repeat(43),
        secretName: "alice-signing",
        created: "2026-01-01T00:00:01Z",
      },
      tlsSecretName: "alice-tls",
      replicas: 1,
      readyReplicas: 1,
    });
    expect(status.selector).toBe("app.kubernetes.io/instance=alice,app.kubernetes.io/name=ifp-runtime");
    expect(status.capabilitiesHash).toMatch(/^[0-9a-f]{64}$/);
    expect(conditions[0]).toMatchObject({ type: "Ready", status: "True" });
    expect(status).not.toHaveProperty("phase");
  });
});
