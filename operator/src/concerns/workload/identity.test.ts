import { describe, expect, it } from "vitest";
import { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { podServiceAccount, runtimeIdentityChildren, runtimeTokenVolume, SERVICE_ACCOUNT_DIR } from "./identity.ts";
import { runtimeDeployment } from "./workload.ts";
import type { Owner } from "../../reconcile/settings.ts";

const agent: Owner = { kind: "Agent", metadata: { name: "alice", namespace: "team", uid: "uid-1" } };
const relay: Owner = { kind: "Relay", metadata: { name: "hub", namespace: "team", uid: "uid-2" } };
const settings = { runtimeImage: "img:1", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n:4222" };
const deployment = (owner: Owner, pod?: DeploymentSettings) =>
  runtimeDeployment({
    owner,
    mode: owner.kind === "Agent" ? "agent" : "relay",
    replicas: 1,
    image: undefined,
    settings,
    tlsSecret: "t",
    configHash: "h",
    pod,
  }).spec!.template.spec!;
const name = (o: { kind?: string; metadata?: { name?: string } }) => `${o.kind}/${o.metadata?.name}`;

describe("runtimeIdentityChildren", () => {
  it("gives an Agent its own ServiceAccount without a token, a Role to record Events and its binding, all owned by it", () => {
    const objs = runtimeIdentityChildren(agent, undefined) as any[];
    expect(objs.map(name)).toEqual(["ServiceAccount/alice-runtime", "Role/alice-runtime", "RoleBinding/alice-runtime"]);
    for (const o of objs)
      expect(o.metadata.ownerReferences).toEqual([
        expect.objectContaining({ kind: "Agent", name: "alice", uid: "uid-1", controller: true }),
      ]);
    expect(objs[0].automountServiceAccountToken).toBe(false);
    expect(objs[1].rules).toEqual([{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }]);
    expect(objs[2].roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "alice-runtime" });
    expect(objs[2].subjects).toEqual([{ kind: "ServiceAccount", name: "alice-runtime", namespace: "team" }]);
  });

  it("gives a Relay a ServiceAccount and no Role: the relay runtime does not call the API server", () => {
    expect(runtimeIdentityChildren(relay, undefined).map(name)).toEqual(["ServiceAccount/hub-runtime"]);
  });

  it("makes no ServiceAccount when the user names one, and binds the Events Role to that one", () => {
    const pod = DeploymentSettings.parse({ serviceAccountName: "alice-app" });
    const objs = runtimeIdentityChildren(agent, pod) as any[];
    expect(objs.map(name)).toEqual(["Role/alice-runtime", "RoleBinding/alice-runtime"]);
    expect(objs[1].subjects).toEqual([{ kind: "ServiceAccount", name: "alice-app", namespace: "team" }]);
    expect(runtimeIdentityChildren(relay, pod)).toEqual([]);
    expect(podServiceAccount(agent, pod)).toBe("alice-app");
  });
});

describe("the runtime pod's token", () => {
  const withSidecar = DeploymentSettings.parse({
    sidecars: [{ name: "app", image: "app:1" }],
    initContainers: [{ name: "init", image: "app:1" }],
  });

  it("mounts a projected token into the agent runtime's container only, and none into the pod", () => {
    const pod = deployment(agent, withSidecar);
    expect(pod.serviceAccountName).toBe("alice-runtime");
    expect(pod.automountServiceAccountToken).toBe(false);
    const [runtime, app] = pod.containers;
    expect(runtime!.volumeMounts).toContainEqual({ name: "kube-api", mountPath: SERVICE_ACCOUNT_DIR, readOnly: true });
    expect(app!.volumeMounts ?? []).toEqual([]);
    expect(pod.initContainers![0]!.volumeMounts ?? []).toEqual([]);
    expect(pod.volumes).toContainEqual(runtimeTokenVolume().volume);
  });

  it("is the token, CA and namespace the in-cluster client reads, for the API server's audience", () => {
    const { volume } = runtimeTokenVolume();
    expect(volume.projected!.sources).toEqual([
      { serviceAccountToken: { path: "token", expirationSeconds: 3607 } },
      { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
      {
        downwardAPI: {
          items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }],
        },
      },
    ]);
  });

  it("gives the relay runtime no token", () => {
    const pod = deployment(relay, withSidecar);
    expect(pod.serviceAccountName).toBe("hub-runtime");
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.volumes!.map((v) => v.name)).not.toContain("kube-api");
  });

  it("mounts the pod's token into every container only when asked, under the ServiceAccount named", () => {
    const pod = deployment(
      agent,
      DeploymentSettings.parse({ serviceAccountName: "alice-app", automountServiceAccountToken: true }),
    );
    expect(pod.serviceAccountName).toBe("alice-app");
    expect(pod.automountServiceAccountToken).toBe(true);
  });
});

describe("DeploymentSettings", () => {
  it("refuses a ServiceAccount name that is not one, a mount over the runtime's token and a volume of its name", () => {
    expect(DeploymentSettings.safeParse({ serviceAccountName: "Not_A_Name" }).success).toBe(false);
    expect(DeploymentSettings.safeParse({ volumes: [{ name: "kube-api", emptyDir: {} }] }).success).toBe(false);
    const over = DeploymentSettings.safeParse({
      volumes: [{ name: "v", emptyDir: {} }],
      volumeMounts: [{ name: "v", mountPath: `${SERVICE_ACCOUNT_DIR}/token` }],
    });
    expect(over.success).toBe(false);
    expect(
      DeploymentSettings.safeParse({ serviceAccountName: "alice-app", automountServiceAccountToken: true }).success,
    ).toBe(true);
  });
});
