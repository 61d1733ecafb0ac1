import { describe, expect, it } from "vitest";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { desiredAgentChildren, type AgentResource } from "../../kinds/agent/desired.ts";
import { desiredRelayChildren } from "../../kinds/relay/desired.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { canonicalQuantity, tidy, withPodSettings } from "./pod.ts";

const meta = { name: "alice", namespace: "team", uid: "uid-1" };
const settings = {
  runtimeImage: "img:1",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://n:4222",
  runtimeImagePullSecrets: ["operator-cred"],
};
const inputs = {
  settings,
  signing: { secretName: "alice-signing", created: "2026-01-01T00:00:01Z", publicKey: "k".repeat(43) },
  tlsSecret: "alice-tls",
};
const deploymentOf = (deployment?: unknown): any => {
  const a = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: meta,
    spec: { agentId: "alice@example", ...(deployment ? { deployment } : {}) },
  });
  return desiredAgentChildren({ ...a, metadata: meta } as AgentResource, inputs).find((c) => c.kind === "Deployment");
};
const podOf = (deployment?: unknown) => deploymentOf(deployment).spec.template.spec;
const runtimeOf = (deployment?: unknown) => podOf(deployment).containers[0];

describe("canonicalQuantity: the form the API server stores", () => {
  it.each([
    ["1000m", "1"],
    ["0.5", "500m"],
    ["1.5", "1500m"],
    [".5", "500m"],
    ["100m", "100m"],
    ["2000", "2k"],
    ["1500", "1500"],
    [1, "1"],
    [0.25, "250m"],
    [2, "2"],
    ["0", "0"],
    ["0Mi", "0"],
    ["128Mi", "128Mi"],
    ["1024Mi", "1Gi"],
    ["1.5Gi", "1536Mi"],
    ["0.5Gi", "512Mi"],
    ["0.5Ki", "512"],
    ["1Ki", "1Ki"],
    ["1000Mi", "1000Mi"],
    ["100M", "100M"],
    ["1000M", "1G"],
    ["1e3", "1e3"],
    ["1E6", "1e6"],
    ["1.5e3", "1500"],
    ["1e-3", "1e-3"],
    ["1n", "1n"],
    ["0.1n", "1n"],
    ["1u", "1u"],
    ["+1", "1"],
    ["-1", "-1"],
  ] as const)("%s → %s", (input, want) => {
    expect(canonicalQuantity(input)).toBe(want);
  });
  it("returns what it cannot read as it is", () => {
    expect(canonicalQuantity("lots")).toBe("lots");
    expect(canonicalQuantity("1e999")).toBe("1e999");
  });
});

describe("tidy: only what the API server stores", () => {
  it("drops nulls, empty lists, readOnly false of a mount and an empty env value", () => {
    expect(
      tidy({
        name: "a",
        args: [],
        command: null,
        env: [
          { name: "E", value: "" },
          { name: "F", value: "x" },
        ],
        volumeMounts: [
          { name: "v", mountPath: "/v", readOnly: false },
          { name: "w", mountPath: "/w", readOnly: true },
        ],
      }),
    ).toEqual({
      name: "a",
      env: [{ name: "E" }, { name: "F", value: "x" }],
      volumeMounts: [
        { name: "v", mountPath: "/v" },
        { name: "w", mountPath: "/w", readOnly: true },
      ],
    });
  });
  it("keeps what means something: empty objects and false of other fields", () => {
    const kept = {
      emptyDir: {},
      securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: false },
      configMap: { name: "c", optional: false },
      port: 0,
      value: "",
    };
    expect(tidy(kept)).toEqual(kept);
  });
});

describe("withPodSettings", () => {
  it("leaves the Deployment as it was without spec.deployment", () => {
    const before = deploymentOf();
    expect(withPodSettings(before, undefined)).toBe(before);
    // An empty spec.deployment changes only the manifest (and so the config hash), not the pod.
    expect(podOf({})).toEqual(podOf());
  });

  const restricted = {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ["ALL"] },
    runAsNonRoot: true,
    seccompProfile: { type: "RuntimeDefault" },
  };
  it("adds sidecars after the runtime container, with what the restricted standard requires under their own security context", () => {
    const pod = podOf({
      sidecars: [
        { name: "app", image: "app:1", ports: [{ containerPort: 8080 }] },
        {
          name: "ro",
          image: "ro:1",
          securityContext: { readOnlyRootFilesystem: true, capabilities: { add: ["NET_BIND_SERVICE"] } },
        },
      ],
    });
    expect(pod.containers.map((c: any) => c.name)).toEqual(["runtime", "app", "ro"]);
    expect(pod.containers[1]).toEqual({
      name: "app",
      image: "app:1",
      ports: [{ containerPort: 8080 }],
      securityContext: restricted,
    });
    // The container's own keys win; capabilities it adds keep ALL dropped.
    expect(pod.containers[2].securityContext).toEqual({
      ...restricted,
      readOnlyRootFilesystem: true,
      capabilities: { add: ["NET_BIND_SERVICE"], drop: ["ALL"] },
    });
  });

  it("keeps a container's own drop list and profile (the schema has them as strict as restricted)", () => {
    const sc = {
      capabilities: { drop: ["ALL", "NET_RAW"] },
      seccompProfile: { type: "Localhost", localhostProfile: "p.json" },
      runAsUser: 2000,
    };
    const c = podOf({ initContainers: [{ name: "i", image: "i", securityContext: sc }] }).initContainers[0];
    expect(c.securityContext).toEqual({ ...restricted, ...sc });
  });

  it("adds init containers with the same defaults", () => {
    const pod = podOf({
      initContainers: [{ name: "wait", image: "busybox", command: ["true"], restartPolicy: "Always" }],
    });
    expect(pod.initContainers).toEqual([
      { name: "wait", image: "busybox", command: ["true"], restartPolicy: "Always", securityContext: restricted },
    ]);
  });

  it("keeps the runtime container's own settings and appends the user's env and mounts after its own", () => {
    const plain = runtimeOf();
    const c = runtimeOf({
      env: [{ name: "HTTP_PROXY", value: "http://proxy:3128" }],
      volumes: [{ name: "extra", configMap: { name: "x" } }],
      volumeMounts: [{ name: "extra", mountPath: "/extra", readOnly: true }],
    });
    for (const key of [
      "name",
      "image",
      "imagePullPolicy",
      "args",
      "ports",
      "startupProbe",
      "readinessProbe",
      "livenessProbe",
      "securityContext",
      "resources",
    ])
      expect(c[key], key).toEqual(plain[key]);
    // NODE_OPTIONS and MALLOC_ARENA_MAX come last: the heap is worked out from the container's
    // final memory limit, and each is the user's when the user sets it.
    const own = plain.env.filter((e: { name: string }) => !["NODE_OPTIONS", "MALLOC_ARENA_MAX"].includes(e.name));
    expect(c.env).toEqual([
      ...own,
      { name: "HTTP_PROXY", value: "http://proxy:3128" },
      { name: "NODE_OPTIONS", value: "--max-old-space-size=128 --max-semi-space-size=4" },
      { name: "MALLOC_ARENA_MAX", value: "2" },
    ]);
    expect(c.volumeMounts).toEqual([...plain.volumeMounts, { name: "extra", mountPath: "/extra", readOnly: true }]);
    expect(podOf({ volumes: [{ name: "extra", configMap: { name: "x" } }] }).volumes).toEqual([
      ...podOf().volumes,
      { name: "extra", configMap: { name: "x" } },
    ]);
  });

  it("bounds V8's heap by the runtime container's memory limit, unless the user sets NODE_OPTIONS or no limit", () => {
    const nodeOptions = (c: { env: { name: string; value?: string }[] }) =>
      c.env.find((e) => e.name === "NODE_OPTIONS")?.value;
    expect(nodeOptions(runtimeOf())).toBe("--max-old-space-size=128 --max-semi-space-size=4");
    expect(nodeOptions(runtimeOf({ resources: { limits: { memory: "2Gi" } } }))).toBe(
      "--max-old-space-size=512 --max-semi-space-size=4",
    );
    expect(nodeOptions(runtimeOf({ resources: { limits: { memory: "128Mi" } } }))).toBe(
      "--max-old-space-size=64 --max-semi-space-size=4",
    );
    expect(nodeOptions(runtimeOf({ resources: { requests: { memory: "256Mi" } } }))).toBeUndefined();
    // A relay's young generation is larger (runtime/src/contract/node-options.ts).
    const relay = (deployment?: unknown): any => {
      const r = Relay.parse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Relay",
        metadata: meta,
        spec: { url: "https://r.example", ...(deployment ? { deployment } : {}) },
      });
      const d: any = desiredRelayChildren({ ...r, metadata: meta }, { settings, tlsSecret: "alice-tls" }).find(
        (c) => c.kind === "Deployment",
      );
      return d.spec.template.spec.containers[0];
    };
    expect(nodeOptions(relay())).toBe("--max-old-space-size=128 --max-semi-space-size=16");
    expect(nodeOptions(relay({ resources: { limits: { memory: "128Mi" } } }))).toBe(
      "--max-old-space-size=64 --max-semi-space-size=8",
    );
    const own = runtimeOf({ env: [{ name: "NODE_OPTIONS", value: "--max-old-space-size=900" }] });
    expect(own.env.filter((e: { name: string }) => e.name === "NODE_OPTIONS")).toEqual([
      { name: "NODE_OPTIONS", value: "--max-old-space-size=900" },
    ]);
  });

  it("gives the runtime two malloc arenas, in every mode and without a limit, unless the user sets MALLOC_ARENA_MAX", () => {
    const arenas = (c: { env: { name: string; value?: string }[] }) =>
      c.env.filter((e) => e.name === "MALLOC_ARENA_MAX").map((e) => e.value);
    expect(arenas(runtimeOf())).toEqual(["2"]);
    expect(arenas(runtimeOf({ resources: { requests: { memory: "256Mi" } } }))).toEqual(["2"]);
    expect(arenas(runtimeOf({ env: [{ name: "MALLOC_ARENA_MAX", value: "8" }] }))).toEqual(["8"]);
    // The user's own setting of one leaves the other rendered.
    const heapOwn = runtimeOf({ env: [{ name: "NODE_OPTIONS", value: "--max-old-space-size=900" }] });
    expect(arenas(heapOwn)).toEqual(["2"]);
    const relay = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: meta,
      spec: { url: "https://r.example" },
    });
    const d: any = desiredRelayChildren({ ...relay, metadata: meta }, { settings, tlsSecret: "alice-tls" }).find(
      (c) => c.kind === "Deployment",
    );
    expect(arenas(d.spec.template.spec.containers[0])).toEqual(["2"]);
  });

  it("replaces the runtime's default resources, in canonical quantities", () => {
    expect(runtimeOf().resources).toEqual({ requests: { cpu: "50m", memory: "128Mi" }, limits: { memory: "512Mi" } });
    expect(
      runtimeOf({ resources: { requests: { cpu: "0.5" }, limits: { memory: "1024Mi", cpu: "1000m" } } }).resources,
    ).toEqual({ requests: { cpu: "500m" }, limits: { memory: "1Gi", cpu: "1" } });
    const pod = podOf({
      sidecars: [{ name: "a", image: "a", resources: { limits: { memory: "0.5Gi" }, claims: [{ name: "gpu" }] } }],
      volumes: [{ name: "scratch", emptyDir: { sizeLimit: "1.5Gi", medium: "Memory" } }],
    });
    expect(pod.containers[1].resources).toEqual({ limits: { memory: "512Mi" }, claims: [{ name: "gpu" }] });
    expect(pod.volumes.at(-1)).toEqual({ name: "scratch", emptyDir: { sizeLimit: "1536Mi", medium: "Memory" } });
  });

  it.each([
    [
      "the default alone",
      undefined,
      { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
    ],
    [
      "fsGroup added",
      { fsGroup: 2000 },
      {
        runAsNonRoot: true,
        runAsUser: 10001,
        runAsGroup: 10001,
        seccompProfile: { type: "RuntimeDefault" },
        fsGroup: 2000,
      },
    ],
    [
      "the user's UID and seccomp over the default",
      { runAsUser: 1000, seccompProfile: { type: "Localhost", localhostProfile: "p.json" } },
      {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 10001,
        seccompProfile: { type: "Localhost", localhostProfile: "p.json" },
      },
    ],
    [
      "runAsNonRoot stays true",
      { runAsNonRoot: true },
      { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
    ],
  ])("pod security context: %s", (_n, sc, want) => {
    expect(podOf(sc ? { securityContext: sc } : { priorityClassName: "p" }).securityContext).toEqual(want);
  });

  it("never lets a pod run as root, even past the schema", () => {
    const d = withPodSettings(deploymentOf(), { securityContext: { runAsNonRoot: false } } as DeploymentSettings);
    expect(d.spec!.template.spec!.securityContext!.runAsNonRoot).toBe(true);
  });

  it("adds pull secrets after the operator's, once each", () => {
    expect(podOf({ imagePullSecrets: [{ name: "mine" }, { name: "operator-cred" }] }).imagePullSecrets).toEqual([
      { name: "operator-cred" },
      { name: "mine" },
    ]);
  });

  it("places the pod as asked", () => {
    const placement = {
      nodeSelector: { "kubernetes.io/os": "linux" },
      tolerations: [{ key: "dedicated", operator: "Equal", value: "ifp", effect: "NoSchedule" }],
      affinity: {
        podAntiAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [
            {
              weight: 100,
              podAffinityTerm: {
                topologyKey: "kubernetes.io/hostname",
                labelSelector: { matchLabels: { "app.kubernetes.io/instance": "alice" } },
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
          labelSelector: { matchLabels: { "app.kubernetes.io/instance": "alice" } },
        },
      ],
      priorityClassName: "ifp-high",
    };
    expect(podOf(placement)).toMatchObject(placement);
  });

  it("renders nothing for empty lists and maps", () => {
    const pod = podOf({
      sidecars: [],
      initContainers: [],
      env: [],
      volumeMounts: [],
      tolerations: [],
      topologySpreadConstraints: [],
      nodeSelector: {},
      affinity: {},
    });
    for (const key of ["initContainers", "tolerations", "topologySpreadConstraints", "nodeSelector", "affinity"])
      expect(pod, key).not.toHaveProperty(key);
    expect(pod.containers).toHaveLength(1);
    expect(pod.containers[0]).toEqual(runtimeOf());
  });

  it("adds pod labels and annotations under the operator's own, which win", () => {
    const tpl = deploymentOf({ podLabels: { team: "a" }, podAnnotations: { "example.com/scrape": "true" } }).spec
      .template;
    expect(tpl.metadata.labels).toEqual({ team: "a", ...deploymentOf().spec.template.metadata.labels });
    expect(tpl.metadata.annotations).toEqual({
      "example.com/scrape": "true",
      "ifp.dev/config-hash": expect.stringMatching(/^[0-9a-f]{16}$/),
    });
    const forced = withPodSettings(deploymentOf(), {
      podLabels: { "app.kubernetes.io/instance": "bob" },
      podAnnotations: { "ifp.dev/config-hash": "x" },
    } as DeploymentSettings);
    expect(forced.spec!.template.metadata!.labels!["app.kubernetes.io/instance"]).toBe("alice");
    expect(forced.spec!.template.metadata!.annotations!["ifp.dev/config-hash"]).not.toBe("x");
    expect(forced.spec!.selector).toEqual(deploymentOf().spec.selector);
  });

  it("changes the pod template, so that an edit rolls the pods", () => {
    const a = deploymentOf({ sidecars: [{ name: "app", image: "app:1" }] }).spec.template;
    const b = deploymentOf({ sidecars: [{ name: "app", image: "app:2" }] }).spec.template;
    expect(b).not.toEqual(a);
    expect(b.spec.containers[1].image).toBe("app:2");
  });

  it("is the same for a Relay", () => {
    const r = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: meta,
      spec: {
        url: "https://r.example",
        deployment: { sidecars: [{ name: "app", image: "app:1" }], priorityClassName: "p" },
      },
    });
    const d: any = desiredRelayChildren({ ...r, metadata: meta }, { settings, tlsSecret: "alice-tls" }).find(
      (c) => c.kind === "Deployment",
    );
    expect(d.spec.template.spec.containers.map((c: any) => c.name)).toEqual(["runtime", "app"]);
    expect(d.spec.template.spec.priorityClassName).toBe("p");
  });
});

describe("tracing settings in the runtime pods", () => {
  const traced = {
    ...settings,
    runtimeTracing: {
      otlpEndpoint: "http://collector.monitoring:4318",
      env: { OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.25" },
    },
  };
  const agentEnv = (s: typeof settings, deployment?: unknown): { name: string; value?: string }[] => {
    const a = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: meta,
      spec: { agentId: "alice@example", ...(deployment ? { deployment } : {}) },
    });
    const d: any = desiredAgentChildren({ ...a, metadata: meta } as AgentResource, { ...inputs, settings: s }).find(
      (c) => c.kind === "Deployment",
    );
    return d.spec.template.spec.containers[0].env;
  };
  const otel = (env: { name: string }[]) => env.filter((e) => e.name.startsWith("OTEL_"));

  it("renders no OTEL_* variable without tracing settings", () => {
    expect(otel(agentEnv(settings))).toEqual([]);
  });

  it("renders the endpoint, the service name, the resource attributes and the extra variables, in a stable order", () => {
    expect(otel(agentEnv(traced))).toEqual([
      { name: "OTEL_EXPORTER_OTLP_ENDPOINT", value: "http://collector.monitoring:4318" },
      { name: "OTEL_RESOURCE_ATTRIBUTES", value: "k8s.namespace.name=team,ifp.kind=agent" },
      { name: "OTEL_SERVICE_NAME", value: "alice" },
      { name: "OTEL_TRACES_SAMPLER", value: "parentbased_traceidratio" },
      { name: "OTEL_TRACES_SAMPLER_ARG", value: "0.25" },
    ]);
    const r = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { ...meta, name: "hub" },
      spec: { url: "https://relay.example" },
    });
    const relay: any = desiredRelayChildren(
      { ...r, metadata: { ...meta, name: "hub" } },
      { settings: traced, tlsSecret: "hub-tls" },
    ).find((c) => c.kind === "Deployment");
    expect(otel(relay.spec.template.spec.containers[0].env)).toContainEqual({
      name: "OTEL_SERVICE_NAME",
      value: "hub",
    });
    expect(otel(relay.spec.template.spec.containers[0].env)).toContainEqual({
      name: "OTEL_RESOURCE_ATTRIBUTES",
      value: "k8s.namespace.name=team,ifp.kind=relay",
    });
  });

  it("lets an Agent's spec.deployment.env set or override OTEL_* variables, each name once", () => {
    const env = agentEnv(traced, {
      env: [
        { name: "OTEL_SERVICE_NAME", value: "alice-prod" },
        { name: "OTEL_TRACES_SAMPLER", value: "always_off" },
      ],
    });
    expect(env.filter((e) => e.name === "OTEL_SERVICE_NAME")).toEqual([
      { name: "OTEL_SERVICE_NAME", value: "alice-prod" },
    ]);
    expect(env.filter((e) => e.name === "OTEL_TRACES_SAMPLER")).toEqual([
      { name: "OTEL_TRACES_SAMPLER", value: "always_off" },
    ]);
    expect(new Set(env.map((e) => e.name)).size).toBe(env.length);
    // Without operator settings, the Agent alone turns tracing on for itself.
    expect(
      otel(agentEnv(settings, { env: [{ name: "OTEL_EXPORTER_OTLP_ENDPOINT", value: "http://c:4318" }] })),
    ).toEqual([{ name: "OTEL_EXPORTER_OTLP_ENDPOINT", value: "http://c:4318" }]);
  });
});

describe("spec.logLevel", () => {
  const levelOf = (spec: Record<string, unknown>) => {
    const a = Agent.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: meta,
      spec: { agentId: "alice@example", ...spec },
    });
    const d: any = desiredAgentChildren({ ...a, metadata: meta } as AgentResource, inputs).find(
      (c) => c.kind === "Deployment",
    );
    return d.spec.template.spec.containers[0].env.filter((e: { name: string }) => e.name === "IFP_LOG_LEVEL");
  };
  it("is the runtime's IFP_LOG_LEVEL, info when unset", () => {
    expect(levelOf({})).toEqual([{ name: "IFP_LOG_LEVEL", value: "info" }]);
    expect(levelOf({ logLevel: "debug" })).toEqual([{ name: "IFP_LOG_LEVEL", value: "debug" }]);
    const r = Relay.parse({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: meta,
      spec: { url: "https://relay.example", logLevel: "warn" },
    });
    const d: any = desiredRelayChildren({ ...r, metadata: meta }, { settings, tlsSecret: "t" }).find(
      (c) => c.kind === "Deployment",
    );
    expect(d.spec.template.spec.containers[0].env).toContainEqual({ name: "IFP_LOG_LEVEL", value: "warn" });
  });
  it("refuses a level the runtime does not know", () => {
    expect(
      Agent.safeParse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: meta,
        spec: { agentId: "a", logLevel: "verbose" },
      }).success,
    ).toBe(false);
    expect(
      Agent.safeParse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: meta,
        spec: { agentId: "a", logLevel: "DEBUG" },
      }).success,
    ).toBe(false);
  });
});
