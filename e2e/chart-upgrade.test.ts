// What a chart upgrade must never take: the users' Agents and Relays and their signing Secrets.
// A real API server on which the chart owns the CRDs; `helm upgrade` to a newer chart (a new
// version, a CRD schema that changed), `helm rollback`, the CRDs turned off and on again, and
// `helm uninstall`: the stored objects stay as they were, and the CRDs with them.
import { spawnSync } from "node:child_process";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { toolPath } from "./tools/tools.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { tempDir } from "./support/process.ts";

const CHART = "charts/ifp-operator";
const NS = "ifp-system";
const USERS = "team";
let cp: ControlPlane;
let helmEnv: NodeJS.ProcessEnv = process.env;

const helm = (...args: string[]) => {
  const r = spawnSync(toolPath("helm"), [...args, "--kubeconfig", cp.kubeconfig], { encoding: "utf8", timeout: 60_000, env: helmEnv });
  if (r.error) throw new Error(`helm ${args.join(" ")} could not run: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`helm ${args.join(" ")} failed (exit ${r.status}): ${r.stdout}${r.stderr}`);
  return r.stdout;
};
const BASE = ["--set", "nats.install=false", "--set", "nats.url=nats://nats.example:4222", "--set", "tests.enabled=false"];

/** The chart as a later release would ship it: a new version, and a CRD whose schema changed. */
function nextChart(): string {
  const dir = join(tempDir("ifp-chart-next-"), "ifp-operator");
  cpSync(CHART, dir, { recursive: true });
  const chartFile = join(dir, "Chart.yaml");
  const chart = parse(readFileSync(chartFile, "utf8"));
  writeFileSync(chartFile, stringify({ ...chart, version: `${chart.version}-next.1` }));
  const crdFile = join(dir, "files/crds/agents.ifp.dev.yaml");
  const crd = parse(readFileSync(crdFile, "utf8"));
  crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.note = { type: "string", description: "A field a later version adds" };
  writeFileSync(crdFile, stringify(crd));
  return dir;
}

/** What must survive, as stored: uid, generation and spec of each object, and the Secret's data. */
function stored() {
  const agents = cp.json(["-n", USERS, "get", "agents"]).items as any[];
  const relays = cp.json(["-n", USERS, "get", "relays"]).items as any[];
  const secret = cp.json(["-n", USERS, "get", "secret", "alice-signing"]);
  return {
    agents: agents.map((a) => ({ name: a.metadata.name, uid: a.metadata.uid, generation: a.metadata.generation, spec: a.spec })),
    relays: relays.map((r) => ({ name: r.metadata.name, uid: r.metadata.uid, spec: r.spec })),
    secret: { uid: secret.metadata.uid, data: secret.data },
  };
}
const crdNames = () => (cp.json(["get", "crd", "-l", "app.kubernetes.io/part-of=ifp-operator"]).items as any[]).map((c) => c.metadata.name).sort();

beforeAll(async () => {
  const home = tempDir("ifp-helm-home-");
  helmEnv = { ...process.env, HELM_CACHE_HOME: join(home, "cache"), HELM_CONFIG_HOME: join(home, "config"), HELM_DATA_HOME: join(home, "data") };
  // No CRDs installed beforehand: the chart brings them, as on a new cluster.
  cp = await startControlPlane({ controllerManager: false });
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

describe("chart upgrade", () => {
  it("keeps the stored Agents, Relays and signing Secrets through upgrade, rollback, CRDs turned off and on, and uninstall", () => {
    helm("install", "ifp", CHART, "-n", NS, "--create-namespace", ...BASE);
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    cp.kubectl(["create", "namespace", USERS]);
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
    helm("upgrade", "ifp", nextChart(), "-n", NS, ...BASE, "--set", "logLevel=debug");
    expect(stored()).toEqual(before);
    expect(cp.kubectl(["explain", "agents.spec.note"])).toMatch(/A field a later version adds/);

    helm("rollback", "ifp", "1", "-n", NS);
    expect(stored()).toEqual(before);
    expect(() => cp.kubectl(["explain", "agents.spec.note"])).toThrow(/field "note" does not exist/);

    // The CRDs left out of the release: Helm's keep policy leaves them, and the objects, in place;
    // turned on again, the release takes them back.
    helm("upgrade", "ifp", CHART, "-n", NS, ...BASE, "--set", "crds.enabled=false");
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(stored()).toEqual(before);
    helm("upgrade", "ifp", CHART, "-n", NS, ...BASE, "--set", "crds.enabled=true");
    expect(stored()).toEqual(before);
    expect(JSON.parse(helm("history", "ifp", "-n", NS, "-o", "json")).map((r: { revision: number; status: string }) => `${r.revision} ${r.status}`)).toEqual(["1 superseded", "2 superseded", "3 superseded", "4 superseded", "5 deployed"]);

    helm("uninstall", "ifp", "-n", NS);
    expect(crdNames()).toEqual(["agents.ifp.dev", "relays.ifp.dev"]);
    expect(stored()).toEqual(before);
  });
});
