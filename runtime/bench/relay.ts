// npm run bench:relay — publish → retrieve → acknowledge through a relay process (the start
// contract, TLS on loopback, every request signed per RFC 9421), next to raw JetStream publish +
// fetch + ack with the same NATS client library on the same nats-server, in the same run.
//
// Each run has `concurrency` publishers and one consumer that works each page it retrieves with
// `concurrency` acknowledgements in flight. Latency is publish start → acknowledged. Relay
// paths: one signed publish per message, pull + DELETE per message (the spec's flow,
// relay-delete); the same publishes, pull + one acknowledgement of the whole page
// (POST /relay/messages/ack, relay-pull-ack); batches of BENCH_BATCH (default 25) messages per
// signed publish, pull + one acknowledgement per page (relay-batch); WebSocket sessions at both
// ends, publish frames and pushed copies, acknowledged with one ack frame for the copies that
// came in one event-loop turn (relay-ws; relay-ws-each: one ack frame per copy). CPU is counted
// per process (relay, nats-server, this benchmark process with its clients), so the cost of
// each path shows.
//
// BENCH_MESSAGES (default 2000) and BENCH_CONCURRENCY (default 1,8,32) bound the load;
// BENCH_MODES (relay-delete,relay-pull-ack,relay-batch,relay-ws; also relay-ws-each) picks the
// relay paths. The relay runs with the
// V8 heap bound the operator renders for a runtime pod (BENCH_RUNTIME_NODE_OPTIONS to change it),
// from the image's bundle (runtime/bundle.ts; BENCH_RUNTIME_UNBUNDLED=1: tsc's output and
// node_modules). NATS messages the relay sends per message (its round trips) are counted from the
// server's monitoring endpoint.
//
// Then how the cost grows (BENCH_SCALE=0 skips it): publishing to 10, 100 and 1,000 mailboxes
// and reading them back; publish → pull → batch ack with 10^4 messages stored in other
// mailboxes (10^5 with BENCH_LONG=1); a topic publish with 1, 10 and 100 subscribers.
// Prints tables; writes .bench/relay.json.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { AckPolicy, DiscardPolicy, jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Agent as Pool, request as undiciRequest, type Dispatcher } from "undici";
import WebSocket from "ws";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { compiledEntry } from "../../e2e/support/compiled.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { signRequest } from "../src/protocol/http-signatures.ts";
import type { Message } from "../src/protocol/message.ts";
import { RelayClient, type RelayHttp } from "../src/net/relay-client.ts";
import { identity, peerOf, signed, tempDir, writeRelayManifest } from "../test/support/fixtures.ts";
import { natsMessagesIn, peakRssMiB, percentile, round } from "./load.ts";
import { relayNames } from "../src/contract/relay-stream.ts";
import { DEFAULT_RUNTIME_NODE_OPTIONS, RUNTIME_MALLOC_ARENA_MAX } from "../src/contract/node-options.ts";

const N = Number(process.env.BENCH_MESSAGES ?? 2000);
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,8,32").split(",").map(Number);
const PAGE = 100;
const _here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

type Mode = "jetstream" | "relay-delete" | "relay-pull-ack" | "relay-batch" | "relay-ws" | "relay-ws-each";
interface Result {
  mode: Mode;
  concurrency: number;
  messages: number;
  seconds: number;
  perSecond: number;
  p50ms: number;
  p99ms: number;
  /** CPU milliseconds per message, by process. */
  cpuMsPerMessage: { relay: number; natsServer: number; client: number };
  /** Messages the relay sent to NATS per message (publishes, requests, acks). */
  natsMsgsPerMessage?: number;
  /** Write system calls of the relay per message (sockets to its clients and to NATS), from /proc. */
  relayWritesPerMessage?: number;
}

/** CPU time (ms) of a process from /proc (Linux), or of this process. */
function cpuMs(pid?: number): number {
  if (pid === undefined) {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  }
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, 100 ticks/s
  } catch {
    return Number.NaN;
  }
}

/** Write system calls a process has made (Linux /proc/<pid>/io), NaN where that cannot be read. */
function writeCalls(pid: number): number {
  try {
    return Number(/^syscw: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))?.[1] ?? Number.NaN);
  } catch {
    return Number.NaN;
  }
}

/**
 * Publishers and one consumer at once. `publish(is)` sends messages `is` (ids `ids[i]`), `chunk`
 * of them at a time; the consumer calls `onAcked(id)` for each acknowledged message until `done()`.
 */
async function pipeline(
  mode: Mode,
  concurrency: number,
  ids: string[],
  pids: { relay: number; nats: number },
  publish: (is: number[]) => Promise<void>,
  consume: (onAcked: (id: string) => void, done: () => boolean) => Promise<void>,
  chunk = 1,
): Promise<Result> {
  const count = ids.length;
  const startedAt = new Map<string, number>();
  const latencies: number[] = [];
  let next = 0;
  const cpu0 = { relay: cpuMs(pids.relay), nats: cpuMs(pids.nats), client: cpuMs() };
  const writes0 = writeCalls(pids.relay);
  const natsIn0 = await natsMessagesIn(monitorPort, "ifp-relay ");
  const started = performance.now();
  const consumer = consume(
    (id) => {
      const t = startedAt.get(id);
      if (t !== undefined && startedAt.delete(id)) latencies.push(performance.now() - t);
    },
    () => latencies.length >= count,
  );
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const is = Array.from({ length: Math.min(chunk, count - next) }, () => next++);
        const t = performance.now();
        for (const i of is) startedAt.set(ids[i]!, t);
        await publish(is);
      }
    }),
  );
  let stalled: NodeJS.Timeout | undefined;
  await Promise.race([
    consumer,
    new Promise((_, reject) => {
      stalled = setTimeout(
        () =>
          reject(
            new Error(`${mode} at concurrency ${concurrency} stalled: ${latencies.length} of ${count} acknowledged`),
          ),
        120_000,
      );
    }),
  ]).finally(() => clearTimeout(stalled));
  const seconds = (performance.now() - started) / 1000;
  const per = (a: number, b: number) => round((a - b) / count, 3);
  latencies.sort((a, b) => a - b);
  return {
    mode,
    concurrency,
    messages: latencies.length,
    seconds: round(seconds),
    perSecond: round(latencies.length / seconds),
    p50ms: round(percentile(latencies, 50)),
    p99ms: round(percentile(latencies, 99)),
    cpuMsPerMessage: {
      relay: per(cpuMs(pids.relay), cpu0.relay),
      natsServer: per(cpuMs(pids.nats), cpu0.nats),
      client: per(cpuMs(), cpu0.client),
    },
    natsMsgsPerMessage: round(((await natsMessagesIn(monitorPort, "ifp-relay ")) - natsIn0) / count),
    relayWritesPerMessage: round((writeCalls(pids.relay) - writes0) / count),
  };
}

/** Work a page with `concurrency` acknowledgements in flight. */
async function ackAll<T>(items: T[], concurrency: number, ack: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  await Promise.all(
    Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) await ack(item);
    }),
  );
}

const monitorPort = await freePort();
const nats = await startNats({ config: `http_port: ${monitorPort}\n` });
const SCALE = process.env.BENCH_SCALE !== "0";
const LONG = process.env.BENCH_LONG === "1";
const MAILBOXES = [10, 100, 1000];
const STORED = LONG ? 100_000 : 10_000;
const FANOUT = [1, 10, 100];
const SCALE_N = Number(process.env.BENCH_SCALE_MESSAGES ?? 1000);
const others = SCALE ? Array.from({ length: Math.max(...MAILBOXES, ...FANOUT) }, (_, i) => identity(`m-${i}`)) : [];
const tls = await localhostTls();
const alice = identity("alice-agent");
const bob = identity("bob-agent");
const text = "x".repeat(1500);
const bodies = (count: number) => Array.from({ length: count }, () => signed(alice, "bob-agent", {}, text));
const messageBytes = Buffer.byteLength(JSON.stringify(bodies(1)[0]));

// The relay, started the way a pod starts it.
const port = await freePort();
const manifest = writeRelayManifest(
  tempDir("ifp-bench-"),
  {
    url: "https://localhost",
    agents: [peerOf(alice), peerOf(bob), ...others.map(peerOf)],
    limits: { perAgentPerMinute: 100_000_000, perAddressPerMinute: 100_000_000 },
  },
  "bench-relay",
);
const child = spawn(
  process.execPath,
  [
    ...(process.env.BENCH_RELAY_NODE_OPTIONS ?? "").split(" ").filter(Boolean),
    compiledEntry("runtime/bin/ifp-runtime.ts"),
    "relay",
    "--manifest",
    manifest,
    "--port",
    String(port),
    "--metrics-port",
    "0",
    "--host",
    "127.0.0.1",
    "--tls-cert",
    tls.files.cert,
    "--tls-key",
    tls.files.key,
    "--nats",
    nats.url,
  ],
  {
    stdio: ["ignore", "ignore", "inherit"],
    // The V8 heap and malloc arenas the operator gives a runtime pod with the default resources.
    env: {
      ...process.env,
      IFP_LOG_LEVEL: "warn",
      NODE_OPTIONS: process.env.BENCH_RUNTIME_NODE_OPTIONS ?? DEFAULT_RUNTIME_NODE_OPTIONS.relay,
      MALLOC_ARENA_MAX: String(RUNTIME_MALLOC_ARENA_MAX),
    },
  },
);
const base = `https://localhost:${port}`;
await waitFor("relay", async () => (await httpsRequest(`${base}/readyz`, { ca: tls.ca })).status === 200, 30_000, 200);
const pids = { relay: child.pid!, nats: nats.pid! };
// The relay clients sign every request as RelayClient does; the HTTPS under them is undici's
// request() on a keep-alive pool (lighter than fetch, so that the client's own cost on this
// shared machine stays small next to the relay's).
const pool = new Pool({ connect: { ca: tls.ca }, keepAliveTimeout: 30_000, connections: 64 });
const http: RelayHttp & { close(): Promise<void> } = {
  async request(url, init = {}) {
    const res = await undiciRequest(url, {
      method: (init.method ?? "GET") as Dispatcher.HttpMethod,
      headers: init.headers,
      body: init.body,
      dispatcher: pool,
    });
    const text = await res.body.text();
    const headers = new Headers();
    for (const [k, v] of Object.entries(res.headers))
      if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    return { status: res.statusCode, headers, text };
  },
  close: () => pool.close(),
};
const pub = new RelayClient(base, alice.signing, http);
const sub = new RelayClient(base, bob.signing, http);

// Raw JetStream with the same client library: a file stream like the relay's, publish with a
// message id, fetch pages from a durable consumer and ack each (ackAck waits for the server).
const nc = await connect({ servers: nats.url, noAsyncTraces: true });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
let rawRuns = 0;
async function rawRun(c: number, count: number): Promise<Result> {
  const stream = `RAW_${++rawRuns}`;
  await jsm.streams.add({
    name: stream,
    subjects: [`raw.${rawRuns}.>`],
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    allow_msg_ttl: true,
    duplicate_window: 120e9,
  });
  await jsm.consumers.add(stream, { durable_name: "bob", ack_policy: AckPolicy.Explicit, max_ack_pending: 10_000 });
  const consumer = await js.consumers.get(stream, "bob");
  const msgs = bodies(count);
  return pipeline(
    "jetstream",
    c,
    msgs.map((m) => m.headers.message_id),
    pids,
    async ([i]) => {
      const m = msgs[i!]!;
      await js.publish(`raw.${rawRuns}.bob`, JSON.stringify(m), { msgID: m.headers.message_id });
    },
    async (onAcked, done) => {
      while (!done()) {
        const page = [];
        for await (const m of await consumer.fetch({ max_messages: PAGE, expires: 1000 })) page.push(m);
        await ackAll(page, c, async (m) => {
          const id = (m.json() as Message).headers.message_id;
          await m.ackAck();
          onAcked(id);
        });
      }
    },
  );
}

/** A WebSocket session of `agent` at /relay/ws (signed upgrade), open. */
async function session(key: typeof alice, query = ""): Promise<WebSocket> {
  const path = `/relay/ws${query}`;
  const ws = new WebSocket(`${base.replace("https", "wss")}${path}`, {
    headers: await signRequest({ method: "GET", url: `${base}${path}` }, key.signing),
    ca: tls.ca,
  });
  await new Promise((r, j) => ws.once("open", r).once("error", j));
  return ws;
}

/**
 * Publish frames on one WebSocket session: `publish(m)` resolves when the relay answers
 * `published` for its message_id, and throws on an `error` frame.
 */
function framePublisher(ws: WebSocket): (m: Message) => Promise<void> {
  const waiting = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  ws.on("message", (d) => {
    const f = JSON.parse(d.toString()) as { type: string; message_id?: string; code?: string; message?: string };
    const w = f.message_id === undefined ? undefined : waiting.get(f.message_id);
    if (!w) return;
    waiting.delete(f.message_id!);
    if (f.type === "published") w.resolve();
    else w.reject(new Error(`publish frame answered ${f.code}: ${f.message}`));
  });
  return (m) =>
    new Promise<void>((resolve, reject) => {
      waiting.set(m.headers.message_id, { resolve, reject });
      ws.send(JSON.stringify({ type: "publish", message: m }));
    });
}

const BATCH = Number(process.env.BENCH_BATCH ?? 25);
/** The relay paths measured (BENCH_MODES, comma-separated; all but relay-ws-each by default). */
const MODES = (process.env.BENCH_MODES ?? "relay-delete,relay-pull-ack,relay-batch,relay-ws").split(",") as Exclude<
  Mode,
  "jetstream"
>[];

async function relayRun(mode: Exclude<Mode, "jetstream">, c: number, count: number): Promise<Result> {
  const msgs = bodies(count);
  const ids = msgs.map((m) => m.headers.message_id);
  if (mode === "relay-ws" || mode === "relay-ws-each") {
    // Both ends on WebSocket sessions: alice publishes with frames (a session that only sends),
    // bob takes pushed copies and acknowledges them with one frame for the copies of one turn
    // (relay-ws) or a frame each (relay-ws-each).
    const sender = await session(alice, "?push=off");
    const send = framePublisher(sender);
    try {
      return await pipeline(
        mode,
        c,
        ids,
        pids,
        ([i]) => send(msgs[i!]!),
        async (onAcked, done) => {
          const ws = await session(bob);
          let pending: string[] = [];
          const flush = () => {
            ws.send(JSON.stringify({ type: "ack", message_ids: pending }));
            pending = [];
          };
          await new Promise<void>((resolve) => {
            ws.on("message", (d) => {
              const f = JSON.parse(d.toString()) as {
                type: string;
                message_id?: string;
                message?: Message;
                ok?: boolean;
                acknowledged?: string[];
              };
              if (f.type === "message") {
                const id = f.message!.headers.message_id;
                if (mode === "relay-ws-each") ws.send(JSON.stringify({ type: "ack", message_id: id }));
                else if (pending.push(id) === 1) setImmediate(flush);
              } else if (f.type === "acked") {
                if (f.acknowledged) for (const id of f.acknowledged) onAcked(id);
                else if (f.ok) onAcked(f.message_id!);
                if (done()) resolve();
              }
            });
          });
          ws.close();
        },
      );
    } finally {
      sender.close();
    }
  }
  // Pull + DELETE publishes one signed request per message (the spec's flow); batch mode
  // publishes BATCH messages per signed request (POST /relay/publish/batch).
  const publish =
    mode === "relay-batch"
      ? async (is: number[]) => {
          const { results } = await pub.publishMany(is.map((i) => msgs[i]!));
          const refused = results.find((r) => r.status !== 202);
          if (refused) throw new Error(`batch item answered ${JSON.stringify(refused)}`);
        }
      : async ([i]: number[]) => {
          const res = await pub.publish(msgs[i!]!);
          if (res.status !== 202) throw new Error(`publish answered ${res.status}: ${res.text}`);
        };
  return pipeline(
    mode,
    c,
    ids,
    pids,
    publish,
    async (onAcked, done) => {
      let after = 0;
      while (!done()) {
        const { messages, next } = await sub.pull({ limit: PAGE, after });
        if (!messages.length) {
          await new Promise((r) => setTimeout(r, 2));
          continue;
        }
        after = next ?? after;
        if (mode !== "relay-delete") {
          const { acknowledged } = await sub.ackMany(messages.map((m) => m.headers.message_id));
          for (const id of acknowledged) onAcked(id);
        } else {
          await ackAll(messages, c, async (m) => {
            if (await sub.ack(m.headers.message_id)) onAcked(m.headers.message_id);
          });
        }
      }
    },
    mode === "relay-batch" ? BATCH : 1,
  );
}

/** Rows of the cost-growth runs. */
const scale: Record<string, string | number>[] = [];
const names = relayNames({ metadata: { name: "bench-relay" }, spec: { url: "https://localhost" } } as Parameters<
  typeof relayNames
>[0]);

/** Run `count` calls of `fn` with `c` in flight; seconds taken and latencies. */
async function timed(
  count: number,
  c: number,
  fn: (i: number) => Promise<void>,
): Promise<{ seconds: number; p50ms: number; p99ms: number }> {
  let next = 0;
  const lat: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < count) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        lat.push(performance.now() - t);
      }
    }),
  );
  lat.sort((a, b) => a - b);
  return {
    seconds: (performance.now() - t0) / 1000,
    p50ms: round(percentile(lat, 50)),
    p99ms: round(percentile(lat, 99)),
  };
}

async function scaleRuns(): Promise<void> {
  // Publish to M mailboxes, then each owner pulls its page and acknowledges it in one request.
  for (const m of MAILBOXES) {
    const msgs = Array.from({ length: SCALE_N }, (_, i) => signed(alice, others[i % m]!.agentId, {}, text));
    const pubT = await timed(SCALE_N, 32, async (i) => {
      const res = await pub.publish(msgs[i]!);
      if (res.status !== 202) throw new Error(`publish answered ${res.status}: ${res.text}`);
    });
    let got = 0;
    const pullT = await timed(m, 8, async (k) => {
      const client = new RelayClient(base, others[k]!.signing, http);
      const { messages } = await client.pull({ limit: PAGE });
      got += messages.length;
      if (messages.length) await client.ackMany(messages.map((x) => x.headers.message_id));
    });
    scale.push({
      run: `${m} mailboxes`,
      "publish msgs/s": round(SCALE_N / pubT.seconds),
      "publish p50/p99 ms": `${pubT.p50ms} / ${pubT.p99ms}`,
      "pull+ack per mailbox p50/p99 ms": `${pullT.p50ms} / ${pullT.p99ms}`,
      "messages read": got,
    });
  }
  // Messages stored in another mailbox: publish → pull → batch ack for bob, next to the same on an empty stream.
  const empty = await relayRun("relay-batch", 8, SCALE_N);
  let stored = 0;
  for (let i = 0; i < STORED; i += 1000) {
    const chunk = Array.from({ length: Math.min(1000, STORED - i) }, (_, k) => i + k);
    await Promise.all(
      chunk.map((k) => js.publish(names.copy("filler-agent", `filler-${k}`), text, { msgID: `filler ${k}` })),
    );
    stored += chunk.length;
  }
  const full = await relayRun("relay-batch", 8, SCALE_N);
  scale.push({
    run: `batch, empty stream`,
    "publish msgs/s": empty.perSecond,
    "publish p50/p99 ms": `${empty.p50ms} / ${empty.p99ms}`,
    "relay NATS msgs/msg": empty.natsMsgsPerMessage ?? "",
  });
  scale.push({
    run: `batch, ${stored} stored`,
    "publish msgs/s": full.perSecond,
    "publish p50/p99 ms": `${full.p50ms} / ${full.p99ms}`,
    "relay NATS msgs/msg": full.natsMsgsPerMessage ?? "",
  });
  await jsm.streams.purge(names.stream, { filter: names.mailbox("filler-agent") });
  // A topic publish with K subscribers: one copy each, stored before the 202.
  for (const k of FANOUT) {
    const topic = `bench.fan-${k}`;
    for (let i = 0; i < k; i++) {
      const res = await new RelayClient(base, others[i]!.signing, http).request("POST", "/relay/subscribe", {
        subscribe: { topics: [topic] },
      });
      if (res.status !== 200) throw new Error(`subscribe answered ${res.status}: ${res.text}`);
    }
    const count = Math.max(50, Math.round(SCALE_N / k));
    const msgs = Array.from({ length: count }, () => signed(alice, `topic:${topic}`, {}, text));
    const natsIn0 = await natsMessagesIn(monitorPort, "ifp-relay ");
    const t = await timed(count, 8, async (i) => {
      const res = await pub.publish(msgs[i]!);
      if (res.status !== 202) throw new Error(`topic publish answered ${res.status}: ${res.text}`);
    });
    const natsIn = (await natsMessagesIn(monitorPort, "ifp-relay ")) - natsIn0;
    scale.push({
      run: `topic, ${k} subscribers`,
      "publish msgs/s": round(count / t.seconds),
      "publish p50/p99 ms": `${t.p50ms} / ${t.p99ms}`,
      "copies/s": round((count * k) / t.seconds),
      "relay NATS msgs/msg": round(natsIn / count),
    });
    await jsm.streams.purge(names.stream, { filter: names.mailboxes });
  }
}

const results: Result[] = [];
let relayPeakRssMiB: number | undefined;
try {
  // Warm up both paths (JIT, connection pools), then measure, alternating per level.
  await rawRun(8, 300);
  for (const mode of MODES) await relayRun(mode, 8, 300);
  for (const c of LEVELS) {
    results.push(await rawRun(c, N));
    for (const mode of MODES) results.push(await relayRun(mode, c, N));
  }
  if (SCALE) await scaleRuns();
  relayPeakRssMiB = peakRssMiB(child.pid!);
} finally {
  await nc.close();
  await http.close();
  await new Promise((r) => {
    child.once("exit", r);
    child.kill("SIGTERM");
  });
  await nats.close();
}

const raw = (c: number) => results.find((r) => r.mode === "jetstream" && r.concurrency === c)!;
const rows = results.map((r) => ({
  concurrency: r.concurrency,
  path: r.mode,
  "msgs/s": r.perSecond,
  "of raw": r.mode === "jetstream" ? "" : `${round((100 * r.perSecond) / raw(r.concurrency).perSecond, 0)}%`,
  "p50 ms": r.p50ms,
  "p99 ms": r.p99ms,
  "cpu ms/msg relay · nats · client": `${r.cpuMsPerMessage.relay} · ${r.cpuMsPerMessage.natsServer} · ${r.cpuMsPerMessage.client}`,
  "relay NATS msgs/msg": r.mode === "jetstream" ? "" : r.natsMsgsPerMessage,
  "relay writes/msg": r.mode === "jetstream" ? "" : r.relayWritesPerMessage,
}));
console.table(rows);
if (scale.length) console.table(scale);
console.log(
  `${N} messages of ${messageBytes} bytes per run; relay peak RSS ${relayPeakRssMiB} MiB; node ${process.version}`,
);
mkdirSync(".bench", { recursive: true });
writeFileSync(
  ".bench/relay.json",
  `${JSON.stringify({ benchmark: "relay", date: new Date().toISOString(), node: process.version, messages: N, messageBytes, page: PAGE, results, scale, relayPeakRssMiB }, null, 2)}\n`,
);
console.log("written .bench/relay.json");
