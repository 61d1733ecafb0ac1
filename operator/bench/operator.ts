// npm run bench:operator — N Agents on a real control plane (etcd, kube-apiserver,
// kube-controller-manager from the tool cache) reconciled by `ifp-operator` run as its own
// process, the code the operator image runs: operator/Dockerfile's build stage carried out, its
// bundle (operator/bundle.ts; BENCH_OPERATOR_UNBUNDLED=1 runs tsc's output with node_modules
// instead, to compare). The operator runs on the NATS layout the chart installs by default: a
// nats-server in operator mode with the install's keys (the account Secret made beforehand, as for
// a NATS started with them), `--nats-layout isolated`, the Agents spread over BENCH_TENANTS
// namespaces (default 20, Agent i in namespace bench-<i mod 20>), so the operator makes each
// tenant's data account and streams and each Agent's account JWT, credential and consumers
// (BENCH_NATS_LAYOUT=none runs it without NATS, to compare). Prints and writes .bench/operator.json
// (or BENCH_OUT):
//   - seconds from `kubectl apply` of N Agents until every one has been reconciled once (its
//     status.observedGeneration written: the initial sync), and until every one is Ready-able: children applied,
//     the Deployment observed by its controller and the pods of the current spec created
//     (Reconciling=True reason WaitingForRuntime, observedGeneration = generation); no kubelet
//     runs here, so Ready itself stays False RuntimeNotReady;
//   - on a NATS layout, seconds until every Agent's status holds its traffic summary (the summary
//     collector's first pass over it) and the writes of those first summaries, counted apart;
//   - API writes per steady-state resync (goal: zero), over several resyncs of every Agent;
//   - the operator restarted over the N existing Agents: seconds from its start until its caches
//     are synced (/readyz answers 200) and until its first pass over every Agent is done (N Agent
//     reconciles and an empty queue), with the API writes it made until then (goal: zero);
//   - the operator process's peak RSS (VmHWM) and its RSS at the end, and what the RSS was made of
//     at its highest (V8 heap used and committed, young generation, memory outside the heap).
// BENCH_AGENTS is a list (default 100,500,1000): each count runs on a fresh control plane and
// operator, and the table shows how time, writes and memory grow (slope per 100 Agents between
// the smallest and the largest count). Other settings: BENCH_RESYNC_SECONDS (10),
// BENCH_RESYNCS (3), BENCH_WORKERS (4), BENCH_RESTART (1; 0 skips the restart), BENCH_KCM_QPS (kube-controller-manager's client rate
// limit, default its own 20 writes/s: the Deployment and ReplicaSet controllers' writes, about
// five per Deployment before WaitingForRuntime, are bounded by it, not by the operator),
// BENCH_OPERATOR_NODE_OPTIONS (added to the chart's nodeOptions, e.g. "--cpu-prof
// --cpu-prof-dir=DIR" for a profile of the operator).
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname } from "node:path";
import { parse, stringify } from "yaml";
import { compiledEntry, entryCode } from "../../e2e/support/compiled.ts";
import { startControlPlane, type ControlPlane } from "../../e2e/support/controlplane.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { startIsolatedNats } from "./isolated-nats.ts";

const COUNTS = (process.env.BENCH_AGENTS ?? "100,500,1000").split(",").map(Number);
const RESYNC_S = Number(process.env.BENCH_RESYNC_SECONDS ?? 10);
const RESYNCS = Number(process.env.BENCH_RESYNCS ?? 3);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 4);
// The operator runs with the chart's default NODE_OPTIONS (its bounded heap) and malloc arenas, as installed.
const CHART_VALUES = parse(readFileSync("charts/ifp-operator/values.yaml", "utf8"));
const CHART_NODE_OPTIONS: string = CHART_VALUES.nodeOptions ?? "";
const CHART_MALLOC_ARENA_MAX: number = CHART_VALUES.mallocArenaMax ?? 0;
/** The operator process runs what the image runs (e2e/support/compiled.ts). */
const OPERATOR_ENTRY = "operator/bin/ifp-operator.ts";
const KCM_QPS = process.env.BENCH_KCM_QPS ? Number(process.env.BENCH_KCM_QPS) : undefined;
const RESTART = process.env.BENCH_RESTART !== "0";
const LAYOUT = process.env.BENCH_NATS_LAYOUT ?? "isolated";
if (LAYOUT !== "isolated" && LAYOUT !== "none")
  throw new Error(`BENCH_NATS_LAYOUT is isolated or none, not ${JSON.stringify(LAYOUT)}`);
const TENANTS = Number(process.env.BENCH_TENANTS ?? 20);
/** The Agents' namespaces are NS-0 … NS-<TENANTS - 1>. */
const NS = "bench";
/** A Service per Agent: room for 65,534. */
const SERVICE_CIDR = "10.0.0.0/16";
const READY_TIMEOUT_MS = Number(process.env.BENCH_READY_TIMEOUT_SECONDS ?? 3600) * 1000;
/** How often the Agents' status is read once the operator has written as many statuses as there are Agents. */
const POLL_MS = (agents: number) => Math.max(500, agents / 2);
const LOAD_AT_START = Math.round(loadavg()[0]! * 100) / 100;
const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

/** A process's VmHWM or VmRSS in MiB; NaN once it has ended. */
const procMiB = (pid: number, field: "VmHWM" | "VmRSS") => {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return NaN;
  }
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
  return m ? round(Number(m[1]) / 1024, 1) : NaN;
};

/** Sum of a Prometheus counter over its label sets, optionally filtered by a label. */
function metricSum(text: string, name: string, filter?: string): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (filter && !line.includes(filter)) continue;
    sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** One operator process as the image runs it, with its log's tail and its metrics. */
function startOperator(cp: ControlPlane, health: number, natsArgs: string[]) {
  let log = "";
  const proc = spawn(
    process.execPath,
    [
      compiledEntry(OPERATOR_ENTRY),
      `--kubeconfig=${cp.kubeconfig}`,
      `--health-port=${health}`,
      `--metrics-port=${health}`,
      `--resync=${RESYNC_S}s`,
      `--workers=${WORKERS}`,
      "--runtime-image=ghcr.io/ifp-dev/ifp-runtime:bench",
      "--log-level=warn",
      ...natsArgs,
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        NODE_OPTIONS: `${CHART_NODE_OPTIONS} ${process.env.BENCH_OPERATOR_NODE_OPTIONS ?? ""}`.trim(),
        ...(CHART_MALLOC_ARENA_MAX ? { MALLOC_ARENA_MAX: String(CHART_MALLOC_ARENA_MAX) } : {}),
      },
    },
  );
  proc.stdout!.on("data", (d) => (log = (log + d).slice(-20_000)));
  proc.stderr!.on("data", (d) => (log = (log + d).slice(-20_000)));
  let ended: string | undefined;
  const exited = new Promise((r) =>
    proc.once("exit", (code, signal) => {
      ended = signal ? `killed by ${signal}` : `exit code ${code}`;
      r(undefined);
    }),
  );
  return {
    pid: proc.pid!,
    log: () => log,
    /** `wait`, failed at once with the log's tail if the process ends first. */
    whileRunning: <T>(wait: Promise<T>): Promise<T> =>
      Promise.race([
        wait,
        exited.then(() => {
          throw new Error(`the operator ended (${ended}) while the bench waited:\n${log.slice(-4000)}`);
        }),
      ]),
    metrics: async () => (await fetch(`http://127.0.0.1:${health}/metrics`)).text(),
    ready: () =>
      waitFor(
        "the operator to be ready",
        async () => (await fetch(`http://127.0.0.1:${health}/readyz`).catch(() => undefined))?.status === 200,
        600_000,
        200,
      ),
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
    },
  };
}

/** "verb kind=writes per Agent", most first, from the operator's metrics. */
function writesByKind(text: string, agents: number): string {
  return [...text.matchAll(/^ifp_operator_api_writes_total\{([^}]*)\} (\S+)$/gm)]
    .map((m) => {
      const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(m[1]!)?.[1] ?? "?";
      return { what: `${label("verb")} ${label("kind")}`, perAgent: round(Number(m[2]) / agents, 4) };
    })
    .filter((w) => w.perAgent > 0)
    .sort((a, b) => b.perAgent - a.perAgent)
    .map((w) => `${w.what}=${w.perAgent}`)
    .join(", ");
}

async function run(COUNT: number): Promise<Record<string, unknown>> {
  process.stderr.write(`bench:operator: ${COUNT} Agents: starting a control plane\n`);
  const cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManagerQps: KCM_QPS,
    serviceCIDR: SERVICE_CIDR,
  });
  const namespaces = Array.from({ length: Math.min(TENANTS, COUNT) }, (_, t) => `${NS}-${t}`);
  for (const ns of namespaces) cp.kubectl(["create", "namespace", ns]);
  const nats = LAYOUT === "isolated" ? await startIsolatedNats(cp) : undefined;
  const health = await freePort();
  let operator = startOperator(cp, health, nats?.args ?? []);
  let sampling = false;
  let sampler: Promise<void> | undefined;
  let natsPeakRss = 0;
  const elapsed = (since: number) => round((performance.now() - since) / 1000);

  try {
    await operator.ready();
    const idleRss = procMiB(operator.pid, "VmRSS");
    // What the resident memory is made of at its highest: RSS sampled every 250 ms, and the V8
    // heap (used, committed), the memory outside it (Buffers, TLS) and the young generation as
    // the operator's own metrics report them at that moment.
    const atPeak: Record<string, number> = { rssMiB: 0 };
    let t0 = performance.now();
    sampling = true;
    sampler = (async () => {
      while (sampling) {
        const natsPid = nats?.pid();
        if (natsPid) natsPeakRss = Math.max(natsPeakRss, procMiB(natsPid, "VmRSS") || 0);
        const rss = procMiB(operator.pid, "VmRSS");
        if (rss > atPeak.rssMiB!) {
          const text = await operator.metrics().catch(() => "");
          const mib = (name: string, filter?: string) => round(metricSum(text, name, filter) / 1048576, 1);
          Object.assign(atPeak, {
            rssMiB: rss,
            heapUsedMiB: mib("ifp_operator_nodejs_heap_size_used_bytes"),
            heapTotalMiB: mib("ifp_operator_nodejs_heap_size_total_bytes"),
            externalMiB: mib("ifp_operator_nodejs_external_memory_bytes"),
            newSpaceMiB: mib("ifp_operator_nodejs_heap_space_size_total_bytes", 'space="new"'),
            oldSpaceUsedMiB: mib("ifp_operator_nodejs_heap_space_size_used_bytes", 'space="old"'),
            secondsAfterApply: round((performance.now() - t0) / 1000, 1),
          });
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();

    const agents = Array.from({ length: COUNT }, (_, i) =>
      stringify({
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        metadata: { name: `agent-${i}`, namespace: namespaces[i % namespaces.length] },
        spec: {
          agentId: `agent-${i}@bench.example`,
          capabilities: [{ name: "bench.ping", description: "Answers pings" }],
        },
      }),
    );
    t0 = performance.now();
    // In parts of 200: one kubectl of a thousand Agents can outlast its timeout on a loaded machine.
    for (let i = 0; i < COUNT; i += 200)
      cp.kubectl(["apply", "--server-side", "-f", "-"], agents.slice(i, i + 200).join("---\n"));
    const applySeconds = (performance.now() - t0) / 1000;
    let readyable = 0;
    let reconciledOnce = 0;
    let secondsToReconciledOnce = NaN;
    await operator
      .whileRunning(
        waitFor(
          `${COUNT} Agents Ready-able`,
          async () => {
            // An Agent reconciled once has had its status written by this operator: until there are
            // as many status writes as Agents, reading every Agent (tens of MB at ten thousand, a
            // load of its own on the API server and kubectl) cannot find them all.
            const statusWrites = metricSum(
              await operator.metrics().catch(() => ""),
              "ifp_operator_api_writes_total",
              'verb="status",kind="Agent"',
            );
            if (statusWrites < COUNT) return false;
            // generation, observedGeneration and the Reconciling reason of each Agent, one per line.
            const lines = cp
              .kubectl([
                "get",
                "agents",
                "-A",
                "-o",
                'jsonpath={range .items[*]}{.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type=="Reconciling")].reason}{"\\n"}{end}',
              ])
              .trim()
              .split("\n");
            const rows = lines.map((l) => l.split(" "));
            reconciledOnce = rows.filter(([, observed]) => observed !== "").length;
            if (reconciledOnce === COUNT && Number.isNaN(secondsToReconciledOnce))
              secondsToReconciledOnce = elapsed(t0);
            readyable = rows.filter(
              ([generation, observed, reason]) => generation === observed && reason === "WaitingForRuntime",
            ).length;
            return readyable === COUNT;
          },
          READY_TIMEOUT_MS,
          POLL_MS(COUNT),
        ),
      )
      .catch((err) => {
        throw new Error(
          `${(err as Error).message} (${readyable}/${COUNT} Ready-able, ${reconciledOnce} reconciled once)\n${operator.log().slice(-4000)}`,
        );
      });
    const secondsToReadyable = (performance.now() - t0) / 1000;
    const afterCreate = await operator.metrics();
    const writesToReadyable = metricSum(afterCreate, "ifp_operator_api_writes_total");
    const count = (kind: string) =>
      cp.kubectl(["get", kind, "-A", "-o", "name"]).trim().split("\n").filter(Boolean).length;
    const deployments = count("deployments");
    const pods = count("pods");

    // On a NATS layout every Agent's status gains its traffic summary once, at the summary
    // collector's first pass over it (once a minute): those writes are the summary's first, not
    // a resync's, and are counted apart.
    let secondsToSummaries: number | undefined;
    let summaryWrites: number | undefined;
    let connectsToSummaries: number | undefined;
    if (nats) {
      await operator.whileRunning(
        waitFor(
          `every Agent's status with its traffic summary`,
          () =>
            cp
              .kubectl(["get", "agents", "-A", "-o", 'jsonpath={range .items[*]}{.status.summary.backlog}{"\\n"}{end}'])
              .split("\n")
              .filter((l) => l !== "").length === COUNT,
          READY_TIMEOUT_MS,
          POLL_MS(COUNT),
        ),
      );
      secondsToSummaries = round(elapsed(t0));
      const atSummaries = await operator.metrics();
      summaryWrites = metricSum(atSummaries, "ifp_operator_api_writes_total") - writesToReadyable;
      connectsToSummaries = metricSum(atSummaries, "ifp_operator_nats_account_connects_total");
    }
    // Steady state: let the last status writes and events settle, then watch several resyncs.
    await new Promise((r) => setTimeout(r, RESYNC_S * 1000 + 2000));
    const before = await operator.metrics();
    await new Promise((r) => setTimeout(r, RESYNCS * RESYNC_S * 1000 + 1000));
    const after = await operator.metrics();
    const steadyWrites =
      metricSum(after, "ifp_operator_api_writes_total") - metricSum(before, "ifp_operator_api_writes_total");
    const steadyReconciles =
      metricSum(after, "ifp_operator_reconciles_total", 'kind="Agent"') -
      metricSum(before, "ifp_operator_reconciles_total", 'kind="Agent"');
    const resyncsObserved = steadyReconciles / COUNT;
    const durationSum = metricSum(after, "ifp_operator_reconcile_duration_seconds_sum", 'kind="Agent"');
    const durationCount = metricSum(after, "ifp_operator_reconcile_duration_seconds_count", 'kind="Agent"');
    const peakRss = procMiB(operator.pid, "VmHWM");
    const rssAtEnd = procMiB(operator.pid, "VmRSS");

    // A restart over the existing Agents: a new process lists them all, and its first pass over
    // them should find nothing to write.
    let restart: Record<string, unknown> | undefined;
    if (RESTART) {
      await operator.stop();
      const t1 = performance.now();
      operator = startOperator(cp, health, nats?.args ?? []);
      await operator.ready();
      const secondsToCachesSynced = elapsed(t1);
      let passed = 0;
      await waitFor(
        `the restarted operator's first pass over ${COUNT} Agents`,
        async () => {
          const text = await operator.metrics().catch(() => "");
          passed = metricSum(text, "ifp_operator_reconciles_total", 'kind="Agent"');
          return passed >= COUNT && metricSum(text, "ifp_operator_queue_depth") === 0;
        },
        READY_TIMEOUT_MS,
        250,
      ).catch((err) => {
        throw new Error(`${(err as Error).message} (${passed}/${COUNT})\n${operator.log().slice(-4000)}`);
      });
      const secondsToFirstPass = elapsed(t1);
      const text = await operator.metrics();
      restart = {
        secondsToCachesSynced,
        secondsToFirstPass,
        agentReconciles: metricSum(text, "ifp_operator_reconciles_total", 'kind="Agent"'),
        apiWrites: metricSum(text, "ifp_operator_api_writes_total"),
        apiWritesByVerbAndKind: writesByKind(text, 1),
        reconcileErrors: metricSum(text, "ifp_operator_reconcile_errors_total"),
        peakRssMiB: procMiB(operator.pid, "VmHWM"),
      };
    }
    sampling = false;
    await sampler;

    const result = {
      benchmark: "operator",
      date: new Date().toISOString(),
      loadAvg1AtStart: LOAD_AT_START,
      loadAvg1AtEnd: round(loadavg()[0]!),
      agents: COUNT,
      natsLayout: LAYOUT,
      tenants: LAYOUT === "isolated" ? namespaces.length : undefined,
      workers: WORKERS,
      controllerManagerQps: KCM_QPS ?? 20,
      operatorNodeOptions: CHART_NODE_OPTIONS,
      operatorMallocArenaMax: CHART_MALLOC_ARENA_MAX || "glibc's default",
      operatorCode: entryCode(OPERATOR_ENTRY),
      kubectlApplySeconds: round(applySeconds),
      secondsToReconciledOnce,
      secondsToReadyable: round(secondsToReadyable),
      agentsPerSecond: round(COUNT / secondsToReadyable, 1),
      deployments,
      pods,
      apiWritesToReadyable: writesToReadyable,
      apiWritesPerAgentToReadyable: round(writesToReadyable / COUNT, 1),
      apiWritesPerAgentByVerbAndKind: writesByKind(afterCreate, COUNT),
      secondsToEverySummary: secondsToSummaries,
      apiWritesOfTheFirstSummaries: summaryWrites,
      natsAccountConnectsToReadyable: nats
        ? metricSum(afterCreate, "ifp_operator_nats_account_connects_total")
        : undefined,
      natsAccountConnectsToEverySummary: connectsToSummaries,
      natsAccountConnectsAtEnd: nats ? metricSum(after, "ifp_operator_nats_account_connects_total") : undefined,
      resyncPeriodSeconds: RESYNC_S,
      steadyStateResyncs: round(resyncsObserved, 1),
      apiWritesPerSteadyStateResync: resyncsObserved > 0 ? round(steadyWrites / resyncsObserved, 2) : NaN,
      meanReconcileMs: round((durationSum / durationCount) * 1000, 1),
      informerRestarts: metricSum(after, "ifp_operator_informer_restarts"),
      reconcileErrors: metricSum(after, "ifp_operator_reconcile_errors_total"),
      operatorIdleRssMiB: idleRss,
      operatorPeakRssMiB: peakRss,
      operatorRssAtEndMiB: rssAtEnd,
      operatorHeapUsedAtEndMiB: round(metricSum(after, "ifp_operator_nodejs_heap_size_used_bytes") / 1048576, 1),
      operatorHeapTotalAtEndMiB: round(metricSum(after, "ifp_operator_nodejs_heap_size_total_bytes") / 1048576, 1),
      operatorExternalAtEndMiB: round(metricSum(after, "ifp_operator_nodejs_external_memory_bytes") / 1048576, 1),
      operatorMemoryAtPeak: atPeak,
      natsServerPeakRssMiB: nats ? natsPeakRss : undefined,
      restart,
    };
    if (resyncsObserved < 1) process.stderr.write("bench:operator: warning: fewer than one full resync observed\n");
    return result;
  } finally {
    sampling = false;
    await sampler?.catch(() => {});
    await operator.stop();
    await nats?.stop();
    await cp.stop();
  }
}

const OUT = process.env.BENCH_OUT ?? ".bench/operator.json";
const runs: Record<string, unknown>[] = [];
mkdirSync(dirname(OUT), { recursive: true });
for (const n of COUNTS) {
  runs.push(await run(n));
  // Each count as it finishes, so that a long run cut short keeps what it measured.
  process.stdout.write(`${JSON.stringify(runs.at(-1))}\n`);
  writeFileSync(
    OUT,
    `${JSON.stringify({ benchmark: "operator", date: new Date().toISOString(), node: process.version, loadAvg1AtStart: LOAD_AT_START, runs, partial: runs.length < COUNTS.length }, null, 2)}\n`,
  );
}
console.table(
  runs.map((r) => ({
    agents: r.agents,
    "s to reconciled once": r.secondsToReconciledOnce,
    "s to Ready-able": r.secondsToReadyable,
    "writes/Agent": r.apiWritesPerAgentToReadyable,
    "s to every summary": r.secondsToEverySummary,
    "NATS connects": r.natsAccountConnectsAtEnd,
    "writes/resync": r.apiWritesPerSteadyStateResync,
    "peak RSS MiB": r.operatorPeakRssMiB,
    "heap used MiB": r.operatorHeapUsedAtEndMiB,
    "reconcile ms": r.meanReconcileMs,
    errors: r.reconcileErrors,
    "restart: s to synced": (r.restart as Record<string, unknown> | undefined)?.secondsToCachesSynced,
    "restart: s to first pass": (r.restart as Record<string, unknown> | undefined)?.secondsToFirstPass,
    "restart: writes": (r.restart as Record<string, unknown> | undefined)?.apiWrites,
  })),
);
for (const r of runs) console.log(`writes per Agent (${r.agents} Agents): ${r.apiWritesPerAgentByVerbAndKind}`);
const first = runs[0]!;
const last = runs.at(-1)!;
const per100 = (k: string) =>
  runs.length > 1
    ? round(((Number(last[k]) - Number(first[k])) / (Number(last.agents) - Number(first.agents))) * 100)
    : NaN;
const slopePer100Agents = {
  secondsToReadyable: per100("secondsToReadyable"),
  operatorPeakRssMiB: per100("operatorPeakRssMiB"),
  apiWritesToReadyable: per100("apiWritesToReadyable"),
};
console.log(
  `slope per 100 Agents (${first.agents} → ${last.agents}): ${slopePer100Agents.secondsToReadyable} s, ${slopePer100Agents.operatorPeakRssMiB} MiB peak RSS, ${slopePer100Agents.apiWritesToReadyable} writes`,
);
writeFileSync(
  OUT,
  `${JSON.stringify({ benchmark: "operator", date: new Date().toISOString(), node: process.version, loadAvg1AtStart: LOAD_AT_START, loadAvg1AtEnd: round(loadavg()[0]!), runs, slopePer100Agents }, null, 2)}\n`,
);
console.log(JSON.stringify({ benchmark: "operator", runs: runs.length, slopePer100Agents }));
console.log(`written ${OUT}`);
