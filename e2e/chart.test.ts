import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { parse, parseAllDocuments, stringify } from "yaml";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { tempDir } from "./support/process.ts";
import { generateKeys, serverConfig } from "../operator/src/concerns/nats/credential-issuer.ts";
import { createCA } from "../operator/src/concerns/tls/certs.ts";
import { parseFlags } from "../operator/src/commands/main.ts";
import { parseRepairFlags } from "../operator/src/commands/repair-nats-store.ts";

const CHART = "charts/ifp-operator";
const NS = "ifp-system";
/** helm's own configuration, cache and repositories live in a directory of the test's own. */
let helmEnv: NodeJS.ProcessEnv = process.env;
const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), args, { encoding: "utf8", timeout: 30_000, env: helmEnv });
  if (r.error) throw new Error(`helm ${args.join(" ")} could not run: ${r.error.message}`);
  return { status: r.status, out: r.stdout + r.stderr, stdout: r.stdout };
};
const ok = (r: ReturnType<typeof helm>) => {
  if (r.status !== 0) throw new Error(r.out);
  return r.stdout;
};
const render = (...set: string[]) =>
  ok(helm("template", "ifp", CHART, "--namespace", NS, ...set.flatMap((s) => ["--set", s])));
/** A values file holding `values`, for values --set cannot say (null, lists of objects). */
const valuesFile = (values: object) => {
  const file = join(tempDir("ifp-values-"), "values.yaml");
  writeFileSync(file, stringify(values));
  return file;
};
const renderValues = (values: object) =>
  ok(helm("template", "ifp", CHART, "--namespace", NS, "-f", valuesFile(values)));
/** A rendered Kubernetes object, or part of one. */
type Obj = Record<string, any>;
const docs = (yaml: string): Obj[] =>
  parseAllDocuments(yaml)
    .map((d) => d.toJSON())
    .filter(Boolean);
const find = (objects: Obj[], kind: string, name: string) => {
  const o = objects.find((d) => d.kind === kind && d.metadata.name === name);
  if (!o) throw new Error(`no ${kind} ${name} among ${objects.map((d) => `${d.kind}/${d.metadata.name}`).join(", ")}`);
  return o;
};
/** Every pod spec in the objects, with where it comes from. */
const podSpecs = (objects: Obj[]) =>
  objects.flatMap((d): [string, Obj][] =>
    d.kind === "Pod"
      ? [[`Pod/${d.metadata.name}`, d.spec]]
      : d.spec?.template?.spec
        ? [[`${d.kind}/${d.metadata.name}`, d.spec.template.spec]]
        : [],
  );
/** Whether a label selector's matchLabels select a pod with these labels. */
const selects = (selector: Obj, labels: Obj) =>
  Object.entries(selector.matchLabels as Obj).every(([k, v]) => labels[k] === v);

/** kube-score checks that are deliberately not followed with any values, and why. */
const KUBE_SCORE_EXPLAINED: Record<string, string> = {
  "container-resources":
    "CPU limits are left out on purpose: they throttle a latency-sensitive controller and NATS; CPU and memory requests and a memory limit are set",
  "container-image-pull-policy":
    "IfNotPresent with versioned tags; Always would make every restart depend on the registry",
  "pod-networkpolicy":
    "which traffic to allow depends on the cluster's CNI and where agents live; a NetworkPolicy is the installer's decision",
  "pod-probes":
    "probes are set; kube-score wants readiness and liveness to differ, and they do by endpoint but share the port",
};
/** Further exceptions of the default single-replica install; the HA value set below passes these checks. */
const SINGLE_REPLICA_EXPLAINED: Record<string, string> = {
  "deployment-has-poddisruptionbudget":
    "one operator replica by default; a budget for it would block node drains (replicaCount > 1 gets one)",
  "deployment-has-host-podantiaffinity":
    "a single replica by default; spreading replicas is the installer's decision (affinity, topologySpreadConstraints)",
  "statefulset-has-poddisruptionbudget": "a single-node NATS by default; the 3-node cluster gets a budget",
  "statefulset-has-host-podantiaffinity":
    "a single-node NATS by default; spreading the cluster is the installer's decision (nats.affinity)",
  "deployment-replicas": "one active replica by design (leader election)",
};
/** Further exceptions of the OpenShift-like value set. */
const OPENSHIFT_EXPLAINED: Record<string, string> = {
  "container-security-context-user-group-id":
    "OpenShift's restricted SCC assigns the user and group from the namespace's range at admission; the pods ask only to run as non-root",
};

/** kube-score over rendered manifests: it ran, scored the operator's Deployment and NATS's StatefulSet, and found nothing not explained. */
function expectKubeScoreClean(yaml: string, explained: Record<string, string>): void {
  const file = join(tempDir("ifp-chart-"), "chart.yaml");
  writeFileSync(file, yaml);
  const ignored = Object.keys({ ...KUBE_SCORE_EXPLAINED, ...explained });
  const r = spawnSync(
    toolPath("kube-score"),
    ["score", "--output-format", "ci", ...ignored.flatMap((t) => ["--ignore-test", t]), file],
    { encoding: "utf8", timeout: 45_000 },
  );
  // kube-score ran, scored the chart's objects, and exited 0 (it exits 1 on a critical finding).
  expect(r.error, "kube-score could not run").toBeUndefined();
  const lines = r.stdout.split("\n").filter(Boolean);
  expect(
    lines.filter((l) => !/^\[(OK|SKIPPED|WARNING|CRITICAL)\] \S/.test(l)),
    `kube-score printed lines it should not:\n${r.stderr}`,
  ).toEqual([]);
  expect(lines.filter((l) => l.startsWith("[OK]")).length, r.stdout + r.stderr).toBeGreaterThan(10);
  expect(
    lines.some((l) => / apps\/v1\/Deployment/.test(l)),
    "the operator's Deployment was scored",
  ).toBe(true);
  expect(
    lines.some((l) => / apps\/v1\/StatefulSet/.test(l)),
    "NATS's StatefulSet was scored",
  ).toBe(true);
  const findings = lines.filter((l) => /^\[(CRITICAL|WARNING)\]/.test(l));
  expect(findings).toEqual([]);
  expect(r.status, r.stderr).toBe(0);
}

const OPENSHIFT_POD = { runAsUser: null, runAsGroup: null, fsGroup: null };
/** Value sets every test below renders: lint, the API server's dry run, kube-score. */
const VALUE_SETS: Record<string, { values: object; explained: Record<string, string> }> = {
  defaults: { values: {}, explained: SINGLE_REPLICA_EXPLAINED },
  "OpenShift-like restricted security settings": {
    values: {
      podSecurityContext: OPENSHIFT_POD,
      nats: { podSecurityContext: OPENSHIFT_POD },
      runtime: { runAsUser: null, runAsGroup: null },
    },
    explained: { ...SINGLE_REPLICA_EXPLAINED, ...OPENSHIFT_EXPLAINED },
  },
  "highly available: 2 operator replicas, clustered NATS, spread over nodes and zones": {
    values: {
      replicaCount: 2,
      affinity: {
        podAntiAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [
            {
              weight: 100,
              podAffinityTerm: {
                topologyKey: "kubernetes.io/hostname",
                labelSelector: { matchLabels: { "app.kubernetes.io/component": "operator" } },
              },
            },
          ],
        },
      },
      topologySpreadConstraints: [
        { maxSkew: 1, topologyKey: "topology.kubernetes.io/zone", whenUnsatisfiable: "ScheduleAnyway" },
      ],
      priorityClassName: "ifp-critical",
      nats: {
        replicas: 3,
        affinity: {
          podAntiAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: [
              {
                topologyKey: "kubernetes.io/hostname",
                labelSelector: { matchLabels: { "app.kubernetes.io/component": "nats" } },
              },
            ],
          },
        },
        topologySpreadConstraints: [
          { maxSkew: 1, topologyKey: "topology.kubernetes.io/zone", whenUnsatisfiable: "DoNotSchedule" },
        ],
        nodeSelector: { "kubernetes.io/os": "linux" },
        tolerations: [{ key: "dedicated", operator: "Equal", value: "messaging", effect: "NoSchedule" }],
        priorityClassName: "ifp-critical",
        resources: { requests: { cpu: "500m", memory: "1Gi" }, limits: { memory: "2Gi" } },
      },
    },
    explained: {},
  },
  "private registry: imagePullSecrets": {
    values: { imagePullSecrets: [{ name: "registry-credentials" }] },
    explained: SINGLE_REPLICA_EXPLAINED,
  },
  "pass-through: digests, a mirror registry, extra flags, environment and volumes": {
    values: {
      global: { imageRegistry: "mirror.example:5000/ifp" },
      image: { digest: `sha256:${"ab".repeat(32)}` },
      runtimeImage: { digest: `sha256:${"cd".repeat(32)}` },
      extraArgs: ["--log-level=debug"],
      extraEnv: [{ name: "IFP_NATS_USER", valueFrom: { secretKeyRef: { name: "nats-user", key: "user" } } }],
      extraVolumes: [{ name: "extra", configMap: { name: "extra-config" } }],
      extraVolumeMounts: [{ name: "extra", mountPath: "/etc/extra", readOnly: true }],
      workers: 8,
      resync: "10m",
      nats: {
        image: { digest: `sha256:${"ef".repeat(32)}` },
        extraArgs: ["--debug"],
        extraEnv: [{ name: "GOMEMLIMIT", value: "900MiB" }],
        extraVolumes: [{ name: "extra", configMap: { name: "extra-config" } }],
        extraVolumeMounts: [{ name: "extra", mountPath: "/etc/extra", readOnly: true }],
      },
    },
    explained: SINGLE_REPLICA_EXPLAINED,
  },
};

describe("Helm chart", () => {
  let cp: ControlPlane;
  beforeAll(async () => {
    const home = tempDir("ifp-helm-home-");
    helmEnv = {
      ...process.env,
      HELM_CACHE_HOME: join(home, "cache"),
      HELM_CONFIG_HOME: join(home, "config"),
      HELM_DATA_HOME: join(home, "data"),
    };
    cp = await startControlPlane({
      crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
      controllerManager: false,
    });
    cp.kubectl(["create", "namespace", NS]);
    // The API server's PodSecurity admission holds every pod of the release to the restricted
    // standard: it refuses pods that break it and warns of Deployments and StatefulSets that would.
    cp.kubectl([
      "label",
      "namespace",
      NS,
      "pod-security.kubernetes.io/enforce=restricted",
      "pod-security.kubernetes.io/warn=restricted",
    ]);
  }, 300_000);
  afterAll(async () => {
    await cp?.stop();
  });
  /** A server-side dry run of the manifests, with the API server's warnings (PodSecurity's among them) errors. */
  const dryRun = (yaml: string) =>
    cp.kubectl(["apply", "--dry-run=server", "--warnings-as-errors", "-n", NS, "-f", "-"], yaml);

  it("passes helm lint --strict with default and non-default values", () => {
    for (const r of [
      helm("lint", "--strict", CHART),
      helm(
        "lint",
        "--strict",
        CHART,
        "--set",
        "nats.install=false",
        "--set",
        "nats.url=nats://nats:4222",
        "--set",
        "watchNamespaces={a,b}",
      ),
    ])
      expect(r.status, r.out).toBe(0);
    for (const [name, { values }] of Object.entries(VALUE_SETS)) {
      const r = helm("lint", "--strict", CHART, "-f", valuesFile(values));
      expect(r.status, `${name}: ${r.out}`).toBe(0);
    }
  });

  it("refuses values its schema does not allow, naming them", () => {
    const r = helm("template", "ifp", CHART, "--set", "nats.replicas=2");
    expect(r.status).not.toBe(0);
    expect(r.out).toMatch(/nats\/replicas/);
    expect(helm("template", "ifp", CHART, "--set", "natz.url=x").out).toMatch(
      /additional properties 'natz' not allowed|natz/,
    );
    expect(helm("template", "ifp", CHART, "--set", "nats.replica=3").out).toMatch(
      /additional properties 'replica' not allowed/,
    );
    expect(helm("template", "ifp", CHART, "--set", "podDisruptionBudget.maxUnavailable=0").status).not.toBe(0);
    expect(helm("template", "ifp", CHART, "--set", "nats.install=false").out).toMatch(/nats.url is required/);
  });

  it.each([
    [
      "namespace-scoped, external NATS with credentials, 3 replicas",
      [
        "watchNamespaces={ifp-system}",
        "nats.install=false",
        "nats.url=nats://nats.example:4222",
        "nats.credentialsSecret.name=nats-creds",
        "replicaCount=3",
      ],
    ],
    [
      "clustered NATS, no CRDs, no RBAC",
      [
        "nats.replicas=3",
        "crds.enabled=false",
        "rbac.create=false",
        "serviceAccount.create=false",
        "serviceAccount.name=existing",
      ],
    ],
  ])("renders (%s) into manifests the real API server accepts", (_name, set) => {
    const yaml = render(...set, "tests.enabled=false");
    const out = cp.kubectl(["apply", "--dry-run=server", "-n", NS, "-f", "-"], yaml);
    expect(out).toMatch(/deployment.apps\/ifp-ifp-operator created \(server dry run\)/);
  });

  it.each(Object.entries(VALUE_SETS))(
    "renders (%s), the helm test pod included, into manifests the real API server accepts in a restricted namespace",
    (_name, { values }) => {
      const yaml = renderValues(values);
      const out = dryRun(yaml);
      // Every object the chart rendered went through the API server's validation and admission.
      const accepted = out.split("\n").filter((l) => / (created|configured|unchanged) \(server dry run\)$/.test(l));
      expect(accepted.map((l) => l.split(" ")[0]!.replace(/^([^./]+)[^/]*\//, "$1/")).sort()).toEqual(
        docs(yaml)
          .map((d) => `${d.kind.toLowerCase()}/${d.metadata.name}`)
          .sort(),
      );
    },
  );

  it("is refused by the restricted namespace when a security context breaks the standard (the dry runs above can fail)", () => {
    // The test pod is refused (enforce); without it, the Deployment is warned of (warn).
    expect(() => dryRun(renderValues({ securityContext: { allowPrivilegeEscalation: true } }))).toThrow(
      /pods "ifp-ifp-operator-test" is forbidden: violates PodSecurity "restricted/,
    );
    expect(() =>
      dryRun(renderValues({ nats: { podSecurityContext: { runAsNonRoot: null } }, tests: { enabled: false } })),
    ).toThrow(
      /would violate PodSecurity "restricted:latest": runAsNonRoot != true \(pod or containers? (\S+, )*"nats"/,
    );
  });

  it("runs every pod as non-root on a read-only root filesystem, as user 10001 by default", () => {
    const objects = docs(render());
    const pods = podSpecs(objects);
    expect(pods.map(([where]) => where).sort()).toEqual([
      "Deployment/ifp-ifp-operator",
      "Job/ifp-ifp-operator-uninstall",
      "Pod/ifp-ifp-operator-test",
      "StatefulSet/ifp-ifp-operator-nats",
    ]);
    for (const [where, spec] of pods) {
      expect(spec.securityContext, where).toMatchObject({
        runAsNonRoot: true,
        runAsUser: 10001,
        seccompProfile: { type: "RuntimeDefault" },
      });
      for (const c of spec.containers)
        expect(c.securityContext, `${where} ${c.name}`).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ["ALL"] },
        });
      expect(spec.imagePullSecrets, where).toBeUndefined();
      expect(spec.priorityClassName, where).toBeUndefined();
    }
    expect(objects.filter((d) => d.kind === "PodDisruptionBudget")).toEqual([]);
    const args: string[] = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(args).toEqual(expect.arrayContaining(["--runtime-run-as-user=10001", "--runtime-run-as-group=10001"]));
    expect(args.filter((a) => a.startsWith("--runtime-image-pull-secrets"))).toEqual([]);
    // The runtimes may reach peers inside the cluster: the private ranges unless narrowed.
    expect(args).toContain("--cluster-networks=10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fd00::/8");
  });

  it("bounds the operator's V8 heap through NODE_OPTIONS, as the user sets it", () => {
    const envOf = (...set: string[]) =>
      find(docs(render(...set)), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].env as {
        name: string;
        value?: string;
      }[];
    expect(envOf().find((e) => e.name === "NODE_OPTIONS")?.value).toBe(
      "--max-old-space-size=192 --max-semi-space-size=2",
    );
    expect(envOf("nodeOptions=--max-old-space-size=1024").find((e) => e.name === "NODE_OPTIONS")?.value).toBe(
      "--max-old-space-size=1024",
    );
    expect(envOf("nodeOptions=").some((e) => e.name === "NODE_OPTIONS")).toBe(false);
    // Two glibc malloc arenas by default; 0 leaves glibc's own default; anything else is refused.
    expect(envOf().find((e) => e.name === "MALLOC_ARENA_MAX")?.value).toBe("2");
    expect(envOf("mallocArenaMax=4").find((e) => e.name === "MALLOC_ARENA_MAX")?.value).toBe("4");
    expect(envOf("mallocArenaMax=0").some((e) => e.name === "MALLOC_ARENA_MAX")).toBe(false);
    for (const bad of ["mallocArenaMax=-1", "mallocArenaMax=65", "mallocArenaMax=two", "mallocArenaMax=1.5"])
      expect(() => render(bad), bad).toThrow(/mallocArenaMax/);
  });

  it("passes runtime.clusterNetworks to the operator, none when empty", () => {
    const argsOf = (values: object): string[] =>
      find(docs(renderValues(values)), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(argsOf({ runtime: { clusterNetworks: ["10.96.0.0/12", "10.244.0.0/16"] } })).toContain(
      "--cluster-networks=10.96.0.0/12,10.244.0.0/16",
    );
    expect(argsOf({ runtime: { clusterNetworks: [] } })).toContain("--cluster-networks=none");
  });

  it("passes tracing.* to the operator as the flags that become the runtimes' OTEL_* variables", () => {
    const argsOf = (yaml: string): string[] =>
      find(docs(yaml), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(argsOf(render()).filter((a) => a.startsWith("--runtime-ot"))).toEqual([]);
    // Keys in the order helm writes them (sorted).
    const env = {
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,team=a "b"',
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    };
    const args = argsOf(renderValues({ tracing: { otlpEndpoint: "http://otel-collector.monitoring:4318", env } }));
    expect(args.filter((a) => a.startsWith("--runtime-ot"))).toEqual([
      "--runtime-otlp-endpoint=http://otel-collector.monitoring:4318",
      `--runtime-otel-env=${JSON.stringify(env)}`,
    ]);
    // What the chart renders, the operator reads back.
    const flags = parseFlags(
      args.filter((a) => a.startsWith("--runtime-ot")),
      {},
    );
    expect(flags.options.settings.runtimeTracing).toEqual({
      otlpEndpoint: "http://otel-collector.monitoring:4318",
      env,
    });
    expect(helm("template", "ifp", CHART, "--set", "tracing.otlpEndpoint=collector:4318").status).not.toBe(0);
    expect(helm("template", "ifp", CHART, "--set", "tracing.env.PATH=/tmp").status).not.toBe(0);
  });

  it("leaves the user and groups to the platform with OpenShift-like values, and keeps the rest", () => {
    const objects = docs(renderValues(VALUE_SETS["OpenShift-like restricted security settings"]!.values));
    const pods = podSpecs(objects);
    expect(pods).toHaveLength(4);
    for (const [where, spec] of pods) {
      expect(spec.securityContext, where).toEqual({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
      for (const c of spec.containers)
        expect(c.securityContext, `${where} ${c.name}`).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ["ALL"] },
        });
    }
    // The CRDs' schemas name these fields (spec.deployment.securityContext); the workloads must not set them.
    expect(JSON.stringify(objects.filter((o: any) => o.kind !== "CustomResourceDefinition"))).not.toMatch(
      /runAsUser|runAsGroup|fsGroup/,
    );
    // The operator leaves them to the platform in the runtimes' pods too.
    const args = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(args).toEqual(expect.arrayContaining(["--runtime-run-as-user=none", "--runtime-run-as-group=none"]));
  });

  it("gives 2 operator replicas and a clustered NATS budgets that select their own pods, and spreads them", () => {
    const objects = docs(
      renderValues(
        VALUE_SETS["highly available: 2 operator replicas, clustered NATS, spread over nodes and zones"]!.values,
      ),
    );
    const operator = find(objects, "Deployment", "ifp-ifp-operator");
    const nats = find(objects, "StatefulSet", "ifp-ifp-operator-nats");
    const operatorPdb = find(objects, "PodDisruptionBudget", "ifp-ifp-operator");
    const natsPdb = find(objects, "PodDisruptionBudget", "ifp-ifp-operator-nats");
    expect(operator.spec.replicas).toBe(2);
    expect(nats.spec.replicas).toBe(3);
    expect(operatorPdb.spec.maxUnavailable).toBe(1);
    expect(natsPdb.spec.maxUnavailable).toBe(1);
    // Each budget selects its own pods and not the other's (both share the release's labels).
    expect(selects(operatorPdb.spec.selector, operator.spec.template.metadata.labels)).toBe(true);
    expect(selects(operatorPdb.spec.selector, nats.spec.template.metadata.labels)).toBe(false);
    expect(selects(natsPdb.spec.selector, nats.spec.template.metadata.labels)).toBe(true);
    expect(selects(natsPdb.spec.selector, operator.spec.template.metadata.labels)).toBe(false);
    // The operator's Service reaches the operator, not NATS.
    const service = find(objects, "Service", "ifp-ifp-operator");
    expect(selects({ matchLabels: service.spec.selector }, nats.spec.template.metadata.labels)).toBe(false);
    expect(selects({ matchLabels: service.spec.selector }, operator.spec.template.metadata.labels)).toBe(true);
    // A spread constraint without a labelSelector gets one for the pods it spreads.
    const [operatorSpread] = operator.spec.template.spec.topologySpreadConstraints;
    expect(operatorSpread).toMatchObject({
      topologyKey: "topology.kubernetes.io/zone",
      labelSelector: {
        matchLabels: { "app.kubernetes.io/component": "operator", "app.kubernetes.io/instance": "ifp" },
      },
    });
    const [natsSpread] = nats.spec.template.spec.topologySpreadConstraints;
    expect(
      selects(natsSpread.labelSelector, nats.spec.template.metadata.labels) &&
        !selects(natsSpread.labelSelector, operator.spec.template.metadata.labels),
    ).toBe(true);
    expect(nats.spec.template.spec).toMatchObject({
      priorityClassName: "ifp-critical",
      nodeSelector: { "kubernetes.io/os": "linux" },
      tolerations: [{ key: "dedicated", value: "messaging" }],
      affinity: {
        podAntiAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: [{ topologyKey: "kubernetes.io/hostname" }],
        },
      },
    });
    // Helm merges maps: the defaults not overridden stay.
    expect(nats.spec.template.spec.containers[0].resources).toEqual({
      requests: { cpu: "500m", memory: "1Gi", "ephemeral-storage": "64Mi" },
      limits: { memory: "2Gi", "ephemeral-storage": "256Mi" },
    });
    expect(operator.spec.template.spec.priorityClassName).toBe("ifp-critical");
    // One replica: no budget; the budget can be turned off.
    expect(
      docs(render("replicaCount=1", "nats.replicas=3"))
        .filter((d) => d.kind === "PodDisruptionBudget")
        .map((d) => d.metadata.name),
    ).toEqual(["ifp-ifp-operator-nats"]);
    expect(
      docs(render("replicaCount=2", "podDisruptionBudget.enabled=false")).filter(
        (d) => d.kind === "PodDisruptionBudget",
      ),
    ).toEqual([]);
  });

  it("gives imagePullSecrets to the operator's, NATS's, the test's and the uninstall hook's pods", () => {
    const pods = podSpecs(docs(renderValues(VALUE_SETS["private registry: imagePullSecrets"]!.values)));
    expect(pods).toHaveLength(4);
    for (const [where, spec] of pods) expect(spec.imagePullSecrets, where).toEqual([{ name: "registry-credentials" }]);
    const args = find(
      docs(renderValues(VALUE_SETS["private registry: imagePullSecrets"]!.values)),
      "Deployment",
      "ifp-ifp-operator",
    ).spec.template.spec.containers[0].args;
    expect(args).toContain("--runtime-image-pull-secrets=registry-credentials");
  });

  it("installs as a dependency of another chart, with global values", () => {
    const parent = tempDir("ifp-parent-chart-");
    const version = (parse(readFileSync(join(CHART, "Chart.yaml"), "utf8")) as { version: string }).version;
    writeFileSync(
      join(parent, "Chart.yaml"),
      stringify({
        apiVersion: "v2",
        name: "platform",
        version: "1.0.0",
        dependencies: [
          { name: "ifp-operator", version, repository: `file://${resolve(CHART)}`, condition: "ifp-operator.enabled" },
        ],
      }),
    );
    const values = {
      global: { imagePullSecrets: [{ name: "platform-registry" }], domain: "example.org" },
      "ifp-operator": { enabled: true, imagePullSecrets: [{ name: "ifp-registry" }], nats: { replicas: 3 } },
    };
    writeFileSync(join(parent, "values.yaml"), stringify(values));
    ok(helm("dependency", "update", parent));
    expect(helm("lint", "--strict", parent).out).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);

    const yaml = ok(helm("template", "platform", parent, "--namespace", NS));
    const objects = docs(yaml);
    const operator = find(objects, "Deployment", "platform-ifp-operator");
    expect(operator.spec.template.spec.containers[0].args).toContain(
      `--nats-url=nats://platform-ifp-operator-nats.${NS}.svc:4222`,
    );
    const pods = podSpecs(objects);
    expect(pods.map(([where]) => where).sort()).toEqual([
      "Deployment/platform-ifp-operator",
      "Job/platform-ifp-operator-uninstall",
      "Pod/platform-ifp-operator-test",
      "StatefulSet/platform-ifp-operator-nats",
    ]);
    for (const [where, spec] of pods)
      expect(spec.imagePullSecrets, where).toEqual([{ name: "ifp-registry" }, { name: "platform-registry" }]);
    expect(operator.spec.template.spec.containers[0].args).toContain(
      "--runtime-image-pull-secrets=ifp-registry,platform-registry",
    );
    expect(find(objects, "PodDisruptionBudget", "platform-ifp-operator-nats").spec.maxUnavailable).toBe(1);
    expect(dryRun(yaml)).toMatch(/deployment.apps\/platform-ifp-operator created \(server dry run\)/);
    // kube-score, as for the value sets above: one operator replica, and a 3-node NATS that must have its budget.
    const { "statefulset-has-poddisruptionbudget": _clustered, ...explained } = SINGLE_REPLICA_EXPLAINED;
    expectKubeScoreClean(
      ok(helm("template", "platform", parent, "--namespace", NS, "--set", "ifp-operator.tests.enabled=false")),
      explained,
    );

    // The parent's condition turns the chart off; its schema still checks what the parent sets.
    writeFileSync(join(parent, "values.yaml"), stringify({ ...values, "ifp-operator": { enabled: false } }));
    expect(docs(ok(helm("template", "platform", parent, "--namespace", NS)))).toEqual([]);
    writeFileSync(join(parent, "values.yaml"), stringify({ ...values, "ifp-operator": { natz: {} } }));
    expect(helm("template", "platform", parent, "--namespace", NS).out).toMatch(
      /additional properties 'natz' not allowed/,
    );
  });

  it("names every object by Helm's common fullname rule, each name within 63 characters, and refuses a release name Helm refuses", () => {
    const LONG = "a".repeat(53);
    const OVERRIDE = "o".repeat(60);
    /** Every object's kind and name, and every name the operator is told (Secrets, its Deployment, NATS's URL). */
    const names = (release: string, ...set: string[]) => {
      const objects = docs(
        ok(
          helm(
            "template",
            release,
            CHART,
            "--namespace",
            NS,
            "--set",
            "trust.extraCAs=x",
            "--set",
            "networkPolicy.operator.enabled=true",
            ...set.flatMap((s) => ["--set", s]),
          ),
        ),
      ).filter((o) => o.kind !== "CustomResourceDefinition");
      const args: string[] = find(objects, "Deployment", objects.find((o) => o.kind === "Deployment")!.metadata.name)
        .spec.template.spec.containers[0].args;
      const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))!.split("=")[1]!;
      return {
        objects: objects.map((o) => `${o.kind}/${o.metadata.name}`),
        told: {
          ca: flag("ca-secret"),
          natsAccount: flag("nats-account-secret"),
          natsTls: flag("nats-tls-secret"),
          deployment: flag("operator-deployment").split("/")[1],
          nats: /^nats:\/\/([^.]+)\./.exec(flag("nats-url"))![1],
        },
      };
    };
    // The full name each release gets: the release name when it holds the chart's name (or
    // nameOverride), else <release>-<name>; fullnameOverride in place of both.
    const cases: [string, string[], string][] = [
      ["ifp", [], "ifp-ifp-operator"],
      ["ifp-operator", [], "ifp-operator"],
      ["my-ifp-operator-prod", [], "my-ifp-operator-prod"],
      ["ifp", ["nameOverride=agents"], "ifp-agents"],
      ["agents-prod", ["nameOverride=agents"], "agents-prod"],
      ["ifp", [`fullnameOverride=${OVERRIDE}`], OVERRIDE],
      [LONG, [], `${LONG}-ifp-operator`.slice(0, 63)],
    ];
    for (const [release, set, full] of cases) {
      const { objects, told } = names(release, ...set);
      const where = `${release} ${set.join(" ")}`;
      for (const o of objects) {
        const name = o.split("/")[1]!;
        expect(name.length, `${where}: ${o}`).toBeLessThanOrEqual(63);
        expect(name.startsWith(full.slice(0, 30)), `${where}: ${o} named from ${full}`).toBe(true);
      }
      expect(objects, where).toContain(`Deployment/${full}`);
      expect(objects, where).toContain(`ServiceAccount/${full}`);
      expect(told.deployment, where).toBe(full);
      // The suffixed names: <fullname>-<suffix> in full when it fits, the full name cut when not.
      const suffixed = (suffix: string, max = 63) =>
        `${full.slice(0, max - suffix.length - 1).replace(/-+$/, "")}-${suffix}`;
      expect(objects, where).toContain(`Job/${suffixed("uninstall")}`);
      expect(objects, where).toContain(`Role/${suffixed("leader-election")}`);
      expect(objects, where).toContain(`ConfigMap/${suffixed("extra-cas")}`);
      expect(told.ca, where).toBe(suffixed("ca"));
      expect(told.natsAccount, where).toBe(suffixed("nats-account"));
      expect(told.natsTls, where).toBe(suffixed("nats-tls"));
      // NATS's StatefulSet within 52, so that its pods' controller-revision-hash label fits.
      const nats = suffixed("nats", 52);
      expect(told.nats, where).toBe(nats);
      expect(objects, where).toContain(`StatefulSet/${nats}`);
      expect(objects, where).toContain(`Service/${nats}-headless`);
    }
    expect(names(LONG).told.ca).toHaveLength(63);
    // The longest names, as the API server takes them (a Service's and a Job's must be DNS labels).
    expect(
      dryRun(
        ok(
          helm("template", LONG, CHART, "--namespace", NS, "--set", "trust.extraCAs=x", "--set", "tests.enabled=false"),
        ),
      ),
    ).toMatch(new RegExp(`statefulset.apps/${LONG.slice(0, 47)}-nats created \\(server dry run\\)`));
    // Helm itself refuses a release name of more than 53 characters, before any template.
    expect(helm("template", "r".repeat(60), CHART, "--namespace", NS).out).toMatch(
      /invalid release name.*the length must not be longer than 53/,
    );
  });

  it("prints NOTES whose kubectl commands name their namespace and work as printed", () => {
    // helm install's server dry run (crds.enabled=false: the control plane's CRDs are not the release's).
    const notes = (...set: string[]) => {
      const out = ok(
        helm(
          "install",
          "ifp",
          CHART,
          "--namespace",
          NS,
          "--kubeconfig",
          cp.kubeconfig,
          "--dry-run=server",
          "--set",
          "crds.enabled=false",
          ...set.flatMap((s) => ["--set", s]),
        ),
      );
      return out.slice(out.indexOf("NOTES:"));
    };
    const commands = (text: string) =>
      text
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => /^(kubectl|helm) /.test(l));

    // By default the operator watches its own namespace only: the examples' are to be listed first.
    const own = notes();
    expect(own).toMatch(new RegExp(`installed in namespace ${NS}, watching ${NS}\\.`));
    expect(commands(own)).toEqual([
      `kubectl -n ${NS} rollout status deployment/ifp-ifp-operator`,
      `kubectl -n ${NS} rollout status statefulset/ifp-ifp-operator-nats`,
      `helm test ifp -n ${NS}`,
    ]);
    expect(own).toMatch(/create them \(kubectl apply -f examples\/namespaces.yaml\) and add them to\s+watchNamespaces/);
    const cluster = commands(notes("clusterWide=true"));
    expect(cluster).toEqual([
      `kubectl -n ${NS} rollout status deployment/ifp-ifp-operator`,
      `kubectl -n ${NS} rollout status statefulset/ifp-ifp-operator-nats`,
      "kubectl apply -f examples/",
      "kubectl get agents.ifp.dev,relays.ifp.dev -A",
      "kubectl -n ifp-alice wait --for=condition=Ready agents.ifp.dev/alice --timeout=5m",
      `helm test ifp -n ${NS}`,
    ]);
    // The ones that need no running operator, run as printed against the API server.
    const run = (line: string, ...extra: string[]) => cp.kubectl([...line.split(" ").slice(1), ...extra]);
    // The examples create their namespaces; nothing makes them Ready here.
    expect(run(cluster[2]!)).toMatch(
      /namespace\/ifp-alice created[\s\S]*agent.ifp.dev\/alice created[\s\S]*agent.ifp.dev\/bob created[\s\S]*relay.ifp.dev\/relay created/,
    );
    expect(run(cluster[3]!)).toMatch(/ifp-alice\s+agent.ifp.dev\/alice/);
    // With the examples' namespaces (there now) listed, the same commands as cluster-wide.
    expect(commands(notes("watchNamespaces={ifp-alice,ifp-bob,ifp-relay}"))).toEqual(cluster);
    // Another API with a kind Agent (kagent's): the printed names, the short names and the category still find ours.
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        metadata: { name: "agents.kagent.dev" },
        spec: {
          group: "kagent.dev",
          scope: "Namespaced",
          names: { kind: "Agent", plural: "agents", singular: "agent", listKind: "AgentList" },
          versions: [
            {
              name: "v1alpha2",
              served: true,
              storage: true,
              schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
            },
          ],
        },
      }),
    );
    try {
      cp.kubectl(["wait", "--for=condition=Established", "crd/agents.kagent.dev", "--timeout=60s"]);
      expect(run(cluster[3]!)).toMatch(/ifp-alice\s+agent.ifp.dev\/alice/);
      expect(cp.kubectl(["get", "ifpagent", "-A"])).toMatch(/ifp-alice\s+alice\s+/);
      expect(cp.kubectl(["get", "ifp", "-A"])).toMatch(/agent.ifp.dev\/alice[\s\S]*relay.ifp.dev\/relay/);
      expect(cp.kubectl(["get", "ifprelay", "-A"])).toMatch(/ifp-relay\s+relay\s+/);
    } finally {
      cp.kubectl(["delete", "crd", "agents.kagent.dev", "--wait=false"]);
    }

    const scoped = commands(
      notes(
        "watchNamespaces={team-a}",
        "tests.enabled=false",
        "nats.install=false",
        "nats.url=nats://nats.example:4222",
      ),
    );
    expect(scoped).toEqual([`kubectl -n ${NS} rollout status deployment/ifp-ifp-operator`]);
    expect(notes("watchNamespaces={team-a}", "tests.enabled=false")).toMatch(
      /live in the namespaces ifp-alice, ifp-bob and\s+ifp-relay: create them/,
    );
  });

  it("teaches the API through kubectl explain: each kind and every field described, by full and short name", () => {
    expect(cp.kubectl(["explain", "agents.ifp.dev"])).toMatch(/DESCRIPTION:\s+An Inter-Face Protocol agent/);
    expect(cp.kubectl(["explain", "ifprelay"])).toMatch(/DESCRIPTION:\s+An Inter-Face Protocol relay/);
    expect(cp.kubectl(["explain", "agents.ifp.dev.spec.capabilities.conditions.minAuthLevel"])).toMatch(
      /Lowest IFP-5 authentication level/,
    );
    expect(cp.kubectl(["explain", "agents.ifp.dev.status.selector"])).toMatch(
      /Label selector of the agent's runtime pods/,
    );
    // Each field `kubectl explain` lists under spec has a description line after its name.
    for (const kind of ["agents.ifp.dev", "relays.ifp.dev"]) {
      const fields = cp.kubectl(["explain", `${kind}.spec`]).split("FIELDS:")[1]!;
      // An enum field's values come on a line of their own ("  enum: a, b"), before its description.
      const entries = fields
        .split(/\n(?= {2}(?!enum:)\S)/)
        .map((e) => e.trim())
        .filter(Boolean);
      expect(entries.length, kind).toBeGreaterThan(8);
      expect(fields).not.toMatch(/no description/);
      for (const e of entries) expect(e.split("\n").length, `${kind}.spec: ${e}`).toBeGreaterThan(1);
    }
  });

  it("templates the CRDs behind crds.enabled with a keep policy, identical to crds/", () => {
    const crds = docs(render()).filter((d) => d.kind === "CustomResourceDefinition");
    expect(crds.map((c) => c.metadata.name).sort()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(crds[0]!.metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    expect(docs(render("crds.enabled=false")).some((d) => d.kind === "CustomResourceDefinition")).toBe(false);
    expect(
      docs(render("crds.keep=false")).find((d) => d.kind === "CustomResourceDefinition")!.metadata.annotations?.[
        "helm.sh/resource-policy"
      ],
    ).toBeUndefined();
  });

  it("gives the operator least-privilege RBAC, cluster-wide or per namespace", () => {
    const clusterRoles = (objects: Obj[]) =>
      objects.filter((d) => d.kind === "ClusterRole").map((d) => d.metadata.name);
    // Namespace-scoped by default: the only ClusterRole reads the watched namespaces' labels.
    expect(clusterRoles(docs(render()))).toEqual(["ifp-ifp-operator-namespaces"]);
    const cluster = docs(render("clusterWide=true"));
    expect(clusterRoles(cluster).sort()).toEqual(["ifp-ifp-operator", "ifp-ifp-operator-namespaces"]);
    expect(find(cluster, "ClusterRole", "ifp-ifp-operator-namespaces").rules).toEqual([
      { apiGroups: [""], resources: ["namespaces"], verbs: ["get"] },
    ]);
    const scoped = docs(render("watchNamespaces={team-a,team-b}"));
    expect(clusterRoles(scoped)).toEqual(["ifp-ifp-operator-namespaces"]);
    expect(scoped.filter((d) => d.kind === "Role" && d.metadata.namespace === "team-a")).toHaveLength(1);
    const role = find(cluster, "ClusterRole", "ifp-ifp-operator");
    expect(JSON.stringify(role.rules)).not.toMatch(/"\*"/);
    const dep = find(cluster, "Deployment", "ifp-ifp-operator");
    expect(dep.spec.template.spec.containers[0].args).toEqual(
      expect.arrayContaining([
        "--leader-elect=true",
        `--leader-election-namespace=${NS}`,
        `--nats-url=nats://ifp-ifp-operator-nats.${NS}.svc:4222`,
      ]),
    );
  });

  it("grants the operator its own namespace and the listed ones by default, every namespace only with clusterWide: kubectl auth can-i --list on the real API server", () => {
    const scoped = docs(render("watchNamespaces={rbac-team}"));
    // Cluster-scoped: only the labels of the watched namespaces, read by name.
    expect(scoped.filter((d) => d.kind === "ClusterRole").map((d) => [d.metadata.name, d.rules])).toEqual([
      [
        "ifp-ifp-operator-namespaces",
        [{ apiGroups: [""], resources: ["namespaces"], resourceNames: [NS, "rbac-team"], verbs: ["get"] }],
      ],
    ]);
    expect(
      scoped
        .filter((d) => d.kind === "Role" && d.metadata.name === "ifp-ifp-operator")
        .map((d) => d.metadata.namespace),
    ).toEqual([NS, "rbac-team"]);
    expect(find(scoped, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args).toContain(
      `--watch-namespaces=${NS},rbac-team`,
    );
    const wide = docs(render("clusterWide=true", "watchNamespaces={rbac-team}"));
    expect(wide.filter((d) => d.kind === "Role" && d.metadata.name === "ifp-ifp-operator")).toEqual([]);
    expect(
      find(wide, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args.some((a: string) =>
        a.startsWith("--watch-namespaces"),
      ),
    ).toBe(false);

    // On the real API server: the scoped install as rendered, and the cluster-wide one bound to
    // another ServiceAccount (so that neither widens the other).
    const WIDE_SA = "ifp-wide-operator";
    const rbacOf = (objects: Obj[]) =>
      objects.filter((d) =>
        ["ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"].includes(d.kind),
      );
    const wideRbac = rbacOf(wide)
      .filter(
        (d) =>
          (d.kind === "ClusterRole" || d.kind === "ClusterRoleBinding") && !d.metadata.name.endsWith("-namespaces"),
      )
      .map((d) => ({
        ...d,
        metadata: { ...d.metadata, name: `${d.metadata.name}-wide` },
        ...(d.roleRef
          ? {
              roleRef: { ...d.roleRef, name: `${d.roleRef.name}-wide` },
              subjects: [{ kind: "ServiceAccount", name: WIDE_SA, namespace: NS }],
            }
          : {}),
      }));
    const applied = [...rbacOf(scoped), ...wideRbac].map((d) => JSON.stringify(d)).join("\n");
    for (const ns of [NS, "rbac-team", "rbac-other"])
      cp.kubectl(["apply", "-f", "-"], `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${ns}}\n`);
    cp.kubectl(["apply", "-f", "-"], applied);
    onTestFinished(() => {
      cp.kubectl(["delete", "--wait=false", "--ignore-not-found", "-f", "-"], applied);
      cp.kubectl(["delete", "namespace", "rbac-team", "rbac-other", "--wait=false"]);
    });
    /** `kubectl auth can-i --list` as a map of resource (with its names, if any) to verbs. */
    const canList = (sa: string, ...args: string[]) => {
      const out = cp.kubectl(["auth", "can-i", "--list", ...args, `--as=system:serviceaccount:${NS}:${sa}`]);
      const rows: Record<string, string[]> = {};
      for (const line of out.split("\n").slice(1)) {
        const [resource, nonResource, names, verbs] = line.trim().split(/\s{2,}/);
        if (!resource || !verbs || nonResource !== "[]") continue;
        const key = names === "[]" ? resource : `${resource} ${names}`;
        rows[key] = [...new Set([...(rows[key] ?? []), ...verbs.replace(/^\[|\]$/g, "").split(" ")])].sort();
      }
      return rows;
    };
    // What every authenticated user may do (reviews of its own access), left out of the comparisons.
    const own = (rows: Record<string, string[]>) =>
      Object.fromEntries(
        Object.entries(rows).filter(([r]) => !/^self\w+\.(authorization|authentication)\.k8s\.io$/.test(r)),
      );
    const all = ["create", "delete", "get", "list", "patch", "update", "watch"];
    const write = ["create", "get", "list", "patch", "update", "watch"];
    const watched = {
      "agents.ifp.dev": ["get", "list", "patch", "update", "watch"],
      "relays.ifp.dev": ["get", "list", "patch", "update", "watch"],
      "agents.ifp.dev/status": ["get", "patch", "update"],
      "relays.ifp.dev/status": ["get", "patch", "update"],
      "agents.ifp.dev/finalizers": ["update"],
      "relays.ifp.dev/finalizers": ["update"],
      configmaps: all,
      services: all,
      serviceaccounts: all,
      secrets: write,
      "deployments.apps": all,
      "networkpolicies.networking.k8s.io": ["create", "delete", "get", "list", "patch", "watch"],
      "poddisruptionbudgets.policy": ["create", "delete", "get", "list", "patch", "watch"],
    };
    const team = own(canList("ifp-ifp-operator", "-n", "rbac-team"));
    expect(team).toMatchObject(watched);
    // Secrets: never delete; and nothing anywhere on every resource (no wildcard).
    expect(team.secrets).not.toContain("delete");
    expect(Object.keys(team).some((r) => r.startsWith("*"))).toBe(false);
    expect(Object.values(team).some((verbs) => verbs.includes("*"))).toBe(false);
    // A namespace not listed: nothing at all but reading the watched namespaces' labels (cluster-scoped).
    expect(own(canList("ifp-ifp-operator", "-n", "rbac-other"))).toEqual({
      [`namespaces [${NS}]`]: ["get"],
      "namespaces [rbac-team]": ["get"],
    });
    // Its own namespace: the same, plus its CA Secret, its Deployment by name (read as it stops,
    // deleted by the uninstall hook), and the leader Lease.
    const home = own(canList("ifp-ifp-operator", "-n", NS));
    expect(home).toMatchObject(watched);
    expect(home["deployments.apps [ifp-ifp-operator]"]).toEqual(["delete", "get"]);
    expect(home["secrets [ifp-ifp-operator-ca]"]).toEqual(["get", "update"]);
    expect(home["leases.coordination.k8s.io"]).toEqual(["create", "get", "list", "patch", "update", "watch"]);
    // clusterWide: the same rules in a namespace nobody listed.
    expect(own(canList(WIDE_SA, "-n", "rbac-other"))).toMatchObject(watched);
    expect(own(canList("ifp-ifp-operator", "-n", "rbac-other"))).toEqual({
      [`namespaces [${NS}]`]: ["get"],
      "namespaces [rbac-team]": ["get"],
    });
  });

  it("tells the operator which images, issuers and DNS names a resource may name beyond its own, and refuses malformed ones", async () => {
    const args = (...set: string[]) =>
      find(docs(render(...set)), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args as string[];
    expect(args().filter((a) => /^--allowed-/.test(a))).toEqual([]);
    const listed = args(
      "allowedImages={registry.example/ifp/*}",
      "allowedIssuers={ClusterIssuer/letsencrypt,Issuer.awspca.cert-manager.io/*}",
      "allowedDnsNames={localhost,*.agents.example.com}",
    );
    expect(listed.filter((a) => /^--allowed-/.test(a))).toEqual([
      "--allowed-images=registry.example/ifp/*",
      "--allowed-issuers=ClusterIssuer/letsencrypt,Issuer.awspca.cert-manager.io/*",
      "--allowed-dns-names=localhost,*.agents.example.com",
    ]);
    const { parseFlags } = await import("../operator/src/commands/main.ts");
    expect(
      parseFlags(
        listed.filter((a) => /^--allowed-/.test(a)),
        {},
      ).options.settings,
    ).toMatchObject({
      allowedIssuers: ["ClusterIssuer/letsencrypt", "Issuer.awspca.cert-manager.io/*"],
      allowedDnsNames: ["localhost", "*.agents.example.com"],
    });
    expect(() => render("allowedIssuers={letsencrypt}")).toThrow(/allowedIssuers/);
    expect(() => render("allowedDnsNames={x.*.com}")).toThrow(/allowedDnsNames/);
    // Per namespace: one flag of namespace/host entries.
    const hosts = args(
      "allowedHosts.shop={shop.example.com,*.shop.example.net}",
      "allowedHosts.blog={blog.example.org}",
    );
    expect(hosts.filter((a) => /^--allowed-hosts/.test(a))).toEqual([
      "--allowed-hosts=blog/blog.example.org,shop/shop.example.com,shop/*.shop.example.net",
    ]);
    expect(
      parseFlags(
        hosts.filter((a) => /^--allowed-hosts/.test(a)),
        {},
      ).options.settings.allowedHosts,
    ).toEqual({ blog: ["blog.example.org"], shop: ["shop.example.com", "*.shop.example.net"] });
    expect(() => render("allowedHosts.shop={x.*.com}")).toThrow(/allowedHosts/);
    expect(() => render("allowedHosts.Shop={shop.example.com}")).toThrow(/Shop/);
  });

  it("tells the operator its own Deployment, which alone it may read and delete, and the rollout and finalizer limits", async () => {
    const objects = docs(render("runtime.maxRollingAgents=3", "runtime.finalizerTimeout=90s"));
    const args = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args as string[];
    expect(args).toEqual(
      expect.arrayContaining([
        `--operator-deployment=${NS}/ifp-ifp-operator`,
        "--max-rolling-agents=3",
        "--finalizer-timeout=90s",
      ]),
    );
    const role = find(objects, "Role", "ifp-ifp-operator-self");
    expect(role.metadata.namespace).toBe(NS);
    expect(role.rules).toEqual([
      {
        apiGroups: ["apps"],
        resources: ["deployments"],
        resourceNames: ["ifp-ifp-operator"],
        verbs: ["get", "delete"],
      },
    ]);
    expect(find(objects, "RoleBinding", "ifp-ifp-operator-self").subjects).toEqual([
      { kind: "ServiceAccount", name: "ifp-ifp-operator", namespace: NS },
    ]);
    expect(find(docs(render()), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args).toEqual(
      expect.arrayContaining(["--max-rolling-agents=25%", "--finalizer-timeout=5m"]),
    );
    const { parseFlags } = await import("../operator/src/commands/main.ts");
    expect(
      parseFlags(
        args.filter((a) => !a.startsWith("--extra-ca-file")),
        {},
      ).options,
    ).toMatchObject({
      operatorDeployment: { namespace: NS, name: "ifp-ifp-operator" },
      rolloutLimit: { count: 3 },
      finalizerTimeoutMs: 90_000,
    });
    expect(() => render("runtime.maxRollingAgents=0%")).toThrow(/maxRollingAgents/);
  });

  it("runs a pre-delete hook, with the operator's ServiceAccount, that deletes the operator's Deployment and releases its finalizers on the namespaces it watches", async () => {
    const { parsePrepareUninstallFlags } = await import("../operator/src/commands/main.ts");
    for (const [set, namespaces] of [
      [["watchNamespaces={team-a}"], [NS, "team-a"]],
      [["clusterWide=true"], []],
    ] as const) {
      const objects = docs(render(...set));
      const job = find(objects, "Job", "ifp-ifp-operator-uninstall");
      // Before Helm deletes anything (the RBAC the operator and the hook need among it), and
      // deleted once it succeeded.
      expect(job.metadata.annotations).toEqual({
        "helm.sh/hook": "pre-delete",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
      });
      const pod = job.spec.template.spec;
      const operator = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec;
      expect(pod.serviceAccountName).toBe(operator.serviceAccountName);
      expect(pod.restartPolicy).toBe("Never");
      expect(pod.containers[0].image).toBe(operator.containers[0].image);
      expect(pod.containers[0].args[0]).toBe("prepare-uninstall");
      expect(parsePrepareUninstallFlags(pod.containers[0].args.slice(1), {})).toMatchObject({
        deployment: { namespace: NS, name: "ifp-ifp-operator" },
        namespaces,
        timeoutMs: 120_000,
      });
      // It runs within Helm's default hook timeout (5m).
      expect(job.spec.activeDeadlineSeconds).toBeLessThan(300);
    }
    expect(() => render("runtime.finalizerTimeout=forever")).toThrow(/finalizerTimeout/);
  });

  it("keeps one trust domain: the install CA's Secret and Role, extra CAs, and a helm test that verifies TLS with the bundle", async () => {
    const { createCA } = await import("./support/tls.ts");
    const objects = docs(render());
    const args = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args as string[];
    expect(args).toEqual(
      expect.arrayContaining([
        "--ca-secret=ifp-ifp-operator-ca",
        `--ca-namespace=${NS}`,
        "--ca-validity=43800h",
        "--ca-rotate-before=8760h",
        "--ca-overlap=720h",
        "--cert-validity=8760h",
        "--cert-renew-before=720h",
      ]),
    );
    expect(args.some((a) => a.startsWith("--extra-ca-file"))).toBe(false);
    // The CA Secret and the NATS server certificate: get and update of those two Secrets, create
    // (which no name can limit), in the release's namespace.
    const role = find(objects, "Role", "ifp-ifp-operator-ca");
    expect(role.metadata.namespace).toBe(NS);
    expect(role.rules).toEqual([
      {
        apiGroups: [""],
        resources: ["secrets"],
        resourceNames: ["ifp-ifp-operator-ca", "ifp-ifp-operator-nats-tls"],
        verbs: ["get", "update"],
      },
      { apiGroups: [""], resources: ["secrets"], verbs: ["create"] },
    ]);
    expect(find(objects, "RoleBinding", "ifp-ifp-operator-ca").subjects).toEqual([
      { kind: "ServiceAccount", name: "ifp-ifp-operator", namespace: NS },
    ]);
    const scoped = docs(render("watchNamespaces={trust-team}", "trust.caSecretName=our-ca"));
    expect(find(scoped, "Role", "ifp-ifp-operator-ca").rules[0].resourceNames).toEqual([
      "our-ca",
      "ifp-ifp-operator-nats-tls",
    ]);
    expect(find(docs(render("nats.tls.enabled=false")), "Role", "ifp-ifp-operator-ca").rules[0].resourceNames).toEqual([
      "ifp-ifp-operator-ca",
    ]);
    // On the real API server, namespace-scoped: the operator may make and rotate its CA Secret.
    cp.kubectl(["create", "namespace", "trust-team"]);
    const rbac = scoped.filter((d) => ["ServiceAccount", "Role", "RoleBinding"].includes(d.kind));
    cp.kubectl(["apply", "-f", "-"], rbac.map((d) => JSON.stringify(d)).join("\n"));
    // Leave the shared control plane as it was for the other tests.
    onTestFinished(() => {
      cp.kubectl(["delete", "--wait=false", "-f", "-"], rbac.map((d) => JSON.stringify(d)).join("\n"));
      cp.kubectl(["delete", "namespace", "trust-team", "--wait=false"]);
    });
    const can = (...args: string[]) => {
      try {
        return cp.kubectl(["auth", "can-i", ...args, `--as=system:serviceaccount:${NS}:ifp-ifp-operator`]).trim();
      } catch (err) {
        return /failed \(exit 1\): no\s*$/.test((err as Error).message) ? "no" : (err as Error).message;
      }
    };
    expect([
      can("get", "secret/our-ca", "-n", NS),
      can("update", "secret/our-ca", "-n", NS),
      can("create", "secrets", "-n", NS),
    ]).toEqual(["yes", "yes", "yes"]);
    // Its own namespace is watched as well, where Secrets are read and written but never deleted.
    expect([
      can("get", "secret/other", "-n", NS),
      can("list", "secrets", "-n", NS),
      can("delete", "secret/our-ca", "-n", NS),
    ]).toEqual(["yes", "yes", "no"]);
    expect([
      can("get", "configmaps", "-n", "trust-team"),
      can("create", "configmaps", "-n", "trust-team"),
      can("get", "secrets", "-n", "trust-team"),
    ]).toEqual(["yes", "yes", "yes"]);
    // The helm test checks the test Agent over verified TLS, with the bundle the operator publishes for it.
    const test = find(objects, "Pod", "ifp-ifp-operator-test").spec;
    const env = test.containers[0].env as { name: string; value?: string }[];
    expect(env.map((e) => e.name)).not.toContain("NODE_TLS_REJECT_UNAUTHORIZED");
    expect(env).toContainEqual({ name: "NODE_EXTRA_CA_CERTS", value: "/etc/ifp/trust/ca.crt" });
    expect(test.containers[0].volumeMounts).toContainEqual({
      name: "trust",
      mountPath: "/etc/ifp/trust",
      readOnly: true,
    });
    expect(test.volumes).toContainEqual({ name: "trust", configMap: { name: "ifp-ifp-operator-test-trust" } });
    // trust.extraCAs: a ConfigMap mounted into the operator, read with --extra-ca-file, a change rolls it.
    const pem = (await createCA("company CA")).cert;
    const withExtra = docs(renderValues({ trust: { extraCAs: pem } }));
    expect(find(withExtra, "ConfigMap", "ifp-ifp-operator-extra-cas").data).toEqual({ "ca.crt": pem });
    const op = find(withExtra, "Deployment", "ifp-ifp-operator").spec.template;
    expect(op.spec.containers[0].args).toContain("--extra-ca-file=/etc/ifp/extra-cas/ca.crt");
    expect(op.spec.containers[0].volumeMounts).toContainEqual({
      name: "extra-cas",
      mountPath: "/etc/ifp/extra-cas",
      readOnly: true,
    });
    expect(op.spec.volumes).toContainEqual({ name: "extra-cas", configMap: { name: "ifp-ifp-operator-extra-cas" } });
    expect(op.metadata.annotations["checksum/extra-cas"]).toMatch(/^[0-9a-f]{64}$/);
    // The operator's flags parse what the chart renders.
    const { parseFlags } = await import("../operator/src/commands/main.ts");
    const parsed = parseFlags(
      args.filter((a) => !a.startsWith("--extra-ca-file")),
      {},
    );
    expect(parsed.options.trust).toMatchObject({
      namespace: NS,
      secretName: "ifp-ifp-operator-ca",
      lifetimes: { caOverlapMs: 720 * 3600_000 },
    });
    expect(() => render("trust.caOverlap=30d")).toThrow(/caOverlap/);
  });

  it("passes trust.certManager to the operator as the flags of its cert-manager mode, off by default", () => {
    const cmArgs = (values: object) =>
      (
        find(docs(renderValues(values)), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0]
          .args as string[]
      ).filter((a) => a.startsWith("--cert-manager-"));
    expect(cmArgs({})).toEqual([]);
    expect(parseFlags([], {}).options.trust?.certManager).toBeUndefined();
    const on = cmArgs({
      trust: {
        certManager: {
          issuerRef: { name: "ifp-ca" },
          bundle: { configMapName: "ifp-ca-bundle", key: "trust-bundle.pem" },
        },
      },
    });
    expect(on).toEqual([
      "--cert-manager-issuer=ClusterIssuer/ifp-ca",
      "--cert-manager-bundle=ifp-ca-bundle",
      "--cert-manager-bundle-key=trust-bundle.pem",
    ]);
    expect(parseFlags(on, {}).options.trust?.certManager).toEqual({
      issuerRef: { name: "ifp-ca", kind: "ClusterIssuer", group: "cert-manager.io" },
      bundle: { configMapName: "ifp-ca-bundle", key: "trust-bundle.pem" },
    });
    // An issuer of another API group, and a bundle under its default key.
    const external = cmArgs({
      trust: {
        certManager: {
          issuerRef: { name: "pca", kind: "AWSPCAClusterIssuer", group: "awspca.cert-manager.io" },
          bundle: { configMapName: "ifp-ca-bundle" },
        },
      },
    });
    expect(external).toEqual([
      "--cert-manager-issuer=AWSPCAClusterIssuer.awspca.cert-manager.io/pca",
      "--cert-manager-bundle=ifp-ca-bundle",
      "--cert-manager-bundle-key=ca.crt",
    ]);
    expect(parseFlags(external, {}).options.trust?.certManager).toEqual({
      issuerRef: { name: "pca", kind: "AWSPCAClusterIssuer", group: "awspca.cert-manager.io" },
      bundle: { configMapName: "ifp-ca-bundle", key: "ca.crt" },
    });
    expect(() => render("trust.certManager.issuerRef.name=Our_CA")).toThrow(/certManager/);
    expect(() => render("trust.certManager.bundle.key=a/b")).toThrow(/certManager/);
    // The operator refuses what the chart would not render.
    expect(() => parseFlags(["--cert-manager-issuer=ifp-ca"], {})).toThrow(
      /--cert-manager-issuer takes Kind\[.group\]\/name/,
    );
    expect(() => parseFlags(["--cert-manager-bundle-key=ca.crt"], {})).toThrow(
      /--cert-manager-bundle-key needs --cert-manager-bundle/,
    );
  });

  it("configures an installed NATS that nats-server itself accepts, with the operator's auth.conf where the pod mounts it", async () => {
    // The pod mounts the ConfigMap at /etc/nats and the auth.conf the operator writes at /etc/nats-auth.
    const authConf = await serverConfig(generateKeys());
    // The certificate the operator writes into <fullname>-nats-tls, mounted at /etc/nats-tls.
    const ca = await createCA("chart test CA");
    const leaf = await ca.issue({
      commonName: "ifp-ifp-operator-nats",
      dnsNames: ["ifp-ifp-operator-nats"],
      bothEnds: true,
    });
    for (const [replicas, auth, tls] of [
      ["1", true, true],
      ["3", true, true],
      ["1", false, true],
      ["3", true, false],
    ] as const) {
      const objects = docs(
        render(
          `nats.replicas=${replicas}`,
          `nats.auth.enabled=${auth}`,
          `nats.tls.enabled=${tls}`,
          `runtime.natsLayout=${auth ? "isolated" : "per-agent"}`,
        ),
      );
      const cm = objects.find((d) => d.kind === "ConfigMap" && d.metadata.name.endsWith("-nats"))!;
      const sts = find(objects, "StatefulSet", "ifp-ifp-operator-nats");
      const mounts = sts.spec.template.spec.containers[0].volumeMounts.map((m: { mountPath: string }) => m.mountPath);
      expect(mounts).toContain("/etc/nats");
      expect(mounts.includes("/etc/nats-auth")).toBe(auth);
      expect(cm.data["nats.conf"].includes('include "../nats-auth/auth.conf"')).toBe(auth);
      const base = tempDir("ifp-nats-conf-");
      mkdirSync(join(base, "nats"));
      mkdirSync(join(base, "nats-auth"));
      // The account JWTs the operator pushes go to the NATS volume (/data/jwt), here under base.
      writeFileSync(
        join(base, "nats-auth", "auth.conf"),
        authConf.replace('dir: "/data/jwt"', `dir: "${join(base, "jwt")}"`),
      );
      const conf = join(base, "nats", "nats.conf");
      expect(mounts.includes("/etc/nats-tls")).toBe(tls);
      expect(/^\s*tls \{/m.test(cm.data["nats.conf"])).toBe(tls);
      mkdirSync(join(base, "nats-tls"));
      writeFileSync(join(base, "nats-tls", "tls.crt"), leaf.cert);
      writeFileSync(join(base, "nats-tls", "tls.key"), leaf.key);
      writeFileSync(join(base, "nats-tls", "ca.crt"), ca.cert);
      writeFileSync(
        conf,
        cm.data["nats.conf"]
          .replace("$POD_NAME", "test")
          .replace("/data/jetstream", join(base, "js"))
          .replaceAll("/etc/nats-tls", join(base, "nats-tls")),
      );
      const r = spawnSync(toolPath("nats-server"), ["-c", conf, "-t"], { encoding: "utf8", timeout: 30_000 });
      expect(r.status, r.stderr || r.error?.message).toBe(0);
    }
  });

  it("serves the installed NATS over TLS by default: the operator's certificate, a reloader beside each server, runtimes verifying with the install's trust", () => {
    const objects = docs(render());
    const args: string[] = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(args).toContain("--nats-tls-secret=ifp-ifp-operator-nats-tls");
    const names = args
      .find((a) => a.startsWith("--nats-tls-dns-names="))!
      .split("=")[1]!
      .split(",");
    expect(names).toEqual(
      expect.arrayContaining([`ifp-ifp-operator-nats.${NS}.svc`, `*.ifp-ifp-operator-nats-headless.${NS}.svc`]),
    );
    // The operator's own parser takes them as the chart renders them.
    expect(parseFlags(args).options).toMatchObject({
      natsTlsVerifyWithTrust: true,
      natsServerTls: { secretName: "ifp-ifp-operator-nats-tls", dnsNames: names },
    });
    const pod = find(objects, "StatefulSet", "ifp-ifp-operator-nats").spec.template.spec;
    expect(pod.shareProcessNamespace).toBe(true);
    expect(pod.volumes.find((v: { name: string }) => v.name === "tls").secret).toEqual({
      secretName: "ifp-ifp-operator-nats-tls",
    });
    const reloader = pod.containers.find((c: { name: string }) => c.name === "reloader");
    expect(reloader.image).toBe(find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].image);
    expect(reloader.args).toEqual(["reload-nats", "--watch=/etc/nats-tls", "--pid-file=/var/run/nats/nats.pid"]);
    expect(find(objects, "ConfigMap", "ifp-ifp-operator-nats").data["nats.conf"]).toMatch(
      /pid_file: \/var\/run\/nats\/nats.pid/,
    );
    // A NATS of one's own: as it offers TLS, unless it is to be verified with the install's trust;
    // no certificate issued either way.
    const ownArgs = (...set: string[]): string[] =>
      find(
        docs(render("nats.install=false", "nats.url=nats://nats.example:4222", ...set)),
        "Deployment",
        "ifp-ifp-operator",
      ).spec.template.spec.containers[0].args;
    expect(ownArgs().some((a) => a.startsWith("--nats-tls"))).toBe(false);
    expect(ownArgs("nats.tls.verifyOwnServer=true")).toContain("--nats-tls=trust");
    expect(ownArgs("nats.tls.verifyOwnServer=true").some((a) => a.startsWith("--nats-tls-secret"))).toBe(false);
    // Off: neither.
    const off: string[] = find(docs(render("nats.tls.enabled=false")), "Deployment", "ifp-ifp-operator").spec.template
      .spec.containers[0].args;
    expect(off.some((a) => a.startsWith("--nats-tls"))).toBe(false);
    expect(
      find(
        docs(render("nats.tls.enabled=false")),
        "StatefulSet",
        "ifp-ifp-operator-nats",
      ).spec.template.spec.containers.map((c: { name: string }) => c.name),
    ).toEqual(["nats"]);
  });

  it("repairs a single NATS server's store before it starts, and starts it without waiting for a stream it cannot load", () => {
    const single = find(docs(render()), "StatefulSet", "ifp-ifp-operator-nats").spec.template.spec;
    const [repair] = single.initContainers;
    expect(repair.name).toBe("repair-store");
    expect(repair.image).toBe(
      find(docs(render()), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].image,
    );
    expect(repair.args).toEqual(["repair-nats-store", "--store-dir=/data/jetstream"]);
    expect(repair.volumeMounts).toEqual([{ name: "data", mountPath: "/data" }]);
    // The operator's own parser takes the arguments as the chart renders them.
    expect(parseRepairFlags(repair.args.slice(1))).toMatchObject({ storeDir: "/data/jetstream" });
    expect(single.containers[0].startupProbe.httpGet.path).toBe("/healthz?js-server-only=true");
    // A cluster holds streams of more replicas, and a restarted server catches up before it counts as started.
    const cluster = find(docs(render("nats.replicas=3")), "StatefulSet", "ifp-ifp-operator-nats").spec.template.spec;
    expect(cluster.initContainers).toBeUndefined();
    expect(cluster.containers[0].startupProbe.httpGet.path).toBe("/healthz");
  });

  it("runs NATS with authentication by default: the operator holds the account key, NATS reads only auth.conf", () => {
    const objects = docs(render());
    const args: string[] = find(objects, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args;
    expect(args).toEqual(
      expect.arrayContaining([
        "--nats-account-secret=ifp-ifp-operator-nats-account",
        `--nats-account-secret-namespace=${NS}`,
      ]),
    );
    const volumes = find(objects, "StatefulSet", "ifp-ifp-operator-nats").spec.template.spec.volumes;
    expect(volumes.find((v: { name: string }) => v.name === "auth").secret).toEqual({
      secretName: "ifp-ifp-operator-nats-account",
      items: [{ key: "auth.conf", path: "auth.conf" }],
    });
    const role = find(objects, "Role", "ifp-ifp-operator-nats-account");
    expect(role.rules[0]).toEqual({
      apiGroups: [""],
      resources: ["secrets"],
      resourceNames: ["ifp-ifp-operator-nats-account"],
      verbs: ["get", "update"],
    });
    // A Secret of one's own; or no authentication at all.
    expect(
      find(docs(render("nats.auth.accountSecret=mine")), "Deployment", "ifp-ifp-operator").spec.template.spec
        .containers[0].args,
    ).toContain("--nats-account-secret=mine");
    const off = docs(render("nats.auth.enabled=false", "runtime.natsLayout=per-agent"));
    expect(
      find(off, "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args.some((a: string) =>
        a.startsWith("--nats-account-secret"),
      ),
    ).toBe(false);
    expect(off.some((d) => d.kind === "Role" && d.metadata.name.endsWith("-nats-account"))).toBe(false);
  });

  it("admits NATS's client port only from the operator's and the runtimes' pods", () => {
    const objects = docs(render());
    const np = find(objects, "NetworkPolicy", "ifp-ifp-operator-nats");
    const nats = find(objects, "StatefulSet", "ifp-ifp-operator-nats").spec.template.metadata.labels;
    const operator = find(objects, "Deployment", "ifp-ifp-operator").spec.template.metadata.labels;
    const runtime = {
      "app.kubernetes.io/name": "ifp-runtime",
      "app.kubernetes.io/instance": "alice",
      "app.kubernetes.io/component": "agent",
      "app.kubernetes.io/part-of": "ifp-operator",
      "app.kubernetes.io/managed-by": "ifp-operator",
    };
    const stranger = { app: "something-else", "app.kubernetes.io/part-of": "ifp-operator" };
    expect(selects(np.spec.podSelector, nats)).toBe(true);
    expect(selects(np.spec.podSelector, operator)).toBe(false);
    const [client, cluster] = np.spec.ingress;
    expect(client.ports).toEqual([{ port: "client", protocol: "TCP" }]);
    const admitted = (labels: Record<string, string>) =>
      client.from.some((f: { podSelector: object }) => selects(f.podSelector, labels));
    expect([admitted(operator), admitted(runtime), admitted(stranger)]).toEqual([true, true, false]);
    expect(cluster.ports).toEqual([{ port: "cluster", protocol: "TCP" }]);
    expect(selects(cluster.from[0].podSelector, nats)).toBe(true);
    const natsPolicy = (d: Obj) => d.kind === "NetworkPolicy" && d.metadata.name === "ifp-ifp-operator-nats";
    expect(docs(render("nats.networkPolicy.enabled=false")).some(natsPolicy)).toBe(false);
    expect(docs(render("nats.install=false", "nats.url=nats://n:4222")).some(natsPolicy)).toBe(false);
  });

  it("admits the operator's metrics port only from the namespaces listed and its health port only from the release's namespace, and has the operator render the runtimes' NetworkPolicies", async () => {
    const objects = docs(render("metrics.networkPolicyNamespaces={monitoring}"));
    const np = find(objects, "NetworkPolicy", "ifp-ifp-operator");
    const operator = find(objects, "Deployment", "ifp-ifp-operator");
    const nats = find(objects, "StatefulSet", "ifp-ifp-operator-nats").spec.template.metadata.labels;
    expect(selects(np.spec.podSelector, operator.spec.template.metadata.labels)).toBe(true);
    expect(selects(np.spec.podSelector, nats)).toBe(false);
    expect(np.metadata.namespace).toBe(NS);
    expect(np.spec.policyTypes).toEqual(["Ingress"]);
    const [health, metrics, ...rest] = np.spec.ingress;
    expect(rest).toEqual([]);
    // The health port: every pod of the policy's own namespace (no namespaceSelector), the helm test pod among them.
    expect(health).toEqual({ from: [{ podSelector: {} }], ports: [{ port: "health", protocol: "TCP" }] });
    expect(metrics).toEqual({
      from: [
        {
          namespaceSelector: {
            matchExpressions: [{ key: "kubernetes.io/metadata.name", operator: "In", values: ["monitoring"] }],
          },
        },
      ],
      ports: [{ port: "metrics", protocol: "TCP" }],
    });
    // The named ports are the operator container's.
    expect(operator.spec.template.spec.containers[0].ports.map((p: { name: string }) => p.name)).toEqual([
      "metrics",
      "health",
    ]);
    // By default no namespace may reach the metrics port.
    expect(
      find(docs(render()), "NetworkPolicy", "ifp-ifp-operator").spec.ingress.map(
        (r: { ports: { port: string }[] }) => r.ports[0]!.port,
      ),
    ).toEqual(["health"]);
    expect(
      docs(render("networkPolicy.operator.enabled=false")).some(
        (d) => d.kind === "NetworkPolicy" && d.metadata.name === "ifp-ifp-operator",
      ),
    ).toBe(false);
    expect(
      docs(render("networkPolicy.operator.enabled=false", "nats.networkPolicy.enabled=false")).some(
        (d) => d.kind === "NetworkPolicy",
      ),
    ).toBe(false);

    // The runtimes' NetworkPolicies are the operator's to render: a flag, and the namespaces for their metrics port.
    const args = (...set: string[]) =>
      find(docs(render(...set)), "Deployment", "ifp-ifp-operator").spec.template.spec.containers[0].args as string[];
    const { parseFlags } = await import("../operator/src/commands/main.ts");
    const on = args("metrics.networkPolicyNamespaces={monitoring,ops}").filter((a) =>
      /^--(runtime-network-policies|metrics-namespaces)/.test(a),
    );
    expect(on).toEqual(["--runtime-network-policies=true", "--metrics-namespaces=monitoring,ops"]);
    expect(parseFlags(on, {}).options.settings.runtimeNetworkPolicies).toEqual({
      metricsNamespaces: ["monitoring", "ops"],
    });
    const off = args("networkPolicy.runtimes.enabled=false").filter((a) =>
      /^--(runtime-network-policies|metrics-namespaces)/.test(a),
    );
    expect(off).toEqual(["--runtime-network-policies=false"]);
    expect(parseFlags(off, {}).options.settings.runtimeNetworkPolicies).toBeUndefined();
    expect(() => render("metrics.networkPolicyNamespaces={Monitoring}")).toThrow(/networkPolicyNamespaces/);
  });

  it.each(Object.entries(VALUE_SETS))(
    "has no kube-score findings left unexplained (%s)",
    (_name, { values, explained }) => {
      expectKubeScoreClean(renderValues({ ...values, tests: { enabled: false } }), explained);
    },
  );
});
