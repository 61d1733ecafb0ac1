// The operator process around the controllers: health and metrics endpoints, leader election
// with a real Lease, namespace-scoped watches, and the command line. A real kube-apiserver.
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { CoreV1Api, Watch } from "@kubernetes/client-node";
import { ObservedKubeConfig } from "../../src/kube/rest-client.ts";
import { startManager, type ManagerOptions } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, perTest, until } from "../support/helpers.ts";

let cp: ControlPlane;
const settings = { runtimeImage: "img:test", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://nats:4222" };
/** The managers the current test started, with their logs, for the failure report. */
let started: { name: string; lines: () => string[] }[] = [];
beforeEach(() => {
  started = [];
});
perTest(() => started.map((m) => `operator ${m.name} log:\n${m.lines().join("\n")}`).join("\n"));

/** A manager for this test only: stopped when the test ends, whatever its outcome. */
const start = async (name: string, opts: Partial<ManagerOptions> = {}) => {
  const { log, lines } = capturedLog();
  started.push({ name, lines });
  const m = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: [],
    resyncMs: 60_000,
    log,
    ...opts,
  });
  onTestFinished(() => m.stop());
  return m;
};
const get = (args: string[]) => getOrAbsent(cp, args);
/** A loopback port nothing listens on (bound, then released). */
const closedPort = () =>
  new Promise<number>((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
const agent = (ns: string, name: string) =>
  `apiVersion: ifp.dev/v1alpha1\nkind: Agent\nmetadata: {name: ${name}, namespace: ${ns}}\nspec: {agentId: ${name}}\n`;
const observed = (ns: string, name: string) => get(["-n", ns, "get", "agent", name])?.status?.observedGeneration === 1;
const lease = () => cp.json(["-n", "ops", "get", "lease", "ifp-operator-test"]).spec;

beforeAll(async () => {
  // No controller manager: nothing here needs garbage collection or Deployment controllers.
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManager: false,
  });
  for (const ns of ["one", "two", "ops"]) cp.kubectl(["create", "namespace", ns]);
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

describe("operator process", () => {
  it("serves /healthz, /readyz once its caches synced, and Prometheus /metrics", async () => {
    const m = await start("m", { healthPort: 0, metricsPort: 0 });
    await m.started;
    expect(m.healthUrl).toBeDefined();
    expect((await fetch(`${m.healthUrl}/healthz`)).status).toBe(200);
    expect(await (await fetch(`${m.healthUrl}/readyz`)).json()).toEqual({ status: "ok" });
    cp.kubectl(["apply", "-f", "-"], agent("one", "metered"));
    await until("a reconcile", () => observed("one", "metered"));
    // The Agent's own children enqueue it again as they are made: read once its queue is empty.
    const text = await until("the Agent's queue empty", async () => {
      const t = await (await fetch(`${m.metricsUrl}/metrics`)).text();
      return /^ifp_operator_queue_depth\{kind="Agent"\} 0$/m.test(t) && /^workqueue_depth\{name="agent"\} 0$/m.test(t)
        ? t
        : undefined;
    });
    expect(text).toMatch(/ifp_operator_reconciles_total\{kind="Agent",result="ok"\} [1-9]/);
    expect(text).toMatch(/ifp_operator_reconcile_duration_seconds_count\{kind="Agent"\} [1-9]/);
    expect(text).toMatch(/ifp_operator_api_writes_total\{verb="apply",kind="Deployment"\} 1/);
    expect(text).toMatch(/ifp_operator_queue_depth\{kind="Agent"\} 0/);
    expect(text).toMatch(/ifp_operator_reconcile_errors_total/);
    expect(text).toMatch(/ifp_operator_process_resident_memory_bytes/);
    // The names controller-runtime and client-go export, for dashboards made for any operator.
    expect(text).toMatch(
      /^controller_runtime_reconcile_total\{controller="agent",result="(success|requeue_after)"\} [1-9]/m,
    );
    expect(text).toMatch(/^controller_runtime_reconcile_time_seconds_count\{controller="agent"\} [1-9]/m);
    expect(text).toMatch(/^# TYPE controller_runtime_reconcile_errors_total counter/m);
    expect(text).toMatch(/^workqueue_adds_total\{name="agent"\} [1-9]/m);
    expect(text).toMatch(/^workqueue_depth\{name="agent"\} 0$/m);
    expect(text).toMatch(/^controller_runtime_active_workers\{controller="agent"\} \d+$/m);
    expect(text).toMatch(/^workqueue_queue_duration_seconds_count\{name="agent"\} [1-9]/m);
    expect(text).toMatch(/^workqueue_work_duration_seconds_count\{name="agent"\} [1-9]/m);
    expect(text).toMatch(/^# TYPE workqueue_retries_total counter/m);
    expect(text).toMatch(/^leader_election_master_status\{name="ifp-operator"\} 1$/m);
    // client-go's request counter sees the API calls and the informers' lists and watches.
    const host = new URL(cp.server).host;
    const requests = (method: string, code: string) =>
      Number(
        new RegExp(
          `^rest_client_requests_total\\{code="${code}",method="${method}",host="${host}"\\} (\\d+)$`,
          "m",
        ).exec(text)?.[1] ?? 0,
      );
    expect(requests("GET", "200")).toBeGreaterThan(2);
    expect(requests("PATCH", "200") + requests("PATCH", "201")).toBeGreaterThanOrEqual(
      Number(/^ifp_operator_api_writes_total\{verb="apply",kind="Deployment"\} (\d+)$/m.exec(text)![1]),
    );
    await m.stop();
    await expect(fetch(`${m.healthUrl}/healthz`)).rejects.toThrow();
  });

  it("counts every request to the API server by method, host and answer, watches and failures included", async () => {
    const seen: string[] = [];
    const kc = new ObservedKubeConfig((method, host, code) => seen.push(`${method} ${host} ${code}`));
    kc.loadFromFile(cp.kubeconfig);
    const host = new URL(cp.server).host;
    const core = kc.makeApiClient(CoreV1Api);
    await core.listNamespace();
    await expect(core.readNamespace({ name: "no-such-namespace" })).rejects.toThrow();
    const ns = `counted-${Date.now().toString(36)}`;
    await core.createNamespace({ body: { metadata: { name: ns } } });
    onTestFinished(() => void core.deleteNamespace({ name: ns }).catch(() => {}));
    const watching = await new Watch(kc).watch(
      "/api/v1/namespaces",
      {},
      () => {},
      () => {},
    );
    onTestFinished(() => watching.abort());
    expect(seen).toEqual([`GET ${host} 200`, `GET ${host} 404`, `POST ${host} 201`, `GET ${host} 200`]);
    // A request that gets no answer at all is counted too.
    const closed = new ObservedKubeConfig((method, h, code) => seen.push(`${method} ${h} ${code}`));
    closed.loadFromString(
      readFileSync(cp.kubeconfig, "utf8").replace(cp.server, `https://127.0.0.1:${await closedPort()}`),
    );
    await expect(closed.makeApiClient(CoreV1Api).listNamespace()).rejects.toThrow();
    expect(seen.at(-1)).toMatch(/^GET 127\.0\.0\.1:\d+ <error>$/);
  });

  it("watches only the namespaces it is given", async () => {
    const m = await start("m", { watchNamespaces: ["two"] });
    await m.started;
    // The Agent outside is created first: had the manager seen it, it would have been queued first.
    cp.kubectl(["apply", "-f", "-"], agent("one", "outside"));
    cp.kubectl(["apply", "-f", "-"], agent("two", "inside"));
    await until("the watched namespace reconciled", () => observed("two", "inside"));
    // The positive signal: the manager's caches hold the watched namespace and nothing else.
    const cached = m.caches.list("Agent").map((a) => `${a.metadata?.namespace}/${a.metadata?.name}`);
    expect(cached).toContain("two/inside");
    expect(cached.filter((k) => !k.startsWith("two/"))).toEqual([]);
    await consistently(
      "the Agent outside the watched namespaces untouched",
      () => {
        const outside = get(["-n", "one", "get", "agent", "outside"]);
        return (
          outside !== undefined &&
          outside.status === undefined &&
          get(["-n", "one", "get", "deployment", "outside"]) === undefined
        );
      },
      3_000,
      250,
    );
  });

  it("acts only while it holds the Lease; a standby takes over when the leader stops", {
    timeout: 150_000,
  }, async () => {
    // 15 s, the default: a loaded machine's slow renewal must not hand the lease over by itself.
    const leaderElection = (identity: string) => ({
      namespace: "ops",
      name: "ifp-operator-test",
      identity,
      leaseSeconds: 15,
    });
    const lost: string[] = [];
    const a = await start("a", {
      leaderElection: leaderElection("a"),
      healthPort: 0,
      onLostLeadership: () => lost.push("a"),
    });
    await a.started;
    const since = Date.now();
    const b = await start("b", {
      leaderElection: leaderElection("b"),
      healthPort: 0,
      onLostLeadership: () => lost.push("b"),
    });
    // b looks at the lease at once and every 2 s; a renews every 2 s. A renewal by a stamped 4 s
    // after b started means b has looked at least twice and found it held.
    await until("a to renew the lease 4 s after b started", () => {
      const spec = lease();
      return spec.holderIdentity === "a" && new Date(spec.renewTime).getTime() >= since + 4_000;
    });
    expect(a.leading).toBe(true);
    await consistently(
      "b to stay a standby while a leads",
      () => !b.leading && a.leading && lost.length === 0 && lease().holderIdentity === "a",
      3_000,
      250,
    );
    // A standby is ready (it waits for the lease); it reconciles nothing.
    expect((await fetch(`${b.healthUrl}/readyz`)).status).toBe(200);
    expect(lease()).toMatchObject({ holderIdentity: "a", leaseDurationSeconds: 15 });
    cp.kubectl(["apply", "-f", "-"], agent("one", "led"));
    await until("the leader's reconcile", () => observed("one", "led"));
    expect((await b.metrics.reconciles.get()).values).toEqual([]);

    await a.stop();
    await until("b to lead", () => b.leading, 20_000, 100);
    await b.started;
    const handed = lease();
    expect(handed.holderIdentity).toBe("b");
    expect(handed.leaseTransitions).toBeGreaterThanOrEqual(1);
    cp.kubectl(["apply", "-f", "-"], agent("one", "after"));
    await until("the new leader's reconcile", () => observed("one", "after"));
    expect(lost).toEqual([]);

    // Someone else takes the lease: b stops leading and says so.
    const now = new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
    cp.kubectl([
      "-n",
      "ops",
      "patch",
      "lease",
      "ifp-operator-test",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { holderIdentity: "intruder", renewTime: now, leaseDurationSeconds: 60 } }),
    ]);
    await until("b to notice", () => lost.includes("b"), 20_000, 100);
    expect(b.leading).toBe(false);
    expect(lost).toEqual(["b"]);
  });

  it("keeps its informers going when a watch breaks: a CRD deleted and installed again", {
    timeout: 150_000,
  }, async () => {
    const m = await start("m", { healthPort: 0 });
    await m.started;
    const restarts = m.caches.restarts;
    cp.kubectl(["delete", "crd", "relays.ifp.dev"]);
    await until("an informer restart", () => m.caches.restarts > restarts);
    cp.kubectl(["apply", "--server-side", "-f", "crds/relays.ifp.dev.yaml"]);
    await until("the CRD established", () =>
      get(["get", "crd", "relays.ifp.dev"])?.status?.conditions?.some(
        (c: any) => c.type === "Established" && c.status === "True",
      ),
    );
    cp.kubectl(
      ["apply", "-f", "-"],
      "apiVersion: ifp.dev/v1alpha1\nkind: Relay\nmetadata: {name: back, namespace: one}\nspec: {url: 'https://back.example'}\n",
    );
    // No NATS here: the status says so, which shows the Relay was reconciled. The informer's
    // backoff between restarts reaches 30 s while the CRD is away.
    const relay = await until(
      "the Relay reconciled",
      () => {
        const r = get(["-n", "one", "get", "relay", "back"]);
        return r?.status?.observedGeneration === 1 ? r : undefined;
      },
      90_000,
      250,
    );
    expect(relay.status.conditions.find((c: any) => c.type === "StreamReady")).toMatchObject({
      status: "False",
      reason: "NatsUnavailable",
    });
    expect((await fetch(`${m.healthUrl}/readyz`)).status).toBe(200);
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
