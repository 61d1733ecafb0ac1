// npm run bench:inbox — drives the agent inbox over TLS with signed 2 KB messages at several
// concurrencies and prints accepted msgs/s, p50/p99 latency and the runtime's peak RSS, next to
// two baselines measured in the same run: a bare fastify HTTPS POST handler, and a minimal agent
// on the official A2A JavaScript SDK (SendMessage over HTTPS, no signature check, no storage).
// Beside them the A2A face of an Agent (spec.a2a enabled, another runtime): JSON-RPC SendMessage
// with returnImmediately and a bearer token, answered once the task and the message are stored,
// and the same runtime's gRPC binding (SendMessage over grpc-js, one TLS channel). The peer the
// inbox is measured against is its floor (floor-server.ts): node:https, JSON.parse, JCS, Ed25519
// with a cached key, one JetStream publish with a dedupe id into the same stream, then 202.
// The runtimes run on the isolated NATS layout, the chart's default (an install of it as the
// operator makes it, runtime/bench/scale-isolated.ts), or with BENCH_LAYOUT=per-agent on a plain
// nats-server with streams of their own.
// The CPU each server spends per answered request is read from /proc. Then the inbox again at one concurrency with 1, 10 and 100 distinct signed senders (key
// lookup and per-sender rate-limit buckets). Messages come in conversations of four (each
// conversation's record is read, checked and written as for real traffic). Results:
// .bench/inbox.json, or BENCH_OUT.
//
//   BENCH_CONCURRENCY=1,8,32,64  BENCH_MESSAGES=3000  BENCH_SENDERS=1,10,100
//   BENCH_SENDER_CONCURRENCY=32  BENCH_PROFILE=dir (the runtime writes a --cpu-prof profile there)
//   BENCH_RUNTIME_NODE_OPTIONS (default: the heap bound the operator renders for a runtime pod)
//   BENCH_BASELINE=<another checkout> (its runtime measured too, as "before", compiled as this
//   one is; interleaved per level with the rest, so two versions share each moment's load)
//   BENCH_TARGETS=bare,a2a,agentA2a,floor,inbox (the servers measured; the inbox always is; agentA2a
//   measures the A2A face's JSON-RPC and gRPC bindings)
//   BENCH_LAYOUT=isolated|per-agent (the runtimes' NATS layout; isolated by default, as the chart's)
//   BENCH_RUNTIME_UNBUNDLED=1 (the runtimes from tsc's output and node_modules instead of the
//   image's bundle, runtime/bundle.ts)
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { compiledEntry } from "../../e2e/support/compiled.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { DEFAULT_RUNTIME_NODE_OPTIONS, RUNTIME_MALLOC_ARENA_MAX } from "../src/contract/node-options.ts";
import { identity, peerOf, signed, tempDir, writeAgentManifest, writeKey } from "../test/support/fixtures.ts";
import { agentInboxPrefix } from "../src/contract/nats-permissions.ts";
import { sharedAgentNames } from "../src/contract/shared-layout.ts";
import { grpcLoad, grpcMessages } from "./grpc-load.ts";
import { IsolatedInstall } from "./scale-isolated.ts";
import { cpuSeconds, natsMessagesIn, peakRssMiB, postLoad, round, type LoadResult } from "./load.ts";

const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,8,32,64").split(",").map(Number);
const PER_LEVEL = Number(process.env.BENCH_MESSAGES ?? 3000);
const SENDER_COUNTS = (process.env.BENCH_SENDERS ?? "1,10,100").split(",").map(Number);
const SENDER_CONCURRENCY = Number(process.env.BENCH_SENDER_CONCURRENCY ?? 32);
const SENDERS = Math.max(16, ...SENDER_COUNTS);
const PROFILE = process.env.BENCH_PROFILE;
/** NODE_OPTIONS of the runtimes: what the operator renders for the default resources, or BENCH_RUNTIME_NODE_OPTIONS. */
const RUNTIME_NODE_OPTIONS = process.env.BENCH_RUNTIME_NODE_OPTIONS ?? DEFAULT_RUNTIME_NODE_OPTIONS.agent;
const OUT = process.env.BENCH_OUT ?? ".bench/inbox.json";
const TARGETS = new Set([...(process.env.BENCH_TARGETS ?? "bare,a2a,agentA2a,floor").split(","), "inbox"]);
const LAYOUT = process.env.BENCH_LAYOUT ?? "isolated";
if (LAYOUT !== "isolated" && LAYOUT !== "per-agent") throw new Error("BENCH_LAYOUT is isolated or per-agent");
/** The bearer token A2A clients of the Agent's A2A face present. */
const A2A_TOKEN = "bench-a2a-token-0123456789abcdef";
const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

async function startProcess(
  args: string[],
  readyUrl: string,
  ca: string,
  nodeArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...nodeArgs, ...args], {
    stdio: ["ignore", "ignore", "inherit"],
    // Every server measured with the malloc arenas the operator renders for a runtime pod.
    env: {
      ...process.env,
      IFP_LOG_LEVEL: "warn",
      IFP_METRICS_PORT: "0",
      MALLOC_ARENA_MAX: String(RUNTIME_MALLOC_ARENA_MAX),
      ...env,
    },
  });
  await waitFor(
    `${args[0]} to listen`,
    async () => {
      const res = await httpsRequest(readyUrl, {
        ca,
        method: /inbox|jsonrpc/.test(readyUrl) ? "POST" : "GET",
        headers: { "content-type": "application/json", "a2a-version": "1.0" },
        body: "{}",
      });
      return res.status > 0 && res.status !== 503;
    },
    30_000,
    200,
  );
  return child;
}

/**
 * The runtime of another checkout, compiled with its own tsconfig.build.json as this one's is and,
 * when the checkout has runtime/bundle.ts, bundled by it as its image is (BENCH_RUNTIME_UNBUNDLED=1:
 * tsc's output with the checkout's dependencies; BENCH_SOURCE=1: its TypeScript source); a
 * checkout without dependencies (a git worktree) is given a link to this one's.
 */
function baselineEntry(checkout: string): string {
  // A git worktree has no node_modules: this checkout's serve it (the compiler's types too).
  const deps = join(checkout, "node_modules");
  if (!existsSync(deps)) symlinkSync(here("../../node_modules"), deps);
  if (process.env.BENCH_SOURCE === "1") return join(checkout, "runtime/bin/ifp-runtime.ts");
  const out = mkdtempSync(join(tmpdir(), "ifp-bench-baseline-"));
  const run = (args: string[], what: string) => {
    const r = spawnSync(process.execPath, args, { cwd: out, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`${what} ${checkout} failed: ${(r.stdout + r.stderr).slice(-2000)}`);
  };
  const tsc = here("../../node_modules/typescript/bin/tsc");
  run([tsc, "-p", join(checkout, "tsconfig.build.json"), "--outDir", join(out, "dist")], "compiling");
  symlinkSync(deps, join(out, "node_modules"));
  if (process.env.BENCH_RUNTIME_UNBUNDLED === "1" || !existsSync(join(checkout, "runtime/bundle.ts")))
    return join(out, "dist/runtime/bin/ifp-runtime.js");
  // As the image lays it out: the bundle beside the package.json that makes its files ES modules.
  // The files it copies beside the code are named from the checkout's root.
  symlinkSync(join(checkout, "runtime"), join(out, "runtime"));
  run([join(checkout, "runtime/bundle.ts")], "bundling");
  copyFileSync(join(checkout, "package.json"), join(out, "dist/bundle/package.json"));
  return join(out, "dist/bundle/runtime/bin/ifp-runtime.js");
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (child.exitCode !== null) return r();
    child.once("exit", () => r());
    child.kill("SIGTERM");
  });
}

const monitorPort = await freePort();
const dir = tempDir("ifp-bench-");
/** The NATS of the runtimes (and the floor), on the layout measured. */
const TENANT = "bench";
const install =
  LAYOUT === "isolated"
    ? await IsolatedInstall.start({
        http: `http_port: ${monitorPort}\n`,
        jetstream: "jetstream { max_file_store: 1TB }\n",
        graceMs: 2_000,
        startTimeoutMs: 30_000,
      })
    : undefined;
const nats = install ? install.server : await startNats({ config: `http_port: ${monitorPort}\n` });
/**
 * The NATS arguments of the runtime of `agentId` (an Agent of its own: its account, streams and
 * buckets), and the subject prefix and connection of its inbox for the floor.
 */
async function natsOf(
  agentId: string,
): Promise<{ args: string[]; inboxPrefix: string; creds?: string; replies?: string }> {
  if (!install) return { args: ["--nats", nats.url], inboxPrefix: `floor.${agentId}` };
  const account = await install.makeAgent(`${TENANT}/${agentId}`, { name: "" }, 30_000);
  const creds = join(dir, `${agentId}.creds`);
  writeFileSync(creds, await install.runtimeCreds(`${TENANT}/${agentId}`, agentId), { mode: 0o600 });
  return {
    args: ["--nats", nats.url, "--nats-layout", "isolated", "--nats-creds", creds],
    inboxPrefix: sharedAgentNames(account).inbox("x").slice(0, -2),
    creds,
    replies: agentInboxPrefix(agentId),
  };
}
const tls = await localhostTls();
const senders = Array.from({ length: SENDERS }, (_, i) => identity(`sender-${i}`));
const self = identity("bench-agent");
const manifest = writeAgentManifest(dir, {
  agentId: "bench-agent",
  capabilities: [{ name: "message.receive", description: "Accept IFP-4 structured messages" }],
  peers: senders.map(peerOf),
  // A run stores some 40,000 messages of 2 KB (more with BENCH_BASELINE): room for all of them.
  inbox: { maxBytes: 1024 ** 3, rateLimit: { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000 } },
});
// The same agent's A2A face, as another Agent of its own (its own streams and buckets).
const a2aManifest = writeAgentManifest(
  dir,
  {
    agentId: "bench-a2a-agent",
    capabilities: [{ name: "message.receive", description: "Accept IFP-4 structured messages" }],
    inbox: { maxBytes: 1024 ** 3, rateLimit: { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000 } },
    a2a: { enabled: true, authentication: { bearerTokenSecret: { name: "bench-a2a-tokens" } } },
  },
  "a2a-agent",
);
const a2aTokenFile = `${dir}/a2a-tokens`;
writeFileSync(a2aTokenFile, `${A2A_TOKEN}\n`, { mode: 0o600 });

/**
 * Signed messages of about 2 KB each, made before the clock starts, from `from` distinct
 * senders: conversations of four messages each (sequence 1–4, one sender each), so that the
 * inbox keeps each conversation's record as real traffic makes it do.
 */
function messages(n: number, from = 16): Buffer[] {
  const text = "x".repeat(1500);
  const run = Date.now().toString(36);
  return Array.from({ length: n }, (_, i) => {
    const k = Math.floor(i / 4);
    return Buffer.from(
      JSON.stringify(
        signed(senders[k % from]!, "bench-agent", { conversation_id: `conv:${run}-${k}`, sequence: (i % 4) + 1 }, text),
      ),
    );
  });
}

/**
 * A2A SendMessage requests (JSON-RPC) of the same size, with distinct message ids; with
 * `returnImmediately` (the Agent's face: the answer is the submitted task once it is stored,
 * without waiting for an application).
 */
function a2aMessages(n: number, returnImmediately = false): Buffer[] {
  const text = "x".repeat(1800);
  const run = Date.now().toString(36);
  return Array.from({ length: n }, (_, i) =>
    Buffer.from(
      JSON.stringify({
        jsonrpc: "2.0",
        id: i,
        method: "SendMessage",
        params: {
          message: { messageId: `m-${run}-${i}`, role: "ROLE_USER", parts: [{ text }] },
          ...(returnImmediately ? { configuration: { returnImmediately: true } } : {}),
        },
      }),
    ),
  );
}
/** A JSON-RPC answer that is a result, not an error. */
const jsonRpcResult = (body: string) => body.includes('"result"') && !body.includes('"error"');

const sample = messages(1)[0]!;
process.stderr.write(
  `message size ${sample.length} bytes; ${PER_LEVEL} messages per level; concurrency ${CONCURRENCY.join(", ")}\n`,
);

/** One level of one server, with the CPU it spent per answered request and (runtimes) its NATS messages. */
type Measured = LoadResult & { cpuMsPerMessage?: number; natsMsgsPerMessage?: number };
const results: {
  bare: Measured[];
  a2a: Measured[];
  agentA2a: Measured[];
  agentGrpc: Measured[];
  floor: Measured[];
  inbox: Measured[];
  before?: Measured[];
  senders: (LoadResult & { senders: number })[];
  rssMiB: {
    bare?: number;
    a2a?: number;
    agentA2a?: number;
    agentGrpc?: number;
    floor?: number;
    inbox?: number;
    before?: number;
  };
} = { bare: [], a2a: [], agentA2a: [], agentGrpc: [], floor: [], inbox: [], senders: [], rssMiB: {} };

// All servers run side by side and each concurrency level drives them one after the other, so
// that the figures of one level share the machine's load of that moment (on a shared machine
// the load drifts over a run; the order rotates per level so no one always goes first).
interface Target {
  name: "bare" | "a2a" | "agentA2a" | "agentGrpc" | "floor" | "inbox" | "before";
  url: string;
  /** How `n` requests are sent with `c` in flight, when not as HTTPS POSTs of `bodies` (gRPC). */
  run?: (n: number, c: number) => Promise<LoadResult>;
  bodies: (n: number) => Buffer[];
  okStatus: number;
  okBody?: (body: string) => boolean;
  headers?: Record<string, string>;
  /** The prefix of its NATS connections' names, for a runtime. */
  natsName?: string;
  child: ChildProcess;
}
const targets: Target[] = [];
if (TARGETS.has("bare")) {
  const port = await freePort();
  const url = `https://localhost:${port}/.well-known/agent/inbox`;
  targets.push({
    name: "bare",
    url,
    bodies: messages,
    okStatus: 202,
    child: await startProcess([here("./bare-server.ts"), tls.files.cert, tls.files.key, String(port)], url, tls.ca),
  });
}
if (TARGETS.has("a2a")) {
  // The official A2A JavaScript SDK server (Express JSON-RPC): accepts without verifying or storing.
  const port = await freePort();
  const url = `https://localhost:${port}/a2a/jsonrpc`;
  targets.push({
    name: "a2a",
    url,
    bodies: a2aMessages,
    okStatus: 200,
    okBody: jsonRpcResult,
    headers: { "a2a-version": "1.0" },
    child: await startProcess([here("./a2a-server.ts"), tls.files.cert, tls.files.key, String(port)], url, tls.ca),
  });
}
/** The arguments of an agent runtime on `port`, on NATS as `natsArgs` say. */
const runtimeArgs = (bin: string, agentManifest: string, port: number, natsArgs: string[]) => [
  bin,
  "agent",
  "--manifest",
  agentManifest,
  "--port",
  String(port),
  "--host",
  "127.0.0.1",
  "--tls-cert",
  tls.files.cert,
  "--tls-key",
  tls.files.key,
  "--signing-key",
  writeKey(dir, self),
  ...natsArgs,
  "--local-api-port",
  "0",
];
if (TARGETS.has("agentA2a")) {
  // The A2A face of an Agent: JSON-RPC SendMessage with a bearer token and returnImmediately,
  // answered once the task (KV) and the message (the inbox stream) are durable.
  const [port, grpcPort] = [await freePort(), await freePort()];
  const base = `https://localhost:${port}`;
  const child = await startProcess(
    [
      ...runtimeArgs(
        compiledEntry("runtime/bin/ifp-runtime.ts"),
        a2aManifest,
        port,
        (await natsOf("bench-a2a-agent")).args,
      ),
      ...["--a2a-token-file", a2aTokenFile, "--a2a-grpc-port", String(grpcPort)],
    ],
    `${base}/readyz`,
    tls.ca,
    [],
    { NODE_OPTIONS: RUNTIME_NODE_OPTIONS },
  );
  targets.push({
    name: "agentA2a",
    url: `${base}/a2a/v1`,
    bodies: (n) => a2aMessages(n, true),
    okStatus: 200,
    okBody: jsonRpcResult,
    headers: { "a2a-version": "1.0", authorization: `Bearer ${A2A_TOKEN}` },
    natsName: "ifp-agent bench-a2a-agent",
    child,
  });
  // The same runtime's gRPC binding: SendMessage with returnImmediately, the same durability.
  targets.push({
    name: "agentGrpc",
    url: `localhost:${grpcPort}`,
    bodies: () => [],
    run: (n, c) => grpcLoad(`localhost:${grpcPort}`, grpcMessages(n), c, tls.ca, A2A_TOKEN),
    okStatus: 0,
    natsName: "ifp-agent bench-a2a-agent",
    child,
  });
}
// The full inbox: schema, signature verification, rate limits, JetStream persistence. With
// BENCH_BASELINE=<checkout>, that checkout's runtime too ("before"), as a replica of the same agent.
const runtimes: [Target["name"], string][] = [["inbox", compiledEntry("runtime/bin/ifp-runtime.ts")]];
if (process.env.BENCH_BASELINE) runtimes.push(["before", baselineEntry(process.env.BENCH_BASELINE)]);
const inboxNats = await natsOf("bench-agent");
for (const [name, bin] of runtimes) {
  const port = await freePort();
  const base = `https://localhost:${port}`;
  const child = await startProcess(
    runtimeArgs(bin, manifest, port, inboxNats.args),
    `${base}/readyz`,
    tls.ca,
    PROFILE && name === "inbox" ? ["--cpu-prof", `--cpu-prof-dir=${PROFILE}`] : [],
    // The V8 heap the operator gives a runtime pod with the default resources.
    { NODE_OPTIONS: RUNTIME_NODE_OPTIONS },
  );
  targets.push({
    name,
    url: `${base}/.well-known/agent/inbox`,
    bodies: messages,
    okStatus: 202,
    natsName: "ifp-agent bench-agent",
    child,
  });
}
if (TARGETS.has("floor")) {
  // The floor: an Agent of its own on the same NATS, its messages stored in the same kind of stream.
  const port = await freePort();
  const url = `https://localhost:${port}/.well-known/agent/inbox`;
  const floor = await natsOf("bench-floor");
  if (!install) {
    const nc = await connect({ servers: nats.url });
    await (await jetstreamManager(nc)).streams.add({
      name: "BENCH_FLOOR",
      subjects: [`${floor.inboxPrefix}.>`],
      duplicate_window: 60_000_000_000,
    });
    await nc.close();
  }
  const keysFile = join(dir, "floor-keys.json");
  writeFileSync(
    keysFile,
    JSON.stringify(Object.fromEntries(senders.map((s) => [`${s.agentId}#${s.keyId}`, s.publicKey]))),
  );
  targets.push({
    name: "floor",
    url,
    bodies: messages,
    okStatus: 202,
    natsName: "ifp-floor",
    child: await startProcess(
      [
        here("./floor-server.ts"),
        ...[tls.files.cert, tls.files.key, String(port), nats.url, keysFile, floor.inboxPrefix],
        ...(floor.creds ? [floor.creds, floor.replies!] : []),
      ],
      url,
      tls.ca,
    ),
  });
}
const inboxUrl = targets.find((t) => t.name === "inbox")!.url;
// Warm-up (JIT, TLS sessions, NATS connections), not counted.
/** One load of `n` requests, `c` in flight, on a target. */
const load = (t: Target, n: number, c: number): Promise<LoadResult> =>
  t.run ? t.run(n, c) : postLoad(t.url, t.bodies(n), c, tls.ca, t.okStatus, t.headers, t.okBody);
for (const t of targets) await load(t, 300, 8);
for (const [i, c] of CONCURRENCY.entries()) {
  const order = [...targets.slice(i % targets.length), ...targets.slice(0, i % targets.length)];
  for (const t of order) {
    const natsBefore = t.natsName ? await natsMessagesIn(monitorPort, t.natsName) : 0;
    const cpuBefore = cpuSeconds(t.child.pid!);
    const r: Measured = await load(t, PER_LEVEL, c);
    const cpuAfter = cpuSeconds(t.child.pid!);
    // The server's CPU (user + system) per answered request, in ms.
    if (cpuBefore !== undefined && cpuAfter !== undefined && r.ok)
      r.cpuMsPerMessage = round(((cpuAfter - cpuBefore) * 1000) / r.ok, 3);
    // Publishes and requests to NATS per accepted message (the runtimes only; the others have none).
    if (t.natsName)
      r.natsMsgsPerMessage = round(((await natsMessagesIn(monitorPort, t.natsName)) - natsBefore) / PER_LEVEL);
    (results[t.name] ??= []).push(r);
  }
}
for (const n of SENDER_COUNTS) {
  results.senders.push({
    senders: n,
    ...(await postLoad(inboxUrl, messages(PER_LEVEL, n), SENDER_CONCURRENCY, tls.ca)),
  });
}
for (const t of targets) {
  results.rssMiB[t.name] = peakRssMiB(t.child.pid!);
  await stop(t.child);
}
await (install ? install.close() : nats.close());

const percent = (x: Measured | undefined, of: Measured | undefined) =>
  x && of ? `${round((100 * x.perSecond) / of.perSecond, 0)}%` : undefined;
const latency = (x: Measured | undefined) => (x ? `${x.p50ms} / ${x.p99ms}` : undefined);
const rows = CONCURRENCY.map((c, i) => {
  const b = results.bare[i];
  const a = results.a2a[i];
  const g = results.agentA2a[i];
  const r = results.agentGrpc[i];
  const f = results.inbox[i]!;
  const fl = results.floor[i];
  return {
    concurrency: c,
    "floor msgs/s": fl?.perSecond,
    "inbox/floor": percent(f, fl),
    "a2a/floor": percent(g, fl),
    "cpu ms inbox": f.cpuMsPerMessage,
    "cpu ms floor": fl?.cpuMsPerMessage,
    "floor p50/p99 ms": latency(fl),
    "bare msgs/s": b?.perSecond,
    "a2a-sdk msgs/s": a?.perSecond,
    "agent A2A msgs/s": g?.perSecond,
    "agent gRPC msgs/s": r?.perSecond,
    "inbox msgs/s": f.perSecond,
    "inbox/bare": percent(f, b),
    "inbox/a2a": percent(f, a),
    "agent A2A/a2a": percent(g, a),
    "bare p50/p99 ms": latency(b),
    "a2a p50/p99 ms": latency(a),
    "agent A2A p50/p99 ms": latency(g),
    "agent gRPC p50/p99 ms": latency(r),
    "inbox p50/p99 ms": latency(f),
    "CPU ms/msg bare · a2a · agent A2A · agent gRPC · inbox": [b, a, g, r, f]
      .map((x) => x?.cpuMsPerMessage ?? "–")
      .join(" · "),
    "NATS msgs/msg agent A2A · agent gRPC · inbox": `${g?.natsMsgsPerMessage ?? "–"} · ${r?.natsMsgsPerMessage ?? "–"} · ${f.natsMsgsPerMessage}`,
    ...(results.before
      ? {
          "before msgs/s": results.before[i]!.perSecond,
          "before p50/p99 ms": `${results.before[i]!.p50ms} / ${results.before[i]!.p99ms}`,
          "before CPU ms/msg": results.before[i]!.cpuMsPerMessage,
          "before NATS msgs/msg": results.before[i]!.natsMsgsPerMessage,
        }
      : {}),
    errors: (b?.errors ?? 0) + (a?.errors ?? 0) + (g?.errors ?? 0) + (r?.errors ?? 0) + (fl?.errors ?? 0) + f.errors,
  };
});
console.table(rows);
const senderRows = results.senders.map((r) => ({
  senders: r.senders,
  concurrency: r.concurrency,
  "inbox msgs/s": r.perSecond,
  "p50/p99 ms": `${r.p50ms} / ${r.p99ms}`,
  errors: r.errors,
}));
console.table(senderRows);
console.log(
  `NATS layout of the runtimes: ${LAYOUT}; peak RSS: runtime ${results.rssMiB.inbox} MiB${results.rssMiB.before ? ` (before: ${results.rssMiB.before} MiB)` : ""}, bare fastify ${results.rssMiB.bare} MiB, A2A SDK ${results.rssMiB.a2a} MiB, agent A2A runtime ${results.rssMiB.agentA2a} MiB, floor ${results.rssMiB.floor} MiB`,
);
const out = {
  benchmark: "inbox",
  date: new Date().toISOString(),
  node: process.version,
  machine: { cpus: cpus().length, loadAvg1: round(loadavg()[0]!) },
  layout: LAYOUT,
  messageBytes: sample.length,
  messagesPerLevel: PER_LEVEL,
  results,
  summary: rows,
  senders: senderRows,
};
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, `${JSON.stringify(out, null, 2)}\n`);
console.log(JSON.stringify({ benchmark: "inbox", summary: rows, senders: senderRows, peakRssMiB: results.rssMiB }));
console.log(`written ${OUT}`);
