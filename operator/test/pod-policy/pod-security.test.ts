// spec.deployment against a real API server with the operator running: whoever may create an
// Agent or Relay gets no more through its pod settings than the namespace's pods should have.
// What the "restricted" Pod Security Standard forbids is refused by the CRD; another resource's
// Secrets, images off the install's allow-list and placements the install has not allowed are
// refused by the operator (Ready False, Stalled, a Warning Event naming the field, no
// Deployment). What is rendered is admitted by the API server's own PodSecurity admission in a
// namespace that enforces restricted: the ReplicaSet's pods are created.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, resyncs, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager;
const NS = "restricted";
const RESYNC_MS = 400;
const operatorLog = capturedLog(600);
// The Relays' public hosts (https://<name>.example) are the namespace's, as chart value allowedHosts would allow them.
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedImages: ["example.com/*"],
  allowedHosts: { [NS]: ["*.example"] },
};

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const apply = (obj: object, extra: string[] = []) => cp.kubectl(["apply", ...extra, "-f", "-"], JSON.stringify(obj));
const agent = (name: string, deployment: unknown) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name, namespace: NS },
  spec: { agentId: `${name}-id`, deployment },
});
const relay = (name: string, deployment: unknown) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Relay",
  metadata: { name, namespace: NS },
  spec: { url: `https://${name}.example`, deployment },
});
const secret = (name: string, labels: Record<string, string> = {}) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: { name, namespace: NS, labels },
  stringData: { token: "t" },
});
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const events = (name: string) =>
  cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const sidecar = (name: string, extra: object = {}) => ({ name, image: "example.com/app:1", ...extra });

perTest(() =>
  [
    "operator log (last 150 lines):",
    ...operatorLog.lines().slice(-150),
    kubectlOrError(cp, ["-n", NS, "get", "agents,relays,deployments,replicasets,pods", "-o", "wide"]),
    kubectlOrError(cp, ["-n", NS, "get", "events", "--sort-by=.lastTimestamp"]).split("\n").slice(-40).join("\n"),
  ].join("\n"),
);

beforeAll(async () => {
  // With the controller manager: Deployments make ReplicaSets, ReplicaSets create pods, which
  // the API server's PodSecurity admission (on by default) checks against the namespace's level.
  cp = await startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] });
  cp.kubectl(["create", "namespace", NS]);
  cp.kubectl([
    "label",
    "namespace",
    NS,
    "pod-security.kubernetes.io/enforce=restricted",
    "pod-security.kubernetes.io/warn=restricted",
  ]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [NS],
    resyncMs: RESYNC_MS,
    log: operatorLog.log,
  });
  await manager.started;
  // An Agent whose generated signing Secret the others reach for.
  apply(agent("victim", undefined));
  await until("the victim's generated signing Secret", () => get("secret", "victim-signing"));
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

/** Refused by the operator: Ready False and Stalled with the reason, a Warning Event, and no Deployment over several passes. */
async function expectRefused(kind: "agent" | "relay", name: string, reason: string, field: RegExp): Promise<void> {
  const obj = await until(`${kind}/${name} Ready reason ${reason}`, () => {
    const o = get(kind, name);
    return condition(o, "Ready")?.reason === reason ? o : undefined;
  });
  expect(condition(obj, "Ready")).toMatchObject({ status: "False" });
  expect(condition(obj, "Ready").message).toMatch(field);
  expect(condition(obj, "Stalled")).toMatchObject({ status: "True", reason });
  await until(`the Warning/${reason} Event of ${name}`, () =>
    events(name).some((e) => e.type === "Warning" && e.reason === reason && field.test(e.message)),
  );
  await resyncs(manager, 3);
  expect(get("deployment", name), `a Deployment for ${name}`).toBeUndefined();
}

/** The pods of a Deployment were created, so admitted; and no FailedCreate of PodSecurity on its ReplicaSets. */
async function expectAdmitted(name: string): Promise<any[]> {
  const pods = await until(
    `pods of ${name}`,
    () => {
      const items = cp.json(["-n", NS, "get", "pods", "-l", `app.kubernetes.io/instance=${name}`]).items as any[];
      return items.length ? items : undefined;
    },
    45_000,
  );
  const refusals = (
    cp.json(["-n", NS, "get", "events", "--field-selector", "reason=FailedCreate"]).items as any[]
  ).filter((e) => e.involvedObject.name.startsWith(`${name}-`));
  expect(refusals.map((e) => e.message)).toEqual([]);
  return pods;
}

describe("spec.deployment under the restricted Pod Security Standard", () => {
  it("renders sidecars, a native sidecar, the Agent's own labelled Secret and an emptyDir into pods a restricted namespace admits", async () => {
    apply(secret("shop-app", { "ifp.dev/agent": "shop" }));
    apply(
      agent("shop", {
        env: [{ name: "APP_TOKEN", valueFrom: { secretKeyRef: { name: "shop-app", key: "token" } } }],
        sidecars: [
          sidecar("app", {
            env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "shop-app", key: "token" } } }],
            envFrom: [{ secretRef: { name: "shop-app" } }],
            ports: [{ containerPort: 8080 }],
            volumeMounts: [
              { name: "scratch", mountPath: "/scratch" },
              { name: "app-secret", mountPath: "/secret" },
              { name: "both", mountPath: "/both" },
            ],
            securityContext: { readOnlyRootFilesystem: true, capabilities: { add: ["NET_BIND_SERVICE"] } },
          }),
        ],
        initContainers: [sidecar("proxy", { restartPolicy: "Always", image: "example.com/proxy:1" })],
        volumes: [
          { name: "scratch", emptyDir: { sizeLimit: "64Mi" } },
          { name: "app-secret", secret: { secretName: "shop-app" } },
          {
            name: "both",
            projected: {
              sources: [
                { secret: { name: "shop-app" } },
                { downwardAPI: { items: [{ path: "labels", fieldRef: { fieldPath: "metadata.labels" } }] } },
              ],
            },
          },
        ],
      }),
    );
    const dep = await until("the Deployment", () => get("deployment", "shop"));
    const pod = dep.spec.template.spec;
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    for (const c of [...pod.containers.slice(1), ...pod.initContainers]) {
      expect(c.securityContext, c.name).toMatchObject({
        runAsNonRoot: true,
        allowPrivilegeEscalation: false,
        seccompProfile: { type: "RuntimeDefault" },
        capabilities: { drop: ["ALL"] },
      });
    }
    expect(pod.containers[1].securityContext.capabilities).toEqual({ add: ["NET_BIND_SERVICE"], drop: ["ALL"] });
    // The API server's own verdict on the template: a Pod of it, created for real by the
    // ReplicaSet, and a server-side dry run of the same.
    const pods = await expectAdmitted("shop");
    expect(pods[0].spec.containers.map((c: any) => c.name)).toEqual(["runtime", "app"]);
    cp.kubectl(
      ["create", "--dry-run=server", "-f", "-"],
      JSON.stringify({ apiVersion: "v1", kind: "Pod", metadata: { name: "shop-dry-run", namespace: NS }, spec: pod }),
    );
    // The status is written after the children, so it may follow the pods.
    await until(
      "shop's Stalled False",
      () => condition(get("agent", "shop"), "Stalled")?.status === "False" || undefined,
    );
  });

  it("renders a Relay's sidecar into pods a restricted namespace admits", async () => {
    apply(relay("hub", { sidecars: [sidecar("metrics")] }));
    await until("the relay's Deployment", () => get("deployment", "hub"));
    await expectAdmitted("hub");
  });

  // What the restricted standard forbids, refused by the CRD before anything is stored.
  const crdRefusals: [string, unknown, RegExp][] = [
    [
      "a privileged sidecar",
      { sidecars: [sidecar("miner", { securityContext: { privileged: true } })] },
      /spec.deployment.sidecars\[0\].securityContext: Invalid value.*privileged cannot be true/,
    ],
    [
      "an init container allowed to escalate",
      { initContainers: [sidecar("i", { securityContext: { allowPrivilegeEscalation: true } })] },
      /allowPrivilegeEscalation cannot be true/,
    ],
    [
      "added capabilities",
      { sidecars: [sidecar("miner", { securityContext: { capabilities: { add: ["SYS_ADMIN", "NET_ADMIN"] } } })] },
      /capabilities.add may hold only NET_BIND_SERVICE/,
    ],
    [
      "a drop list without ALL",
      { sidecars: [sidecar("app", { securityContext: { capabilities: { drop: ["NET_RAW"] } } })] },
      /capabilities.drop must include ALL/,
    ],
    [
      "a sidecar as root",
      { sidecars: [sidecar("app", { securityContext: { runAsUser: 0 } })] },
      /runAsUser cannot be 0/,
    ],
    [
      "a sidecar allowed to be root",
      { sidecars: [sidecar("app", { securityContext: { runAsNonRoot: false } })] },
      /runAsNonRoot cannot be false/,
    ],
    [
      "an Unconfined seccomp profile of a sidecar",
      { sidecars: [sidecar("app", { securityContext: { seccompProfile: { type: "Unconfined" } } })] },
      /seccompProfile.type must be RuntimeDefault or Localhost/,
    ],
    [
      "an Unconfined seccomp profile of the pod",
      { securityContext: { seccompProfile: { type: "Unconfined" } } },
      /spec.deployment.securityContext: Invalid value.*seccompProfile.type must be RuntimeDefault or Localhost/,
    ],
    [
      "an Unconfined AppArmor profile",
      { sidecars: [sidecar("app", { securityContext: { appArmorProfile: { type: "Unconfined" } } })] },
      /appArmorProfile.type must be RuntimeDefault or Localhost/,
    ],
    [
      "an AppArmor annotation that unconfines",
      { podAnnotations: { "container.apparmor.security.beta.kubernetes.io/app": "unconfined" } },
      /podAnnotations cannot set a seccomp profile/,
    ],
    [
      "an SELinux role",
      { securityContext: { seLinuxOptions: { role: "sysadm_r" } } },
      /seLinuxOptions may set only a type/,
    ],
    [
      "an unmasked /proc",
      { sidecars: [sidecar("app", { securityContext: { procMount: "Unmasked" } })] },
      /procMount must be Default/,
    ],
    [
      "a Windows host process",
      { sidecars: [sidecar("app", { securityContext: { windowsOptions: { hostProcess: true } } })] },
      /windowsOptions.hostProcess cannot be true/,
    ],
    [
      "an unsafe sysctl",
      { securityContext: { sysctls: [{ name: "kernel.core_pattern", value: "|/x" }] } },
      /sysctls may set only the safe ones/,
    ],
    [
      "a host port",
      { sidecars: [sidecar("app", { ports: [{ containerPort: 22, hostPort: 22 }] })] },
      /spec.deployment.sidecars\[0\]: Invalid value.*hostPort cannot be set/,
    ],
    [
      "a hostPath volume of the node's root",
      { volumes: [{ name: "root", hostPath: { path: "/" } }] },
      /spec.deployment.volumes\[0\]: Invalid value.*a volume's type must be one of configMap, secret, emptyDir, projected, downwardAPI, persistentVolumeClaim, ephemeral, csi/,
    ],
    [
      "an nfs volume",
      { volumes: [{ name: "n", nfs: { server: "10.0.0.9", path: "/" } }] },
      /a volume's type must be one of/,
    ],
  ];
  it.each(crdRefusals)("refuses %s in the CRD", (_n, deployment, message) => {
    expect(() => apply(agent("refused", deployment))).toThrow(message);
    expect(get("agent", "refused")).toBeUndefined();
  });

  it("never renders host namespaces: they are no field of spec.deployment (refused by strict validation, dropped otherwise)", async () => {
    const host = { hostNetwork: true, hostPID: true, hostIPC: true, sidecars: [sidecar("app")] };
    expect(() => apply(agent("host", host))).toThrow(/unknown field "spec.deployment.hostNetwork"/);
    apply(agent("host", host), ["--validate=false"]);
    const dep = await until("the Deployment", () => get("deployment", "host"));
    for (const key of ["hostNetwork", "hostPID", "hostIPC"]) expect(dep.spec.template.spec[key], key).toBeUndefined();
    await expectAdmitted("host");
  });

  // The measured ways around the Secret rule, each refused by the operator with the field.
  const victimSigning = "victim-signing";
  const foreign: [string, unknown, RegExp][] = [
    [
      "a volume of another Agent's signing Secret",
      {
        volumes: [{ name: "keys", secret: { secretName: victimSigning } }],
        sidecars: [sidecar("app", { volumeMounts: [{ name: "keys", mountPath: "/keys" }] })],
      },
      /^spec.deployment.volumes\[0\].secret.secretName: Secret victim-signing was not created by the operator for Agent/,
    ],
    [
      "an env var from another Agent's signing Secret",
      { env: [{ name: "KEY", valueFrom: { secretKeyRef: { name: victimSigning, key: "signing.key" } } }] },
      /^spec.deployment.env\[0\].valueFrom.secretKeyRef.name: Secret victim-signing/,
    ],
    [
      "a sidecar's env var from it",
      {
        sidecars: [
          sidecar("app", {
            env: [{ name: "KEY", valueFrom: { secretKeyRef: { name: victimSigning, key: "signing.key" } } }],
          }),
        ],
      },
      /^spec.deployment.sidecars\[0\].env\[0\].valueFrom.secretKeyRef.name: Secret victim-signing/,
    ],
    [
      "a sidecar's envFrom of it",
      { sidecars: [sidecar("app", { envFrom: [{ secretRef: { name: victimSigning } }] })] },
      /^spec.deployment.sidecars\[0\].envFrom\[0\].secretRef.name: Secret victim-signing/,
    ],
    [
      "an init container's envFrom of it",
      { initContainers: [sidecar("i", { envFrom: [{ secretRef: { name: victimSigning } }] })] },
      /^spec.deployment.initContainers\[0\].envFrom\[0\].secretRef.name: Secret victim-signing/,
    ],
    [
      "a projected source of it",
      { volumes: [{ name: "p", projected: { sources: [{ secret: { name: victimSigning } }] } }] },
      /^spec.deployment.volumes\[0\].projected.sources\[0\].secret.name: Secret victim-signing/,
    ],
  ];
  it.each(foreign.map(([n, d, m], i) => [n, d, m, `thief-${i}`] as const))(
    "refuses %s: ForeignSecret, no Deployment",
    async (_n, deployment, field, name) => {
      apply(agent(name, deployment));
      await expectRefused("agent", name, "ForeignSecret", field);
    },
  );

  it("refuses a Secret that does not exist yet (it could be another's, made later), and renders once it exists labelled for the Agent", async () => {
    apply(agent("early", { volumes: [{ name: "k", secret: { secretName: "early-data" } }] }));
    await expectRefused(
      "agent",
      "early",
      "SecretMissing",
      /^spec.deployment.volumes\[0\].secret.secretName: Secret early-data does not exist in namespace restricted; create it with the label ifp.dev\/agent=early/,
    );
    apply(secret("early-data", { "ifp.dev/agent": "early" }));
    await until("the Deployment once the Secret is there", () => get("deployment", "early"), 45_000);
  });

  it("refuses a Relay's volume of an Agent's signing Secret", async () => {
    apply(relay("thief-hub", { volumes: [{ name: "keys", secret: { secretName: victimSigning } }] }));
    await expectRefused(
      "relay",
      "thief-hub",
      "ForeignSecret",
      /^spec.deployment.volumes\[0\].secret.secretName: Secret victim-signing was not created by the operator for Relay thief-hub and has no label ifp.dev\/relay=thief-hub/,
    );
  });

  it("holds sidecar and init container images to the install's allow-list", async () => {
    apply(agent("miner", { sidecars: [sidecar("app"), { name: "miner", image: "evil.example/miner:1" }] }));
    await expectRefused(
      "agent",
      "miner",
      "ImageNotAllowed",
      /^spec.deployment.sidecars\[1\].image: evil.example\/miner:1 is not among the images this install allows/,
    );
    apply(agent("init-miner", { initContainers: [{ name: "miner", image: "evil.example/miner:1" }] }));
    await expectRefused(
      "agent",
      "init-miner",
      "ImageNotAllowed",
      /^spec.deployment.initContainers\[0\].image: evil.example\/miner:1/,
    );
  });

  const placement: [string, unknown, string, RegExp][] = [
    [
      "a toleration of every taint",
      { tolerations: [{ operator: "Exists" }] },
      "TolerationNotAllowed",
      /^spec.deployment.tolerations\[0\]: \{"operator":"Exists"\} is not among the tolerations this install allows \(none\)/,
    ],
    [
      "the priority class system-node-critical",
      { priorityClassName: "system-node-critical" },
      "PriorityClassNotAllowed",
      /^spec.deployment.priorityClassName: system-node-critical is not among/,
    ],
    [
      "a control-plane nodeSelector",
      { nodeSelector: { "node-role.kubernetes.io/control-plane": "" } },
      "NodeLabelNotAllowed",
      /^spec.deployment.nodeSelector: node label "node-role.kubernetes.io\/control-plane"/,
    ],
    [
      "a node affinity to the control plane",
      {
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: "node-role.kubernetes.io/control-plane", operator: "Exists" }] },
              ],
            },
          },
        },
      },
      "NodeLabelNotAllowed",
      /^spec.deployment.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms\[0\].matchExpressions\[0\].key/,
    ],
    [
      "all three at once, as measured",
      {
        tolerations: [{ operator: "Exists" }],
        priorityClassName: "system-node-critical",
        nodeSelector: { "node-role.kubernetes.io/control-plane": "" },
        sidecars: [sidecar("app")],
      },
      "NodeLabelNotAllowed",
      /^spec.deployment.nodeSelector/,
    ],
  ];
  it.each(placement.map(([n, d, r, m], i) => [n, d, r, m, `placed-${i}`] as const))(
    "refuses %s unless the install allows it",
    async (_n, deployment, reason, field, name) => {
      apply(agent(name, deployment));
      await expectRefused("agent", name, reason, field);
    },
  );
});
