// The runtimes' workload identity and NetworkPolicies against a real API server with the
// ServiceAccount admission plugin on (pods get their ServiceAccount's token as in any cluster)
// and the operator running: each Agent and Relay runs under a ServiceAccount of its own, or one
// the user names and labels for it; no container but the agent runtime's holds a token unless
// the user asks; that token records Events on the Agent and no other account's does; the shared
// ServiceAccount of an earlier version goes once no runtime runs under it; the NetworkPolicies
// select the runtime's pods and admit what they should, and go when the install turns them off.
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { EventRecorder } from "../../../runtime/src/kube/events.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import type { OperatorSettings } from "../../src/reconcile/settings.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, resyncs, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager | undefined;
const NS = "tenant";
const MONITORING = "monitoring";
const RESYNC_MS = 1_000;
const TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
const operatorLog = capturedLog(600);
const base = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedImages: ["example.com/*"],
  allowedHosts: { [NS]: ["*.example"] },
};
const withPolicies: OperatorSettings = { ...base, runtimeNetworkPolicies: { metricsNamespaces: [MONITORING] } };

const get = (kind: string, name: string, ns = NS) => getOrAbsent(cp, ["-n", ns, "get", kind, name]);
const apply = (obj: object) => cp.kubectl(["apply", "-f", "-"], JSON.stringify(obj));
const agent = (name: string, spec: object = {}) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name, namespace: NS },
  spec: { agentId: `${name}-id`, ...spec },
});
const relay = (name: string, spec: object = {}) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Relay",
  metadata: { name, namespace: NS },
  spec: { url: `https://${name}.example`, ...spec },
});
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const events = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const sidecar = (name: string, extra: object = {}) => ({ name, image: "example.com/app:1", ...extra });
const pods = (name: string) =>
  cp.json(["-n", NS, "get", "pods", "-l", `app.kubernetes.io/instance=${name}`]).items as any[];
const untilPods = (name: string) =>
  until(`pods of ${name}`, () => (pods(name).length ? pods(name) : undefined), 45_000);
/** The mounts of a container at the in-cluster token's directory. */
const tokenMounts = (c: any) => (c.volumeMounts ?? []).filter((m: any) => m.mountPath === TOKEN_DIR);
const canCreateEvents = (sa: string) =>
  kubectlOrError(cp, [
    "auth",
    "can-i",
    "create",
    "events",
    "-n",
    NS,
    `--as=system:serviceaccount:${NS}:${sa}`,
  ]).trim() === "yes";
/** Whether a label selector (matchLabels and `In` expressions) selects these labels. */
const selects = (selector: any, labels: Record<string, string>) =>
  Object.entries(selector.matchLabels ?? {}).every(([k, v]) => labels[k] === v) &&
  (selector.matchExpressions ?? []).every((e: any) => e.operator === "In" && e.values.includes(labels[e.key]));

const start = async (settings: OperatorSettings) => {
  await manager?.stop();
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [NS],
    resyncMs: RESYNC_MS,
    log: operatorLog.log,
  });
  await manager.started;
};

perTest(() =>
  [
    "operator log (last 150 lines):",
    ...operatorLog.lines().slice(-150),
    kubectlOrError(cp, [
      "-n",
      NS,
      "get",
      "agents,relays,deployments,replicasets,pods,serviceaccounts,roles,rolebindings,networkpolicies",
      "-o",
      "wide",
    ]),
    kubectlOrError(cp, ["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-40).join("\n"),
  ].join("\n"),
);

beforeAll(async () => {
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    serviceAccounts: true,
  });
  for (const ns of [NS, MONITORING]) cp.kubectl(["create", "namespace", ns]);
  cp.kubectl(["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]);
  await start(withPolicies);
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

describe("the runtime's ServiceAccount", () => {
  it("runs each Agent and Relay under a ServiceAccount of its own, and no container but the agent runtime's holds a token", {
    timeout: 120_000,
  }, async () => {
    apply(agent("alice", { deployment: { sidecars: [sidecar("app")], initContainers: [sidecar("init")] } }));
    apply(relay("hub", { deployment: { sidecars: [sidecar("app")] } }));
    const owner = get("agent", "alice");
    for (const kind of ["serviceaccount", "role", "rolebinding"]) {
      const o = await until(`${kind}/alice-runtime`, () => get(kind, "alice-runtime"));
      expect(o.metadata.ownerReferences, kind).toEqual([
        expect.objectContaining({ kind: "Agent", name: "alice", uid: owner.metadata.uid, controller: true }),
      ]);
    }
    expect(get("serviceaccount", "alice-runtime").automountServiceAccountToken).toBe(false);
    expect(get("role", "alice-runtime").rules).toEqual([
      { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
    ]);
    expect(get("rolebinding", "alice-runtime").subjects).toEqual([
      { kind: "ServiceAccount", name: "alice-runtime", namespace: NS },
    ]);
    expect(get("serviceaccount", "ifp-agent-runtimes")).toBeUndefined();

    // The pod as the API server admitted it, after the ServiceAccount admission plugin.
    const [pod] = await untilPods("alice");
    expect(pod.spec.serviceAccountName).toBe("alice-runtime");
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    const byName = Object.fromEntries(
      [...pod.spec.containers, ...pod.spec.initContainers].map((c: any) => [c.name, c]),
    );
    expect(tokenMounts(byName.runtime)).toEqual([{ name: "kube-api", mountPath: TOKEN_DIR, readOnly: true }]);
    expect(tokenMounts(byName.app)).toEqual([]);
    expect(tokenMounts(byName.init)).toEqual([]);
    expect(pod.spec.volumes.map((v: any) => v.name).filter((n: string) => n.startsWith("kube-api-access"))).toEqual([]);
    const token = pod.spec.volumes.find((v: any) => v.name === "kube-api").projected.sources;
    expect(token[0].serviceAccountToken).toMatchObject({ path: "token", expirationSeconds: 3607 });
    expect(token[0].serviceAccountToken.audience).toBeUndefined();

    // The relay runtime does not call the API server: its own ServiceAccount, no Role, no token anywhere.
    expect((await until("hub-runtime", () => get("serviceaccount", "hub-runtime"))).metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Relay", name: "hub" }),
    ]);
    expect(get("role", "hub-runtime")).toBeUndefined();
    const [relayPod] = await untilPods("hub");
    expect(relayPod.spec.serviceAccountName).toBe("hub-runtime");
    for (const c of relayPod.spec.containers) expect(tokenMounts(c), c.name).toEqual([]);
    expect(canCreateEvents("hub-runtime")).toBe(false);
  });

  it("records the runtime's Events on its Agent with its ServiceAccount's token, and with no other account's", {
    timeout: 90_000,
  }, async () => {
    apply(agent("erin"));
    await until("erin's RoleBinding", () => get("rolebinding", "erin-runtime"));
    const erin = get("agent", "erin");
    const recorderAs = (sa: string) => {
      const token = cp.kubectl(["-n", NS, "create", "token", sa]).trim();
      const admin = new KubeConfig();
      admin.loadFromFile(cp.kubeconfig);
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: admin.getClusters(),
        users: [{ name: sa, token }],
        contexts: [{ name: sa, cluster: admin.getCurrentCluster()!.name, user: sa }],
        currentContext: sa,
      });
      return new EventRecorder(kc, "ifp-runtime", pino({ level: "silent" }));
    };
    const involved = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "erin", namespace: NS, uid: erin.metadata.uid },
    };
    await recorderAs("erin-runtime").record(involved, "Warning", "DeadLetter", "a message could not be delivered");
    await until("the runtime's Event on erin", () =>
      events("erin").some((e) => e.reason === "DeadLetter" && e.source?.component === "ifp-runtime"),
    );
    // Another ServiceAccount of the namespace, bound to nothing: its Event is refused (logged, never thrown).
    apply({ apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "stranger", namespace: NS } });
    await recorderAs("stranger").record(involved, "Warning", "Forged", "not the runtime");
    expect(events("erin").some((e) => e.reason === "Forged")).toBe(false);
  });

  it("mounts the pod's token into every container only when spec.deployment.automountServiceAccountToken asks for it", {
    timeout: 90_000,
  }, async () => {
    apply(agent("carol", { deployment: { automountServiceAccountToken: true, sidecars: [sidecar("app")] } }));
    const [pod] = await untilPods("carol");
    expect(pod.spec.automountServiceAccountToken).toBe(true);
    const [runtime, app] = pod.spec.containers;
    expect(tokenMounts(runtime).map((m: any) => m.name)).toEqual(["kube-api"]);
    expect(tokenMounts(app).map((m: any) => m.name)).toEqual([expect.stringMatching(/^kube-api-access-/)]);
  });

  it("runs the pods under a ServiceAccount the user names only once it exists and is labelled for the Agent", {
    timeout: 120_000,
  }, async () => {
    apply(agent("dave", { deployment: { serviceAccountName: "dave-app", sidecars: [sidecar("app")] } }));
    const refused = async (reason: string) => {
      await until(`dave ${reason}`, () => condition(get("agent", "dave"), "Stalled")?.reason === reason || undefined);
      expect(condition(get("agent", "dave"), "Ready").message).toMatch(/spec\.deployment\.serviceAccountName/);
      await resyncs(manager!, 3);
      expect(get("deployment", "dave"), "a Deployment for dave").toBeUndefined();
    };
    await refused("ServiceAccountMissing");
    // Anyone who may create an Agent could name a ServiceAccount with more rights than theirs: not without its label.
    apply({ apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "dave-app", namespace: NS } });
    await refused("ForeignServiceAccount");
    expect(events("dave").some((e) => e.type === "Warning" && e.reason === "ForeignServiceAccount")).toBe(true);
    cp.kubectl(["-n", NS, "label", "serviceaccount", "dave-app", "ifp.dev/agent=dave"]);
    const dep = await until("dave's Deployment", () => get("deployment", "dave"));
    expect(dep.spec.template.spec.serviceAccountName).toBe("dave-app");
    const [pod] = await untilPods("dave");
    expect(pod.spec.serviceAccountName).toBe("dave-app");
    expect(tokenMounts(pod.spec.containers[1])).toEqual([]);
    expect(get("serviceaccount", "dave-runtime")).toBeUndefined();
    expect(get("rolebinding", "dave-runtime").subjects).toEqual([
      { kind: "ServiceAccount", name: "dave-app", namespace: NS },
    ]);
    expect(canCreateEvents("dave-app")).toBe(true);
  });

  it("moves runtimes off the namespace's shared ServiceAccount of an earlier version and deletes it once none runs under it", {
    timeout: 180_000,
  }, async () => {
    // As an earlier version left the namespace: the shared ServiceAccount, Role and RoleBinding,
    // and two Agents' Deployments running under it. One of the Agents is now refused (an image
    // the install does not allow), so its Deployment stays as it is.
    await manager!.stop();
    manager = undefined;
    const sharedMeta = {
      name: "ifp-agent-runtimes",
      namespace: NS,
      labels: {
        "app.kubernetes.io/name": "ifp-runtime",
        "app.kubernetes.io/component": "shared",
        "app.kubernetes.io/part-of": "ifp-operator",
        "app.kubernetes.io/managed-by": "ifp-operator",
      },
    };
    apply({ apiVersion: "v1", kind: "ServiceAccount", metadata: sharedMeta, automountServiceAccountToken: true });
    apply({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: sharedMeta,
      rules: [{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }],
    });
    apply({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: sharedMeta,
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "ifp-agent-runtimes" },
      subjects: [{ kind: "ServiceAccount", name: "ifp-agent-runtimes", namespace: NS }],
    });
    for (const [name, extra] of [
      ["old", {}],
      ["held", { image: "elsewhere.example/ifp-runtime:1" }],
    ] as const) {
      apply(agent(name, extra));
      const uid = get("agent", name).metadata.uid;
      const labels = {
        "app.kubernetes.io/name": "ifp-runtime",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "agent",
        "app.kubernetes.io/part-of": "ifp-operator",
        "app.kubernetes.io/managed-by": "ifp-operator",
      };
      apply({
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: {
          name,
          namespace: NS,
          labels,
          ownerReferences: [
            { apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name, uid, controller: true, blockOwnerDeletion: true },
          ],
        },
        spec: {
          replicas: 1,
          // Without a kubelet no pod becomes available, so a rolling update would never finish.
          strategy: { type: "Recreate" },
          selector: { matchLabels: { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": name } },
          template: {
            metadata: { labels },
            spec: {
              serviceAccountName: "ifp-agent-runtimes",
              securityContext: { runAsNonRoot: true, runAsUser: 10001, seccompProfile: { type: "RuntimeDefault" } },
              containers: [
                {
                  name: "runtime",
                  image: base.runtimeImage,
                  securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
                },
              ],
            },
          },
        },
      });
      await until(
        `${name}'s pod under the shared ServiceAccount`,
        () => pods(name).some((p) => p.spec.serviceAccountName === "ifp-agent-runtimes") || undefined,
        45_000,
      );
    }
    await start(withPolicies);
    // The one the operator renders rolls to its own ServiceAccount; the shared one stays while the refused one runs under it.
    await until(
      "old's pods all under old-runtime",
      () => {
        const ps = pods("old");
        return ps.length > 0 &&
          ps.every((p) => p.spec.serviceAccountName === "old-runtime" && !p.metadata.deletionTimestamp)
          ? ps
          : undefined;
      },
      60_000,
    );
    await until(
      "held refused",
      () => condition(get("agent", "held"), "Stalled")?.reason === "ImageNotAllowed" || undefined,
    );
    await resyncs(manager!, 4);
    expect(
      ["serviceaccount", "role", "rolebinding"].filter((k) => !get(k, "ifp-agent-runtimes")),
      "the shared objects gone while held runs under them",
    ).toEqual([]);
    // Once the last one has rolled, they go.
    cp.kubectl(["-n", NS, "patch", "agent", "held", "--type=json", "-p", '[{"op":"remove","path":"/spec/image"}]']);
    await until(
      "the shared ServiceAccount, Role and RoleBinding to go",
      () => ["serviceaccount", "role", "rolebinding"].every((k) => !get(k, "ifp-agent-runtimes")),
      90_000,
      500,
    );
    expect(get("deployment", "held").spec.template.spec.serviceAccountName).toBe("held-runtime");
    // The passes that deleted them say so in their Events, written after the deletions: one pass,
    // or the two Agents' passes each deleting what was left when they ran.
    const deleted = () =>
      [...events("old"), ...events("held")]
        .filter((e) => e.type === "Normal")
        .map((e) => e.message as string)
        .filter((m) => /^deleted .*the namespace's ifp-agent-runtimes no runtime runs under any more/.test(m));
    const named = (kind: string) =>
      deleted().some((m) => new RegExp(`^deleted (?:[^,]+, )*${kind}/ifp-agent-runtimes, `).test(m));
    const kinds = ["ServiceAccount", "Role", "RoleBinding"];
    await until("the Events that name what was deleted", () => kinds.every(named) || undefined, 30_000, 500).catch(
      () => undefined,
    );
    expect(
      kinds.filter((k) => !named(k)),
      deleted().join("\n"),
    ).toEqual([]);
  });
});

describe("the runtimes' NetworkPolicies", () => {
  it("admit the TLS port from anywhere, metrics from the install's namespaces and the local API from the Agent's own namespace, selecting only that runtime's pods", {
    timeout: 120_000,
  }, async () => {
    apply(
      agent("bob", {
        localApi: { service: { enabled: true } },
        deployment: { sidecars: [sidecar("ui", { ports: [{ containerPort: 3000 }] })] },
      }),
    );
    apply(agent("alice", { deployment: { sidecars: [sidecar("app")], initContainers: [sidecar("init")] } }));
    const np = await until("bob's NetworkPolicy", () => get("networkpolicy", "bob"));
    expect(np.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Agent", name: "bob", controller: true }),
    ]);
    const [bobPod] = await untilPods("bob");
    const [alicePod] = await untilPods("alice");
    expect(selects(np.spec.podSelector, bobPod.metadata.labels)).toBe(true);
    expect(selects(np.spec.podSelector, alicePod.metadata.labels)).toBe(false);
    expect(np.spec.policyTypes).toEqual(["Ingress"]);
    const [https, metrics, localApi, ui, ...rest] = np.spec.ingress;
    expect(rest).toEqual([]);
    // The TLS port: no `from`, so from anywhere; a named port of the runtime container.
    expect(https).toEqual({ ports: [{ port: "https", protocol: "TCP" }] });
    const runtimePorts = bobPod.spec.containers[0].ports.map((p: any) => p.name);
    expect(runtimePorts).toEqual(expect.arrayContaining(["https", "metrics", "local-api"]));
    // Metrics: pods of the monitoring namespace only, by the name label the API server gives every namespace.
    expect(metrics.ports).toEqual([{ port: "metrics", protocol: "TCP" }]);
    expect(metrics.from).toHaveLength(1);
    expect(metrics.from[0].podSelector).toBeUndefined();
    const nsLabels = (ns: string) => cp.json(["get", "namespace", ns]).metadata.labels;
    expect(selects(metrics.from[0].namespaceSelector, nsLabels(MONITORING))).toBe(true);
    expect(selects(metrics.from[0].namespaceSelector, nsLabels(NS))).toBe(false);
    // The local API Service's port: every pod of bob's namespace, no other namespace (no namespaceSelector).
    expect(localApi).toEqual({ from: [{ podSelector: {} }], ports: [{ port: "local-api", protocol: "TCP" }] });
    expect(get("service", "bob-local-api").spec.ports[0].targetPort).toBe("local-api");
    // The port the user's sidecar declares.
    expect(ui).toEqual({ ports: [{ port: 3000, protocol: "TCP" }] });

    apply(relay("hub", { deployment: { sidecars: [sidecar("app")] } }));
    const hub = await until("hub's NetworkPolicy", () => get("networkpolicy", "hub"));
    expect(hub.spec.ingress.map((r: any) => r.ports[0].port)).toEqual(["https", "metrics"]);
  });

  it("are re-made when deleted, and deleted when the install turns them off", { timeout: 120_000 }, async () => {
    await until("bob's NetworkPolicy", () => get("networkpolicy", "bob"));
    cp.kubectl(["-n", NS, "delete", "networkpolicy", "bob"]);
    await until("bob's NetworkPolicy made again", () => get("networkpolicy", "bob"));
    await start(base);
    await until(
      "every runtime NetworkPolicy to go",
      () => (cp.json(["-n", NS, "get", "networkpolicies"]).items as any[]).length === 0 || undefined,
      60_000,
      500,
    );
    expect(
      events("bob").some(
        (e) =>
          e.reason === "Deleted" &&
          /NetworkPolicy\/bob, the install renders no runtime NetworkPolicies/.test(e.message),
      ),
    ).toBe(true);
  });
});
