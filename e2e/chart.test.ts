import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";

const CHART = "charts/ifp-operator";
const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), args, { encoding: "utf8" });
  return { status: r.status, out: r.stdout + r.stderr, stdout: r.stdout };
};
const render = (...set: string[]) => {
  const r = helm("template", "ifp", CHART, "--namespace", "ifp-system", ...set.flatMap((s) => ["--set", s]));
  if (r.status !== 0) throw new Error(r.out);
  return r.stdout;
};
const docs = (yaml: string) => parseAllDocuments(yaml).map((d) => d.toJSON()).filter(Boolean);

/** kube-score checks that are deliberately not followed, and why. */
const KUBE_SCORE_EXPLAINED: Record<string, string> = {
  "container-resources": "CPU limits are left out on purpose: they throttle a latency-sensitive controller and NATS; CPU and memory requests and a memory limit are set",
  "container-image-pull-policy": "IfNotPresent with versioned tags; Always would make every restart depend on the registry",
  "pod-networkpolicy": "which traffic to allow depends on the cluster's CNI and where agents live; a NetworkPolicy is the installer's decision",
  "deployment-has-poddisruptionbudget": "one active operator replica by design (leader election); a PDB would block node drains",
  "deployment-has-host-podantiaffinity": "a single replica by default",
  "statefulset-has-poddisruptionbudget": "a single-node NATS by default; a PDB for the 3-node option is the installer's decision",
  "statefulset-has-host-podantiaffinity": "a single-node NATS by default",
  "deployment-replicas": "one active replica by design (leader election)",
  "pod-probes": "probes are set; kube-score wants readiness and liveness to differ, and they do by endpoint but share the port",
};

describe("Helm chart", () => {
  let cp: ControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false });
    cp.kubectl(["create", "namespace", "ifp-system"]);
  }, 300_000);
  afterAll(async () => {
    await cp?.stop();
  });

  it("passes helm lint --strict with default and non-default values", () => {
    expect(helm("lint", "--strict", CHART).status).toBe(0);
    expect(helm("lint", "--strict", CHART, "--set", "nats.install=false", "--set", "nats.url=nats://nats:4222", "--set", "watchNamespaces={a,b}").status).toBe(0);
  });

  it("refuses values its schema does not allow, naming them", () => {
    const r = helm("template", "ifp", CHART, "--set", "nats.replicas=2");
    expect(r.status).not.toBe(0);
    expect(r.out).toMatch(/nats\/replicas/);
    expect(helm("template", "ifp", CHART, "--set", "natz.url=x").out).toMatch(/additional properties 'natz' not allowed|natz/);
    expect(helm("template", "ifp", CHART, "--set", "nats.install=false").out).toMatch(/nats.url is required/);
  });

  it.each([
    ["defaults", [] as string[]],
    ["namespace-scoped, external NATS with credentials, 3 replicas", ["watchNamespaces={ifp-system}", "nats.install=false", "nats.url=nats://nats.example:4222", "nats.credentialsSecret.name=nats-creds", "replicaCount=3"]],
    ["clustered NATS, no CRDs, no RBAC", ["nats.replicas=3", "crds.enabled=false", "rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=existing"]],
  ])("renders (%s) into manifests the real API server accepts", (_name, set) => {
    const yaml = render(...set, "tests.enabled=false");
    const out = cp.kubectl(["apply", "--dry-run=server", "-n", "ifp-system", "-f", "-"], yaml);
    expect(out).toMatch(/deployment.apps\/ifp-ifp-operator created \(server dry run\)/);
  });

  it("templates the CRDs behind crds.enabled with a keep policy, identical to crds/", () => {
    const crds = docs(render()).filter((d) => d.kind === "CustomResourceDefinition");
    expect(crds.map((c) => c.metadata.name).sort()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(crds[0].metadata.annotations["helm.sh/resource-policy"]).toBe("keep");
    expect(docs(render("crds.enabled=false")).some((d) => d.kind === "CustomResourceDefinition")).toBe(false);
    expect(docs(render("crds.keep=false")).find((d) => d.kind === "CustomResourceDefinition").metadata.annotations?.["helm.sh/resource-policy"]).toBeUndefined();
  });

  it("gives the operator least-privilege RBAC, cluster-wide or per namespace", () => {
    const cluster = docs(render());
    expect(cluster.filter((d) => d.kind === "ClusterRole")).toHaveLength(1);
    const scoped = docs(render("watchNamespaces={team-a,team-b}"));
    expect(scoped.filter((d) => d.kind === "ClusterRole")).toHaveLength(0);
    expect(scoped.filter((d) => d.kind === "Role" && d.metadata.namespace === "team-a")).toHaveLength(1);
    const role = cluster.find((d) => d.kind === "ClusterRole");
    expect(JSON.stringify(role.rules)).not.toMatch(/"\*"/);
    const dep = cluster.find((d) => d.kind === "Deployment" && d.metadata.name === "ifp-ifp-operator");
    expect(dep.spec.template.spec.containers[0].args).toEqual(expect.arrayContaining(["--leader-elect=true", "--leader-election-namespace=ifp-system", `--nats-url=nats://ifp-ifp-operator-nats.ifp-system.svc:4222`]));
    expect(dep.spec.template.spec.containers[0].securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(dep.spec.template.spec.securityContext).toMatchObject({ runAsNonRoot: true });
  });

  it("configures an installed NATS that nats-server itself accepts", () => {
    for (const replicas of ["1", "3"]) {
      const cm = docs(render(`nats.replicas=${replicas}`)).find((d) => d.kind === "ConfigMap" && d.metadata.name.endsWith("-nats"));
      const dir = mkdtempSync(join(tmpdir(), "ifp-nats-conf-"));
      const conf = join(dir, "nats.conf");
      writeFileSync(conf, cm.data["nats.conf"].replace("$POD_NAME", "test").replace("/data/jetstream", join(dir, "js")));
      const r = spawnSync(toolPath("nats-server"), ["-c", conf, "-t"], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
    }
  });

  it("has no kube-score findings left unexplained", () => {
    const yaml = render("tests.enabled=false");
    const dir = mkdtempSync(join(tmpdir(), "ifp-chart-"));
    const file = join(dir, "chart.yaml");
    writeFileSync(file, yaml);
    const r = spawnSync(toolPath("kube-score"), ["score", "--output-format", "ci", ...Object.keys(KUBE_SCORE_EXPLAINED).flatMap((t) => ["--ignore-test", t]), file], { encoding: "utf8" });
    const findings = r.stdout.split("\n").filter((l) => /^\[(CRITICAL|WARNING)\]/.test(l));
    expect(findings).toEqual([]);
  });
});
