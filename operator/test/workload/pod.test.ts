// spec.deployment on a real API server: the Deployment the operator renders from sidecars and
// every pod setting is one the API server accepts and stores as given; the CRD's CEL rules
// refuse what would collide with the runtime's own pod, each with its message; an edit of
// spec.deployment reaches the Deployment, and a settled one writes nothing more.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, perTest, resyncs, until } from "../support/helpers.ts";

let cp: ControlPlane;
let manager: RunningManager;
const NS = "pods";
const RESYNC_MS = 1_000;
const operatorLog = capturedLog(600);
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  runtimeImagePullSecrets: ["operator-cred"],
  // The placements the pod settings below use, allowed by the install (pod-policy.ts).
  allowedNodeLabels: ["kubernetes.io/os", "disk"],
  allowedTolerations: [{ key: "dedicated", value: "ifp", effect: "NoSchedule" }],
  allowedPriorityClasses: ["ifp-high"],
  // The Relay's public host, allowed its namespace (chart value allowedHosts).
  allowedHosts: { [NS]: ["hub.example"] },
};

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const apply = (obj: object) => cp.kubectl(["apply", "-f", "-"], JSON.stringify(obj));
const agent = (name: string, deployment: unknown) => ({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name, namespace: NS },
  spec: { agentId: `${name}-id`, deployment },
});
const reason = (kind: string, name: string) =>
  get(kind, name)?.status?.conditions?.find((c: any) => c.type === "Ready")?.reason;
/** Every child applied: without a controller manager the Deployment's rollout stays pending. */
const applied = (kind: string, name: string) =>
  until(`${kind}/${name} applied`, () => reason(kind, name) === "RolloutPending");
/** Writes of Deployments so far (the operator's own counter of API writes). */
const deploymentWrites = async () =>
  (await manager.metrics.writes.get()).values
    .filter((v) => v.labels.kind === "Deployment")
    .reduce((a, v) => a + v.value, 0);

perTest(() =>
  [
    `operator log (last 150 lines):`,
    ...operatorLog.lines().slice(-150),
    cp.kubectl(["-n", NS, "get", "agents,relays,deployments", "-o", "wide"]),
  ].join("\n"),
);

beforeAll(async () => {
  // No controller manager: the API server's validation of the Deployment is what is tested.
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManager: false,
  });
  cp.kubectl(["create", "namespace", NS]);
  // The Secret each Agent's FROM_SECRET reads, labelled for that Agent.
  for (const name of ["full", "settled"])
    cp.kubectl(["-n", NS, "create", "secret", "generic", `${name}-app`, "--from-literal=k=v"]),
      cp.kubectl(["-n", NS, "label", "secret", `${name}-app`, `ifp.dev/agent=${name}`]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [NS],
    resyncMs: RESYNC_MS,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});

/** Every pod setting at once, quantities written as people write them; FROM_SECRET reads the Agent's own Secret. */
const everything = (name: string) => ({
  sidecars: [
    {
      name: "app",
      image: "example.com/app:1",
      args: ["--agent-api=http://127.0.0.1:8081", "--listen=127.0.0.1:8080"],
      ports: [{ name: "app", containerPort: 8080 }],
      // What the API server does not store (an empty list, an empty value, readOnly false) is
      // not applied either, or every pass would write again.
      command: [],
      env: [
        { name: "MODE", value: "sidecar" },
        { name: "EMPTY", value: "" },
      ],
      resources: { requests: { cpu: "0.25", memory: "64Mi" }, limits: { memory: "0.5Gi" } },
      volumeMounts: [{ name: "shared", mountPath: "/shared", readOnly: false }],
      readinessProbe: { httpGet: { path: "/ready", port: 8080 } },
      securityContext: { readOnlyRootFilesystem: true },
    },
  ],
  initContainers: [
    {
      name: "prepare",
      image: "example.com/app:1",
      command: ["prepare"],
      volumeMounts: [{ name: "shared", mountPath: "/shared" }],
    },
  ],
  resources: { requests: { cpu: "1000m", memory: "256Mi" }, limits: { cpu: 2, memory: "1024Mi" } },
  env: [
    { name: "HTTPS_PROXY", value: "http://proxy:3128" },
    { name: "FROM_SECRET", valueFrom: { secretKeyRef: { name: `${name}-app`, key: "k", optional: true } } },
  ],
  volumes: [
    { name: "shared", emptyDir: { sizeLimit: "1.5Gi" } },
    { name: "extra", configMap: { name: "extra", optional: true } },
  ],
  volumeMounts: [{ name: "extra", mountPath: "/extra", readOnly: true }],
  imagePullSecrets: [{ name: "app-cred" }],
  nodeSelector: { "kubernetes.io/os": "linux" },
  tolerations: [{ key: "dedicated", operator: "Equal", value: "ifp", effect: "NoSchedule" }],
  affinity: {
    podAntiAffinity: {
      preferredDuringSchedulingIgnoredDuringExecution: [
        {
          weight: 100,
          podAffinityTerm: {
            topologyKey: "kubernetes.io/hostname",
            labelSelector: { matchLabels: { "app.kubernetes.io/instance": "full" } },
          },
        },
      ],
    },
  },
  topologySpreadConstraints: [
    {
      maxSkew: 1,
      topologyKey: "topology.kubernetes.io/zone",
      whenUnsatisfiable: "ScheduleAnyway",
      labelSelector: { matchLabels: { "app.kubernetes.io/instance": "full" } },
    },
  ],
  securityContext: { fsGroup: 2000 },
  priorityClassName: "ifp-high",
  podAnnotations: { "example.com/scrape": "true" },
  podLabels: { team: "payments" },
});

describe("spec.deployment on the API server", () => {
  it("renders sidecars and every pod setting into a Deployment the API server accepts", async () => {
    const all = everything("full");
    apply(agent("full", all));
    await applied("agent", "full");
    const dep = get("deployment", "full");
    const tpl = dep.spec.template;
    const pod = tpl.spec;
    expect(pod.containers.map((c: any) => c.name)).toEqual(["runtime", "app"]);
    const [runtime, app] = pod.containers;
    expect(runtime.args[0]).toBe("agent");
    expect(runtime.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(runtime.resources).toEqual({ requests: { cpu: "1", memory: "256Mi" }, limits: { cpu: "2", memory: "1Gi" } });
    expect(runtime.env.map((e: any) => e.name)).toEqual([
      "IFP_LOG_LEVEL",
      "HTTPS_PROXY",
      "FROM_SECRET",
      "NODE_OPTIONS",
      "MALLOC_ARENA_MAX",
    ]);
    // The heap follows the 1Gi limit: a quarter of it for the old generation.
    expect(runtime.env.at(-2)).toEqual({
      name: "NODE_OPTIONS",
      value: "--max-old-space-size=256 --max-semi-space-size=4",
    });
    expect(runtime.volumeMounts.map((m: any) => m.mountPath)).toEqual([
      "/etc/ifp/manifest",
      "/etc/ifp/tls",
      "/tmp",
      "/etc/ifp/trust",
      "/etc/ifp/signing",
      "/var/run/secrets/kubernetes.io/serviceaccount",
      "/extra",
    ]);
    expect(app).toMatchObject({
      image: "example.com/app:1",
      args: all.sidecars[0]!.args,
      ports: [{ name: "app", containerPort: 8080, protocol: "TCP" }],
      resources: { requests: { cpu: "250m", memory: "64Mi" }, limits: { memory: "512Mi" } },
      securityContext: {
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        seccompProfile: { type: "RuntimeDefault" },
      },
    });
    expect(pod.initContainers).toEqual([
      expect.objectContaining({
        name: "prepare",
        command: ["prepare"],
        securityContext: {
          allowPrivilegeEscalation: false,
          capabilities: { drop: ["ALL"] },
          runAsNonRoot: true,
          seccompProfile: { type: "RuntimeDefault" },
        },
      }),
    ]);
    expect(pod.volumes.map((v: any) => v.name)).toEqual([
      "manifest",
      "tls",
      "tmp",
      "trust",
      "signing",
      "kube-api",
      "shared",
      "extra",
    ]);
    expect(pod.volumes.find((v: any) => v.name === "shared").emptyDir).toEqual({ sizeLimit: "1536Mi" });
    expect(pod.imagePullSecrets).toEqual([{ name: "operator-cred" }, { name: "app-cred" }]);
    expect(pod).toMatchObject({
      nodeSelector: all.nodeSelector,
      tolerations: all.tolerations,
      affinity: all.affinity,
      topologySpreadConstraints: all.topologySpreadConstraints,
      priorityClassName: "ifp-high",
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 10001,
        runAsGroup: 10001,
        fsGroup: 2000,
        seccompProfile: { type: "RuntimeDefault" },
      },
    });
    expect(tpl.metadata.labels).toMatchObject({
      team: "payments",
      "app.kubernetes.io/name": "ifp-runtime",
      "app.kubernetes.io/instance": "full",
    });
    expect(tpl.metadata.annotations).toMatchObject({
      "example.com/scrape": "true",
      "ifp.dev/config-hash": expect.stringMatching(/^[0-9a-f]{16}$/),
    });
    expect(dep.spec.selector.matchLabels).toEqual({
      "app.kubernetes.io/name": "ifp-runtime",
      "app.kubernetes.io/instance": "full",
    });
  });

  it("settles: what it applied is what the API server stored, so later passes write nothing", {
    timeout: 60_000,
  }, async () => {
    apply(agent("settled", everything("settled")));
    await applied("agent", "settled");
    const rv = get("deployment", "settled").metadata.resourceVersion;
    const writes = await deploymentWrites();
    // Several resyncs of every Agent in the namespace …
    await resyncs(manager, 3, 20_000);
    // … and no Deployment written again.
    expect(await deploymentWrites()).toBe(writes);
    expect(get("deployment", "settled").metadata.resourceVersion).toBe(rv);
  });

  it("carries an edit of spec.deployment to the Deployment, and drops what was removed", async () => {
    apply(
      agent("edit", {
        sidecars: [{ name: "app", image: "example.com/app:1" }],
        podLabels: { team: "a" },
        nodeSelector: { disk: "ssd" },
      }),
    );
    const first = await until("the Deployment", () => get("deployment", "edit"));
    expect(first.spec.template.spec.containers[1].image).toBe("example.com/app:1");
    apply(
      agent("edit", {
        sidecars: [
          { name: "app", image: "example.com/app:2" },
          { name: "proxy", image: "example.com/proxy:1" },
        ],
        podLabels: { team: "b" },
      }),
    );
    const second = await until("the new sidecar image", () => {
      const d = get("deployment", "edit");
      return d?.spec.template.spec.containers[1]?.image === "example.com/app:2" ? d : undefined;
    });
    expect(second.spec.template.spec.containers.map((c: any) => c.name)).toEqual(["runtime", "app", "proxy"]);
    expect(second.spec.template.metadata.labels.team).toBe("b");
    expect(second.spec.template.spec.nodeSelector).toBeUndefined();
    expect(second.metadata.generation).toBeGreaterThan(first.metadata.generation);
    // Without spec.deployment the pod is the runtime's alone again.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "edit",
      "--type=json",
      "-p",
      '[{"op":"remove","path":"/spec/deployment"}]',
    ]);
    const third = await until("the sidecars gone", () => {
      const d = get("deployment", "edit");
      return d?.spec.template.spec.containers.length === 1 ? d : undefined;
    });
    expect(third.spec.template.metadata.labels.team).toBeUndefined();
  });

  it("renders a Relay's sidecars as well", async () => {
    apply({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name: "hub", namespace: NS },
      spec: {
        url: "https://hub.example",
        deployment: { sidecars: [{ name: "metrics", image: "example.com/exporter:1" }] },
      },
    });
    const dep = await until("the relay's Deployment", () => get("deployment", "hub"));
    expect(dep.spec.template.spec.containers.map((c: any) => c.name)).toEqual(["runtime", "metrics"]);
    expect(dep.spec.template.spec.containers[0].args[0]).toBe("relay");
  });

  const sidecar = (name: string, extra: object = {}) => ({ name, image: "example.com/app:1", ...extra });
  const refusals: [string, unknown, RegExp][] = [
    [
      "a sidecar named runtime",
      { sidecars: [sidecar("runtime")] },
      /spec.deployment.sidecars\[0\]: Invalid value.*container name 'runtime' is the runtime's own/,
    ],
    [
      "an init container named runtime",
      { initContainers: [sidecar("runtime")] },
      /spec.deployment.initContainers\[0\].*container name 'runtime' is the runtime's own/,
    ],
    [
      "a container without an image",
      { sidecars: [{ name: "app" }] },
      /spec.deployment.sidecars\[0\].image: Required value/,
    ],
    [
      "a container name that is not a DNS label",
      { sidecars: [sidecar("App")] },
      /spec.deployment.sidecars\[0\].name: Invalid value: "App"/,
    ],
    [
      "two sidecars of a name",
      { sidecars: [sidecar("app"), sidecar("app")] },
      /spec.deployment.sidecars\[1\]: Duplicate value/,
    ],
    [
      "a sidecar and an init container of a name",
      { sidecars: [sidecar("app")], initContainers: [sidecar("app")] },
      /a name is used by both a sidecar and an init container/,
    ],
    ...["manifest", "tls", "tmp", "signing", "nats", "trust", "local-api"].map((v): [string, unknown, RegExp] => [
      `the runtime's volume ${v}`,
      { volumes: [{ name: v, emptyDir: {} }] },
      /spec.deployment.volumes\[0\].*volume name is one of the runtime's own/,
    ]),
    [
      "two volumes of a name",
      {
        volumes: [
          { name: "d", emptyDir: {} },
          { name: "d", emptyDir: {} },
        ],
      },
      /spec.deployment.volumes\[1\]: Duplicate value/,
    ],
    [
      "a mount over /tmp",
      { volumes: [{ name: "d", emptyDir: {} }], volumeMounts: [{ name: "d", mountPath: "/tmp" }] },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a mount under /etc/ifp",
      { volumes: [{ name: "d", emptyDir: {} }], volumeMounts: [{ name: "d", mountPath: "/etc/ifp/signing" }] },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a mount over the runtime's token",
      {
        volumes: [{ name: "d", emptyDir: {} }],
        volumeMounts: [{ name: "d", mountPath: "/var/run/secrets/kubernetes.io/serviceaccount" }],
      },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a mount of the runtime's own volume",
      { volumeMounts: [{ name: "signing", mountPath: "/keys" }] },
      /each of volumeMounts must name a volume of spec.deployment.volumes/,
    ],
    [
      "an IFP_ env name",
      { env: [{ name: "IFP_NATS_TOKEN", value: "x" }] },
      /env names starting with IFP_ are the runtime's own/,
    ],
    [
      "two env vars of a name",
      {
        env: [
          { name: "A", value: "1" },
          { name: "A", value: "2" },
        ],
      },
      /spec.deployment.env\[1\]: Duplicate value/,
    ],
    ["runAsNonRoot false", { securityContext: { runAsNonRoot: false } }, /runAsNonRoot cannot be false/],
    ["runAsUser 0", { securityContext: { runAsUser: 0 } }, /runAsUser cannot be 0/],
    [
      "a sidecar as root",
      { sidecars: [sidecar("app", { securityContext: { runAsUser: 0 } })] },
      /spec.deployment.sidecars\[0\].securityContext.*runAsUser cannot be 0/,
    ],
    ["a bad quantity", { resources: { limits: { memory: "lots" } } }, /spec.deployment.resources.limits.memory/],
    [
      "a fractional number for a quantity",
      { resources: { requests: { cpu: 0.5 } } },
      /spec.deployment.resources.requests.cpu.*must be of type integer,string/,
    ],
    [
      "a podLabel over app.kubernetes.io/name",
      { podLabels: { "app.kubernetes.io/name": "x" } },
      /podLabels cannot set the labels the operator sets/,
    ],
    [
      "a podLabel over app.kubernetes.io/instance",
      { podLabels: { "app.kubernetes.io/instance": "other" } },
      /podLabels cannot set the labels the operator sets/,
    ],
    ["a podLabel key that is not a key", { podLabels: { "a b": "x" } }, /podLabels keys must be Kubernetes label keys/],
    [
      "a podLabel value that is not a value",
      { podLabels: { a: "not ok" } },
      /spec.deployment.podLabels.a: Invalid value/,
    ],
    [
      "a podAnnotation over the config hash",
      { podAnnotations: { "ifp.dev/config-hash": "0" } },
      /podAnnotations cannot use the prefix ifp.dev\//,
    ],
    [
      "an env value that is not a string",
      { env: [{ name: "A", value: 1 }] },
      /spec.deployment.env\[0\].value: Invalid value/,
    ],
    [
      "two pull secrets of a name",
      { imagePullSecrets: [{ name: "r" }, { name: "r" }] },
      /spec.deployment.imagePullSecrets\[1\]: Duplicate value/,
    ],
    [
      "a podAnnotation key that is not a key",
      { podAnnotations: { "/x": "y" } },
      /podAnnotations keys must be Kubernetes annotation keys/,
    ],
    [
      "a sidecar that is not an object",
      { sidecars: ["app"] },
      /spec.deployment.sidecars\[0\]: Invalid value: "string"/,
    ],
  ];
  it.each(refusals)("refuses %s with its message", (_n, deployment, message) => {
    expect(() => apply(agent("refused", deployment))).toThrow(message);
  });

  it("reports a container the CRD passes through but the API server refuses as ReconcileFailed, with the API server's message", async () => {
    apply(agent("port", { sidecars: [sidecar("app", { ports: [{ containerPort: 70000 }] })] }));
    await until("ReconcileFailed", () => reason("agent", "port") === "ReconcileFailed");
    const ready = get("agent", "port").status.conditions.find((c: any) => c.type === "Ready");
    expect(ready.message).toMatch(/containerPort.*70000|70000.*containerPort/);
    expect(get("deployment", "port")).toBeUndefined();
    // Fixed in the spec, it is applied.
    apply(agent("port", { sidecars: [sidecar("app", { ports: [{ containerPort: 7000 }] })] }));
    const dep = await until("the Deployment", () => get("deployment", "port"), 40_000);
    expect(dep.spec.template.spec.containers[1].ports[0].containerPort).toBe(7000);
  });

  it("refuses an edit into a colliding name, and keeps the Deployment as it was", async () => {
    apply(agent("kept", { sidecars: [sidecar("app")] }));
    const before = await until("the Deployment", () => get("deployment", "kept"));
    expect(() =>
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "agent",
        "kept",
        "--type=merge",
        "-p",
        JSON.stringify({ spec: { deployment: { sidecars: [sidecar("runtime")] } } }),
      ]),
    ).toThrow(/container name 'runtime' is the runtime's own/);
    await resyncs(manager, 2);
    expect(get("deployment", "kept").metadata.resourceVersion, "the Deployment written").toBe(
      before.metadata.resourceVersion,
    );
  });
});
