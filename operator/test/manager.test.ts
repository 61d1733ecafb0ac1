// The operator process around the controllers: health and metrics endpoints, leader election
// with a real Lease, namespace-scoped watches, and the command line. A real kube-apiserver.
import { spawnSync } from "node:child_process";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../e2e/support/controlplane.ts";
import { waitFor } from "../../e2e/support/ports.ts";
import { startManager, type ManagerOptions, type RunningManager } from "../src/manager.ts";

let cp: ControlPlane;
const running: RunningManager[] = [];
const settings = { runtimeImage: "img:test", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://nats:4222" };
const start = async (opts: Partial<ManagerOptions> = {}) => {
  const m = await startManager({ kubeconfig: cp.kubeconfig, settings, watchNamespaces: [], resyncMs: 60_000, log: pino({ level: process.env.IFP_TEST_LOG ?? "silent" }), ...opts });
  running.push(m);
  return m;
};
const json = (args: string[]) => JSON.parse(cp.kubectl([...args, "-o", "json"]));
const tryJson = (args: string[]) => {
  try {
    return json(args);
  } catch {
    return undefined;
  }
};
const agent = (ns: string, name: string) => `apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: ${name}, namespace: ${ns}}\nspec: {agentId: ${name}}\n`;
const observed = (ns: string, name: string) => tryJson(["-n", ns, "get", "agent", name])?.status?.observedGeneration === 1;

beforeAll(async () => {
  // No controller manager: nothing here needs garbage collection or Deployment controllers.
  cp = await startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false });
  for (const ns of ["one", "two", "ops"]) cp.kubectl(["create", "namespace", ns]);
}, 300_000);
afterAll(async () => {
  for (const m of running) await m.stop();
  await cp?.stop();
});

describe("operator process", () => {
  it("serves /healthz, /readyz once its caches synced, and Prometheus /metrics", async () => {
    const m = await start({ healthPort: 0, metricsPort: 0 });
    await m.started;
    expect(m.healthUrl).toBeDefined();
    expect((await fetch(`${m.healthUrl}/healthz`)).status).toBe(200);
    expect(await (await fetch(`${m.healthUrl}/readyz`)).json()).toEqual({ status: "ok" });
    cp.kubectl(["apply", "-f", "-"], agent("one", "metered"));
    await waitFor("a reconcile", () => observed("one", "metered"), 30_000, 200);
    const text = await (await fetch(`${m.metricsUrl}/metrics`)).text();
    expect(text).toMatch(/ifp_operator_reconciles_total\{kind="Agent",result="ok"\} [1-9]/);
    expect(text).toMatch(/ifp_operator_reconcile_duration_seconds_count\{kind="Agent"\} [1-9]/);
    expect(text).toMatch(/ifp_operator_api_writes_total\{verb="apply",kind="Deployment"\} 1/);
    expect(text).toMatch(/ifp_operator_queue_depth\{kind="Agent"\} 0/);
    expect(text).toMatch(/ifp_operator_reconcile_errors_total/);
    expect(text).toMatch(/ifp_operator_process_resident_memory_bytes/);
    await m.stop();
    await expect(fetch(`${m.healthUrl}/healthz`)).rejects.toThrow();
  });

  it("watches only the namespaces it is given", async () => {
    const m = await start({ watchNamespaces: ["two"] });
    await m.started;
    cp.kubectl(["apply", "-f", "-"], agent("two", "inside") + "---\n" + agent("one", "outside"));
    await waitFor("the watched namespace reconciled", () => observed("two", "inside"), 30_000, 200);
    await new Promise((r) => setTimeout(r, 2000));
    expect(observed("one", "outside")).toBe(false);
    await m.stop();
  });

  it("acts only while it holds the Lease; a standby takes over when the leader stops", async () => {
    const leaderElection = (identity: string) => ({ namespace: "ops", name: "ifp-operator-test", identity, leaseSeconds: 4 });
    const lost: string[] = [];
    const a = await start({ leaderElection: leaderElection("a"), healthPort: 0, onLostLeadership: () => lost.push("a") });
    await a.started;
    const b = await start({ leaderElection: leaderElection("b"), healthPort: 0, onLostLeadership: () => lost.push("b") });
    await new Promise((r) => setTimeout(r, 3000));
    expect(a.leading).toBe(true);
    expect(b.leading).toBe(false);
    // A standby is ready (it waits for the lease); it reconciles nothing.
    expect((await fetch(`${b.healthUrl}/readyz`)).status).toBe(200);
    expect(json(["-n", "ops", "get", "lease", "ifp-operator-test"]).spec).toMatchObject({ holderIdentity: "a", leaseDurationSeconds: 4 });
    cp.kubectl(["apply", "-f", "-"], agent("one", "led"));
    await waitFor("the leader's reconcile", () => observed("one", "led"), 30_000, 200);
    expect(await b.metrics.reconciles.get().then((r) => r.values.length)).toBe(0);

    await a.stop();
    await waitFor("b to lead", () => b.leading, 15_000, 100);
    await b.started;
    const lease = json(["-n", "ops", "get", "lease", "ifp-operator-test"]).spec;
    expect(lease.holderIdentity).toBe("b");
    expect(lease.leaseTransitions).toBeGreaterThanOrEqual(1);
    cp.kubectl(["apply", "-f", "-"], agent("one", "after"));
    await waitFor("the new leader's reconcile", () => observed("one", "after"), 30_000, 200);
    expect(lost).toEqual([]);

    // Someone else takes the lease: b stops leading and says so.
    const now = new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
    cp.kubectl(["-n", "ops", "patch", "lease", "ifp-operator-test", "--type=merge", "-p", JSON.stringify({ spec: { holderIdentity: "intruder", renewTime: now, leaseDurationSeconds: 60 } })]);
    await waitFor("b to notice", () => lost.includes("b"), 15_000, 100);
    expect(b.leading).toBe(false);
    await b.stop();
  });

  it("keeps its informers going when a watch breaks: a CRD deleted and installed again", async () => {
    const m = await start({ healthPort: 0 });
    await m.started;
    const restarts = m.caches.restarts;
    cp.kubectl(["delete", "crd", "relays.ifp.dev"]);
    await waitFor("an informer restart", () => m.caches.restarts > restarts, 30_000, 200);
    cp.kubectl(["apply", "--server-side", "-f", "crds/relays.ifp.dev.yaml"]);
    cp.kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd/relays.ifp.dev"]);
    cp.kubectl(["apply", "-f", "-"], "apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: back, namespace: one}\nspec: {url: 'https://back.example'}\n");
    // No NATS here: the status says so, which shows the Relay was reconciled.
    const relay = await waitFor("the Relay reconciled", () => {
      const r = tryJson(["-n", "one", "get", "relay", "back"]);
      return r?.status?.observedGeneration === 1 ? r : undefined;
    }, 60_000, 250);
    expect(relay.status.conditions.find((c: any) => c.type === "StreamReady")).toMatchObject({ status: "False", reason: "NatsUnavailable" });
    expect((await fetch(`${m.healthUrl}/readyz`)).status).toBe(200);
    await m.stop();
  });

  it("refuses bad flags with a clear message and exit code 2", () => {
    const r = spawnSync(process.execPath, ["operator/bin/ifp-operator.ts", "--workers=none"], { encoding: "utf8" });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--workers must be a whole number from 1 to 64, not "none"/);
    const help = spawnSync(process.execPath, ["operator/bin/ifp-operator.ts", "--help"], { encoding: "utf8" });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/--leader-elect/);
  });
});
