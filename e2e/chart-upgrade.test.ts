// What a chart upgrade must never take: the users' Agents and Relays and their signing Secrets.
// A real API server on which the chart owns the CRDs; `helm upgrade` to a newer chart (a new
// version, a CRD schema that changed), `helm rollback`, the CRDs turned off and on again, and
// `helm uninstall`: the stored objects stay as they were, and the CRDs with them. And
// `helm uninstall` with the operator running: no finalizer of its stays to block a deletion. And
// the operator's NATS layout: isolated after `helm upgrade` of a per-agent install to the defaults,
// per-agent again after `helm rollback`.
import { spawn, spawnSync } from "node:child_process";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { parseFlags } from "../operator/src/commands/main.ts";
import { DEFAULT_TENANT_LIMITS } from "../operator/src/concerns/nats/data-accounts.ts";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { Kubelet } from "./support/kubelet.ts";
import { tempDir } from "./support/process.ts";
import { waitFor } from "./support/wait.ts";

const CHART = "charts/ifp-operator";
const NS = "ifp-system";
const USERS = "team";
let cp: ControlPlane;
let kubelet: Kubelet;
let helmEnv: NodeJS.ProcessEnv = process.env;

const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), [...args, "--kubeconfig", cp.kubeconfig], {
    encoding: "utf8",
    timeout: 60_000,
    env: helmEnv,
  });
  if (r.error) throw new Error(`helm ${args.join(" ")} could not run: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`helm ${args.join(" ")} failed (exit ${r.status}): ${r.stdout}${r.stderr}`);
  return r.stdout;
};
/**
 * `helm uninstall`, run while the test plays the Job controller and kubelet of the chart's hook
 * Jobs (helm waits for them), and so not blocking this process as spawnSync would.
 */
const uninstall = (...args: string[]) =>
  new Promise<string>((resolve, reject) => {
    const child = spawn(toolPath("helm"), ["uninstall", ...args, "--timeout", "3m", "--kubeconfig", cp.kubeconfig], {
      env: helmEnv,
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`helm uninstall ${args.join(" ")} failed (exit ${code}): ${out}`)),
    );
  });
const BASE = [
  "--set",
  "nats.install=false",
  "--set",
  "nats.url=nats://nats.example:4222",
  "--set",
  "tests.enabled=false",
];

/** The chart as a later release would ship it: a new version, and a CRD whose schema changed. */
function nextChart(): string {
  const dir = join(tempDir("ifp-chart-next-"), "ifp-operator");
  cpSync(CHART, dir, { recursive: true });
  const chartFile = join(dir, "Chart.yaml");
  const chart = parse(readFileSync(chartFile, "utf8"));
  writeFileSync(chartFile, stringify({ ...chart, version: `${chart.version}-next.1` }));
  const crdFile = join(dir, "files/crds/agents.ifp.dev.yaml");
  const crd = parse(readFileSync(crdFile, "utf8"));
  crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.note = {
    type: "string",
    description: "A field a later version adds",
  };
  writeFileSync(crdFile, stringify(crd));
  return dir;
}

/**
 * The chart as the previous release shipped it, but for its names: every object named
 * <release>-ifp-operator (the chart's name, whatever nameOverride says) and <that>-<suffix> uncut,
 * however long.
 */
function previousChart(): string {
  const dir = join(tempDir("ifp-chart-previous-"), "ifp-operator");
  cpSync(CHART, dir, { recursive: true });
  const helpers = join(dir, "templates/_helpers.tpl");
  const define = (name: string, body: string) => (text: string) => {
    const re = new RegExp(`\\{\\{- define "ifp-operator\\.${name}" -\\}\\}[\\s\\S]*?\\n\\{\\{- end \\}\\}\\n(?=\\n)`);
    if (!re.test(text)) throw new Error(`no template ifp-operator.${name} in ${helpers}`);
    return text.replace(re, `{{- define "ifp-operator.${name}" -}}\n${body}\n{{- end }}\n`);
  };
  const text = [
    define(
      "fullname",
      '{{- if .Values.fullnameOverride }}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}{{ else }}{{ include "ifp-operator.chartFullname" . }}{{ end }}',
    ),
    define("suffixed", '{{- printf "%s-%s" (include "ifp-operator.fullname" .root) .suffix }}'),
  ].reduce((t, f) => f(t), readFileSync(helpers, "utf8"));
  writeFileSync(helpers, text);
  return dir;
}

/** What must survive, as stored: uid, generation and spec of each object, and the Secret's data. */
function stored() {
  const agents = cp.json(["-n", USERS, "get", "agents"]).items as any[];
  const relays = cp.json(["-n", USERS, "get", "relays"]).items as any[];
  const secret = cp.json(["-n", USERS, "get", "secret", "alice-signing"]);
  return {
    agents: agents.map((a) => ({
      name: a.metadata.name,
      uid: a.metadata.uid,
      generation: a.metadata.generation,
      spec: a.spec,
    })),
    relays: relays.map((r) => ({ name: r.metadata.name, uid: r.metadata.uid, spec: r.spec })),
    secret: { uid: secret.metadata.uid, data: secret.data },
  };
}
const crdNames = () =>
  (cp.json(["get", "crd", "-l", "app.kubernetes.io/part-of=ifp-operator"]).items as any[])
    .map((c) => c.metadata.name)
    .sort();

/**
 * A new control plane for the tests of a describe block, so that each starts from a cluster
 * without the chart: no CRDs installed beforehand (the chart brings them). The controller
 * manager makes the operator's pods and deletes them with its Deployment (garbage collection);
 * the test plays the Job controller and kubelet of the chart's uninstall hook.
 */
function onNewControlPlane(): void {
  beforeAll(async () => {
    const home = tempDir("ifp-helm-home-");
    helmEnv = {
      ...process.env,
      HELM_CACHE_HOME: join(home, "cache"),
      HELM_CONFIG_HOME: join(home, "config"),
      HELM_DATA_HOME: join(home, "data"),
    };
    cp = await startControlPlane();
    kubelet = new Kubelet(cp);
    await kubelet.start();
    kubelet.runHookJobs(NS);
  }, 300_000);
  afterAll(async () => {
    await kubelet?.stop();
    await cp?.stop();
  });
}

describe("chart upgrade", () => {
  onNewControlPlane();

  // Six helm releases and an uninstall with its hook, one after another.
  it("keeps the stored Agents, Relays and signing Secrets through upgrade, rollback, CRDs turned off and on, and uninstall, whose hook releases the finalizers a killed operator left", {
    timeout: 300_000,
  }, async () => {
    // The users' namespace is watched (so it exists first).
    cp.kubectl(["create", "namespace", USERS]);
    const VALUES = [...BASE, "--set", `watchNamespaces={${USERS}}`];
    helm("install", "ifp", CHART, "-n", NS, "--create-namespace", ...VALUES);
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: v1
kind: Secret
metadata: {name: alice-signing, namespace: ${USERS}, labels: {ifp.dev/agent: alice}}
stringData: {signing.key: "kept as it is"}
---
apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: alice, namespace: ${USERS}}
spec:
  agentId: https://alice.example
  signing: {secretName: alice-signing}
  capabilities: [{name: chat.talk, description: talks}]
---
apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: hub, namespace: ${USERS}}
spec:
  url: https://hub.example
  retention: {maxAge: 72h}
`,
    );
    const before = stored();
    expect(before.agents.map((a) => a.name)).toEqual(["alice"]);

    // A newer chart, with a changed CRD schema and other values.
    helm("upgrade", "ifp", nextChart(), "-n", NS, ...VALUES, "--set", "logLevel=debug");
    expect(stored()).toEqual(before);
    // The API server publishes a CRD's new schema a moment after the change.
    await waitFor(
      "the new field in kubectl explain",
      () => /A field a later version adds/.test(cp.kubectl(["explain", "agents.spec.note"])),
      30_000,
      250,
    );

    helm("rollback", "ifp", "1", "-n", NS);
    expect(stored()).toEqual(before);
    await waitFor(
      "the field gone from kubectl explain",
      () => {
        try {
          cp.kubectl(["explain", "agents.spec.note"]);
          return false;
        } catch (err) {
          if (/field "note" does not exist/.test((err as Error).message)) return true;
          throw err;
        }
      },
      30_000,
      250,
    );

    // The CRDs left out of the release: Helm's keep policy leaves them, and the objects, in place;
    // turned on again, the release takes them back.
    helm("upgrade", "ifp", CHART, "-n", NS, ...VALUES, "--set", "crds.enabled=false");
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(stored()).toEqual(before);
    helm("upgrade", "ifp", CHART, "-n", NS, ...VALUES, "--set", "crds.enabled=true");
    expect(stored()).toEqual(before);
    expect(
      JSON.parse(helm("history", "ifp", "-n", NS, "-o", "json")).map(
        (r: { revision: number; status: string }) => `${r.revision} ${r.status}`,
      ),
    ).toEqual(["1 superseded", "2 superseded", "3 superseded", "4 superseded", "5 deployed"]);

    // Finalizers an operator that was killed left behind (none runs here): the uninstall hook
    // removes them itself, with an Event on each.
    cp.kubectl([
      "-n",
      USERS,
      "patch",
      "agent",
      "alice",
      "--type=merge",
      "-p",
      '{"metadata":{"finalizers":["ifp.dev/jetstream"]}}',
    ]);
    cp.kubectl([
      "-n",
      USERS,
      "patch",
      "relay",
      "hub",
      "--type=merge",
      "-p",
      '{"metadata":{"finalizers":["ifp.dev/stream"]}}',
    ]);
    await uninstall("ifp", "-n", NS);
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(stored()).toEqual(before);
    expect(
      [
        ...(cp.json(["-n", USERS, "get", "agents"]).items as any[]),
        ...(cp.json(["-n", USERS, "get", "relays"]).items as any[]),
      ].map((o) => o.metadata.finalizers ?? []),
    ).toEqual([[], []]);
    const released = (
      cp.json(["-n", USERS, "get", "events", "--field-selector", "reason=FinalizerReleased"]).items as any[]
    )
      .map((e) => `${e.involvedObject.kind}/${e.involvedObject.name}`)
      .sort();
    expect(released).toEqual(["Agent/alice", "Relay/hub"]);
  });

  it("keeps an install's names through an upgrade to the chart of Helm's common names: NATS's StatefulSet and volume, the operator's Secrets, Deployment and ServiceAccount", async () => {
    // An install whose nameOverride the previous chart left out of its names, and one whose
    // names were longer than 63 characters; each as its operator left it, with its Secrets.
    const byName = { ns: "names-override", release: "ifp", set: ["--set", "nameOverride=agents"] };
    const long = { ns: "names-long", release: "a".repeat(53), set: [...BASE] };
    const previous = previousChart();
    // The CRDs stay with the release that installed them above.
    const KEPT = ["--set", "tests.enabled=false", "--set", "crds.enabled=false"];
    const secrets = (ns: string) =>
      Object.fromEntries(
        (cp.json(["-n", ns, "get", "secrets", "--field-selector", "type!=helm.sh/release.v1"]).items as any[]).map(
          (s) => [s.metadata.name, s.metadata.uid],
        ),
      );
    const uids = (ns: string, kinds: string) =>
      Object.fromEntries(
        (cp.json(["-n", ns, "get", kinds]).items as any[]).map((o) => [`${o.kind}/${o.metadata.name}`, o.metadata.uid]),
      );
    const args = (ns: string, name: string) =>
      cp.json(["-n", ns, "get", "deployment", name]).spec.template.spec.containers[0].args as string[];
    for (const { ns, release, set } of [byName, long]) {
      helm("install", release, previous, "-n", ns, "--create-namespace", ...KEPT, ...set);
      const operator = (cp.json(["-n", ns, "get", "deployments"]).items as any[])[0];
      for (const flag of ["ca-secret", "nats-account-secret", "nats-tls-secret"]) {
        const name = args(ns, operator.metadata.name)
          .find((a) => a.startsWith(`--${flag}=`))
          ?.split("=")[1];
        if (name) cp.kubectl(["-n", ns, "create", "secret", "generic", name, `--from-literal=key=${flag}`]);
      }
    }
    expect(uids(byName.ns, "deployments,statefulsets,serviceaccounts")).toHaveProperty("Deployment/ifp-ifp-operator");
    expect(uids(byName.ns, "statefulsets")).toHaveProperty(["StatefulSet/ifp-ifp-operator-nats"]);
    // The StatefulSet's claim, as its controller makes it: the NATS data.
    await waitFor(
      "the NATS server's claim",
      () => cp.tryJson(["-n", byName.ns, "get", "pvc", "data-ifp-ifp-operator-nats-0"]) !== undefined,
      30_000,
      250,
    );
    const before = {
      objects: uids(byName.ns, "deployments,statefulsets,serviceaccounts,pvc"),
      secrets: secrets(byName.ns),
      longSecrets: secrets(long.ns),
    };
    const longCA = `${long.release}-ifp-opera-ca`;
    expect(Object.keys(before.longSecrets)).toContain(longCA);

    for (const { ns, release, set } of [byName, long]) helm("upgrade", release, CHART, "-n", ns, ...KEPT, ...set);

    // The same objects, by uid: the StatefulSet (so its claim and the data on it), the Deployment,
    // the ServiceAccount, and the Secrets the operator is told; nothing under the new names.
    expect(uids(byName.ns, "deployments,statefulsets,serviceaccounts,pvc")).toEqual(before.objects);
    expect(secrets(byName.ns)).toEqual(before.secrets);
    expect(args(byName.ns, "ifp-ifp-operator")).toEqual(
      expect.arrayContaining([
        "--ca-secret=ifp-ifp-operator-ca",
        "--nats-account-secret=ifp-ifp-operator-nats-account",
        "--nats-tls-secret=ifp-ifp-operator-nats-tls",
        `--nats-url=nats://ifp-ifp-operator-nats.${byName.ns}.svc:4222`,
      ]),
    );
    // The long one keeps its CA and NATS account Secrets, uncut; its other names now fit in 63.
    const longOperator = `${long.release}-ifp-opera`;
    expect(args(long.ns, longOperator)).toEqual(
      expect.arrayContaining([`--ca-secret=${longCA}`, `--nats-account-secret=${longOperator}-nats-account`]),
    );
    expect(secrets(long.ns)).toEqual(before.longSecrets);
    const longNames = [
      ...(cp.json(["-n", long.ns, "get", "roles,rolebindings,services,serviceaccounts"]).items as any[]),
      ...(cp.json(["get", "clusterroles,clusterrolebindings", "-l", `app.kubernetes.io/instance=${long.release}`])
        .items as any[]),
    ].map((o) => o.metadata.name as string);
    expect(longNames.length).toBeGreaterThan(0);
    for (const name of longNames) expect(name.length, name).toBeLessThanOrEqual(63);

    // A new install of the same values gets the names of the rule.
    const fresh = "names-fresh";
    helm("install", "ifp", CHART, "-n", fresh, "--create-namespace", ...KEPT, ...byName.set);
    expect(Object.keys(uids(fresh, "deployments,statefulsets,serviceaccounts")).sort()).toEqual([
      "Deployment/ifp-agents",
      "ServiceAccount/default",
      "ServiceAccount/ifp-agents",
      "ServiceAccount/ifp-agents-nats",
      "StatefulSet/ifp-agents-nats",
    ]);
    for (const { ns, release } of [byName, long, { ns: fresh, release: "ifp" }])
      helm("uninstall", release, "-n", ns, "--no-hooks");
  });

  it("renders the operator with --nats-layout isolated on `helm upgrade` of an install on per-agent to the chart's defaults, and per-agent again on `helm rollback`", () => {
    const ns = "layout-switch";
    const VALUES = [...BASE, "--set", "crds.enabled=false"];
    // The layout as the operator reads it from the flags of the Deployment the release holds.
    const options = () =>
      parseFlags(cp.json(["-n", ns, "get", "deployment", "ifp-ifp-operator"]).spec.template.spec.containers[0].args, {})
        .options;
    helm("install", "ifp", CHART, "-n", ns, "--create-namespace", ...VALUES, "--set", "runtime.natsLayout=per-agent");
    expect(options().natsLayout).toBeUndefined();
    helm("upgrade", "ifp", CHART, "-n", ns, ...VALUES);
    expect(options()).toMatchObject({ natsLayout: "isolated", natsTenantLimits: DEFAULT_TENANT_LIMITS });
    helm("rollback", "ifp", "1", "-n", ns);
    expect(options().natsLayout).toBeUndefined();
    // An install that keeps runtime.natsLayout=per-agent among its values moves when it says so.
    helm("upgrade", "ifp", CHART, "-n", ns, ...VALUES, "--reuse-values", "--set", "runtime.natsLayout=isolated");
    expect(options()).toMatchObject({ natsLayout: "isolated", natsTenantLimits: DEFAULT_TENANT_LIMITS });
    helm("uninstall", "ifp", "-n", ns, "--no-hooks");
  });
});

describe("helm uninstall with the operator running", () => {
  onNewControlPlane();
  const CREW = "crew";
  const finalizersOf = (kind: string) =>
    Object.fromEntries(
      (cp.json(["-n", CREW, "get", kind]).items as any[]).map((o) => [o.metadata.name, o.metadata.finalizers ?? []]),
    );

  it("leaves no finalizer behind: what it held is released, a deletion under way completes, and what the docs say stays stays", {
    timeout: 240_000,
  }, async () => {
    cp.kubectl(["create", "namespace", CREW]);
    // As installed for the examples: the operator watches its own namespace and the users'.
    // The Relay's public host is the crew's, as its values allow (allowedHosts).
    helm(
      "install",
      "ifp",
      CHART,
      "-n",
      NS,
      "--create-namespace",
      ...BASE,
      "--set",
      `watchNamespaces={${CREW}}`,
      "--set",
      `allowedHosts.${CREW}={hub.example}`,
    );
    // Its pod runs here, as its Deployment's container would: the rendered arguments, its
    // ServiceAccount's token bound to the pod.
    const operators = kubelet.runPodsOf(NS, "app.kubernetes.io/instance=ifp,app.kubernetes.io/component=operator", {
      extraArgs: ["--health-port=0", "--metrics-port=0"],
    });
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: carol, namespace: ${CREW}}
spec:
  agentId: https://carol.example
  capabilities: [{name: chat.talk, description: talks}]
---
apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: dan, namespace: ${CREW}}
spec:
  agentId: https://dan.example
---
apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: hub, namespace: ${CREW}}
spec:
  url: https://hub.example
  retention: {maxAge: 24h, deleteOnRemoval: true}
`,
    );
    await waitFor(
      "the operator's finalizers on every Agent and Relay",
      () => {
        const agents = finalizersOf("agents");
        const ready =
          agents.carol?.includes("ifp.dev/jetstream") &&
          agents.dan?.includes("ifp.dev/jetstream") &&
          finalizersOf("relays").hub?.includes("ifp.dev/stream");
        return ready && cp.tryJson(["-n", CREW, "get", "secret", "carol-signing"]) !== undefined;
      },
      90_000,
      500,
    ).catch((err) => {
      throw new Error(
        `${(err as Error).message}\n${cp.kubectl(["-n", CREW, "get", "agents,relays,events", "-o", "yaml"])}`,
      );
    });
    const signing = cp.json(["-n", CREW, "get", "secret", "carol-signing"]);
    const ca = cp.json(["-n", NS, "get", "secret", "ifp-ifp-operator-ca"]);
    expect(operators).toHaveLength(1);
    // A deletion under way when the operator goes: NATS is out of reach, so its cleanup waits
    // (up to the finalizer timeout, 5 minutes).
    cp.kubectl(["-n", CREW, "delete", "agent", "dan", "--wait=false"]);
    expect(cp.json(["-n", CREW, "get", "agent", "dan"]).metadata.deletionTimestamp).toBeTruthy();

    await uninstall("ifp", "-n", NS);

    // The operator stopped as a pod stops (SIGTERM), and nothing is left running.
    expect((await operators[0]!.done).code).toBe(0);
    expect(cp.tryJson(["-n", NS, "get", "deployment", "ifp-ifp-operator"])).toBeUndefined();
    // No finalizer of the operator's is left, and the deletion under way completed.
    await waitFor(
      "the Agent being deleted to be gone",
      () => cp.tryJson(["-n", CREW, "get", "agent", "dan"]) === undefined,
      30_000,
      250,
    );
    expect(finalizersOf("agents")).toEqual({ carol: [] });
    expect(finalizersOf("relays")).toEqual({ hub: [] });
    const released = (
      cp.json(["-n", CREW, "get", "events", "--field-selector", "reason=FinalizerReleased"]).items as any[]
    )
      .map((e) => e.involvedObject.name)
      .sort();
    expect(released).toEqual(["carol", "dan", "hub"]);
    expect(operators[0]!.process.log()).toMatch(/Released finalizer/);
    // What the docs say stays: the CRDs (crds.keep), the Agents and Relays, the signing-key and
    // install CA Secrets, untouched.
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(cp.json(["-n", CREW, "get", "secret", "carol-signing"]).data).toEqual(signing.data);
    expect(cp.json(["-n", NS, "get", "secret", "ifp-ifp-operator-ca"]).data).toEqual(ca.data);
    // Deleting what is left completes at once: nothing waits for the operator that is gone.
    cp.kubectl(["-n", CREW, "delete", "agents,relays", "--all", "--timeout=20s"]);
    expect(cp.json(["-n", CREW, "get", "agents,relays"]).items).toEqual([]);
  });
});
