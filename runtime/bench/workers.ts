// node runtime/bench/workers.ts — the agent inbox with 1 and 2 event loops (spec.runtime.workers,
// docs/scale.md#more-than-one-core) on a machine whose load generator needs a core of its own:
// this process (the generator) and nats-server are pinned to one CPU, the runtime to others, and
// each run prints accepted msgs/s, the runtime's CPU seconds, messages per runtime CPU-second,
// p50/p99 and how the requests split between the loops. Signed 2 KB messages from 100 senders,
// in conversations of four, over keep-alive TLS connections (the kernel gives each connection to
// one loop). The runtime is the image's bundle (runtime/bundle.ts), as inbox.ts runs it
// (BENCH_RUNTIME_UNBUNDLED=1: tsc's output; BENCH_SOURCE=1: the TypeScript sources). With
// BENCH_FACE=a2a the load is the A2A face's instead: JSON-RPC SendMessage (returnImmediately) of
// the same 1,500-character text with a bearer token, answered 200 once its task is recorded and
// its hand-off stored. Results: .bench/workers.json, or BENCH_OUT.
//
//   BENCH_WORKERS=1,2          the runs, one runtime each
//   BENCH_CONCURRENCY=32       requests in flight (and connections)
//   BENCH_MESSAGES=4000        per run, after BENCH_WARMUP=1000
//   BENCH_GENERATOR_CPUS=0     the CPUs of this process and nats-server (taskset -c)
//   BENCH_RUNTIME_CPUS=1;0,1   the runtime's CPUs per run, in BENCH_WORKERS' order (';' between runs)
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { compiledEntry, entryCode } from "../../e2e/support/compiled.ts";
import { startNats } from "../../e2e/support/nats.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { identity, peerOf, signed, tempDir, writeAgentManifest, writeKey } from "../test/support/fixtures.ts";
import { cpuSeconds, peakRssMiB, postLoad, round } from "./load.ts";

const WORKERS = (process.env.BENCH_WORKERS ?? "1,2").split(",").map(Number);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 4000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1000);
const GENERATOR_CPUS = process.env.BENCH_GENERATOR_CPUS ?? "0";
const RUNTIME_CPUS = (process.env.BENCH_RUNTIME_CPUS ?? "1;0,1").split(";");
const OUT = process.env.BENCH_OUT ?? ".bench/workers.json";
const BIN = compiledEntry("runtime/bin/ifp-runtime.ts");
const SENDERS = 100;
const A2A = process.env.BENCH_FACE === "a2a";
const A2A_TOKEN = "bench-workers-a2a-token-0123456789";

/** Pin a running process, every thread of it, to `list` (taskset -a -p -c). */
function pin(pid: number | undefined, list: string): void {
  if (pid === undefined) return;
  const r = spawnSync("taskset", ["-a", "-p", "-c", list, String(pid)], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`taskset -c ${list} ${pid} failed: ${r.stderr || r.error?.message}`);
}

pin(process.pid, GENERATOR_CPUS);
const nats = await startNats();
pin(nats.pid, GENERATOR_CPUS);
const tls = await localhostTls();
const dir = tempDir("ifp-bench-workers-");
const senders = Array.from({ length: SENDERS }, (_, i) => identity(`sender-${i}`));
const self = identity("bench-agent");

/**
 * Signed messages of about 2 KB, made before the clock starts: conversations of four, one sender
 * each; or (BENCH_FACE=a2a) A2A SendMessage requests of the same text.
 */
function messages(n: number, agentId: string): Buffer[] {
  const text = "x".repeat(1500);
  if (A2A)
    return Array.from({ length: n }, (_, i) => {
      const message = { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text }] };
      const params = { message, configuration: { returnImmediately: true } };
      return Buffer.from(JSON.stringify({ jsonrpc: "2.0", id: i, method: "SendMessage", params }));
    });
  const run = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
  return Array.from({ length: n }, (_, i) => {
    const k = Math.floor(i / 4);
    const headers = { conversation_id: `conv:${run}-${k}`, sequence: (i % 4) + 1 };
    return Buffer.from(JSON.stringify(signed(senders[k % SENDERS]!, agentId, headers, text)));
  });
}

async function startRuntime(workers: number, cpuList: string) {
  const name = `bench-agent-${workers}`;
  const manifest = writeAgentManifest(
    dir,
    {
      agentId: name,
      peers: senders.map(peerOf),
      inbox: {
        maxBytes: 1024 ** 3,
        rateLimit: { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perSenderBytesPerHour: "100Gi" },
      },
      ...(A2A ? { a2a: { enabled: true, authentication: { bearerTokenSecret: { name: "a2a-tokens" } } } } : {}),
    },
    name,
  );
  const tokenFile = join(dir, "a2a-tokens");
  writeFileSync(tokenFile, `${A2A_TOKEN}\n`);
  const [port, metricsPort] = [await freePort(), await freePort()];
  const args = [
    ...["-c", cpuList, process.execPath, BIN, "agent", "--manifest", manifest, "--port", String(port)],
    ...["--host", "127.0.0.1", "--metrics-port", String(metricsPort), "--local-api-port", "0"],
    ...["--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--signing-key", writeKey(dir, self)],
    ...["--nats", nats.url, "--workers", String(workers)],
    ...(A2A ? ["--a2a-token-file", tokenFile] : []),
  ];
  const child: ChildProcess = spawn("taskset", args, {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, IFP_LOG_LEVEL: "warn" },
  });
  const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  // Ready: every loop connected and the streams in place.
  const readyz = `https://localhost:${port}/readyz`;
  await waitFor(`${name} ready`, async () => (await httpsRequest(readyz, { ca: tls.ca })).status === 200, 60_000, 200);
  const path = A2A ? "/a2a/v1" : "/.well-known/agent/inbox";
  return { name, child, url: `https://localhost:${port}${path}`, metricsUrl };
}

/** Requests each loop took, from the runtime's /metrics (one loop: all of them). */
async function perLoop(metricsUrl: string): Promise<number[]> {
  const text = await (await fetch(metricsUrl)).text();
  const counts: number[] = [];
  for (const m of text.matchAll(/^ifp_worker_requests_total\{worker="(\d+)"[^}]*\} (\d+)/gm))
    counts[Number(m[1])] = Number(m[2]);
  return counts;
}

/** The load of one run: the inbox's 202s, or the A2A face's 200s with a result. */
const load = (url: string, bodies: Buffer[]) =>
  A2A
    ? postLoad(
        url,
        bodies,
        CONCURRENCY,
        tls.ca,
        200,
        { authorization: `Bearer ${A2A_TOKEN}`, "a2a-version": "1.0" },
        (b) => b.includes('"result"'),
      )
    : postLoad(url, bodies, CONCURRENCY, tls.ca);

const results = [];
for (const [i, workers] of WORKERS.entries()) {
  const cpuList = RUNTIME_CPUS[i] ?? RUNTIME_CPUS.at(-1)!;
  const rt = await startRuntime(workers, cpuList);
  const pid = rt.child.pid!;
  // Warm: the code compiled, the senders' keys cached, every loop's connections open.
  await load(rt.url, messages(WARMUP, rt.name));
  const bodies = messages(MESSAGES, rt.name);
  const [cpu0, loops0, self0] = [cpuSeconds(pid)!, await perLoop(rt.metricsUrl), process.cpuUsage()];
  const run = await load(rt.url, bodies);
  const [cpu1, loops1, self1] = [cpuSeconds(pid)!, await perLoop(rt.metricsUrl), process.cpuUsage(self0)];
  const runtimeCpu = round(cpu1 - cpu0);
  const result = {
    workers,
    runtimeCpus: cpuList,
    generatorCpus: GENERATOR_CPUS,
    concurrency: CONCURRENCY,
    messages: MESSAGES,
    ok: run.ok,
    errors: run.errors,
    perSecond: run.perSecond,
    p50ms: run.p50ms,
    p99ms: run.p99ms,
    runtimeCpuSeconds: runtimeCpu,
    perCpuSecond: round(run.ok / runtimeCpu, 0),
    cpuMsPerMessage: round((runtimeCpu * 1000) / run.ok, 3),
    generatorCpuSeconds: round((self1.user + self1.system) / 1e6),
    perLoop: loops1.map((n, k) => n - (loops0[k] ?? 0)),
    peakRssMiB: peakRssMiB(pid),
  };
  results.push(result);
  console.log(
    `workers ${workers} (runtime on CPUs ${cpuList}): ${result.perSecond} msgs/s, ${result.perCpuSecond} per runtime CPU-second ` +
      `(${result.cpuMsPerMessage} ms CPU each), p50 ${result.p50ms} ms, p99 ${result.p99ms} ms, ` +
      `per loop ${result.perLoop.join("/") || "-"}, ${result.errors} errors, peak RSS ${result.peakRssMiB} MiB`,
  );
  await new Promise<void>((r) => {
    rt.child.once("exit", () => r());
    rt.child.kill("SIGTERM");
  });
}
await nats.close();

const report = {
  date: new Date().toISOString(),
  cpus: cpus().length,
  loadavg: loadavg().map((n) => round(n)),
  runtime: entryCode("runtime/bin/ifp-runtime.ts"),
  face: A2A ? "a2a" : "inbox",
  results,
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, `${JSON.stringify(report, null, 2)}\n`);
console.log(JSON.stringify(report));
