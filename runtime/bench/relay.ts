// npm run bench:relay — publish→retrieve→ack through the relay over TLS (signed requests), next
// to raw JetStream publish + fetch + ack with the same client on the same nats-server, in the
// same run. Prints msgs/s and p99 latency; writes .bench/relay.json.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { HttpClient } from "../src/net/http-client.ts";
import { RelayClient } from "../src/relay/client.ts";
import { identity, peerOf, signed, tempDir, writeRelayManifest } from "../test/fixtures.ts";
import { peakRssMiB, percentile, round } from "./load.ts";

const N = Number(process.env.BENCH_MESSAGES ?? 2000);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "8,32").split(",").map(Number);
const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

interface Result {
  concurrency: number;
  messages: number;
  seconds: number;
  perSecond: number;
  p50ms: number;
  p99ms: number;
}

function summarize(concurrency: number, started: number, latencies: number[]): Result {
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return { concurrency, messages: latencies.length, seconds: round(seconds), perSecond: round(latencies.length / seconds), p50ms: round(percentile(latencies, 50)), p99ms: round(percentile(latencies, 99)) };
}

/** Publishers and a consumer running at once; latency is publish start → acknowledged. */
async function pipeline(concurrency: number, publish: (i: number) => Promise<string>, drain: (onAcked: (id: string) => void, done: () => boolean) => Promise<void>): Promise<Result> {
  const startedAt = new Map<string, number>();
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  const consumer = drain(
    (id) => {
      const t = startedAt.get(id);
      if (t !== undefined) latencies.push(performance.now() - t);
    },
    () => latencies.length >= N,
  );
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < N) {
        const i = next++;
        const t0 = performance.now();
        const id = await publish(i);
        if (!startedAt.has(id)) startedAt.set(id, t0);
      }
    }),
  );
  await consumer;
  return summarize(concurrency, started, latencies);
}

const nats = await startNats();
const tls = await localhostTls();
const alice = identity("alice-agent");
const bob = identity("bob-agent");
const text = "x".repeat(1500);
const results: { relay: Result[]; jetstream: Result[]; relayRssMiB?: number } = { relay: [], jetstream: [] };

// Raw JetStream with the same client: publish, fetch, ack.
{
  const nc = await connect({ servers: nats.url, noAsyncTraces: true });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  for (const c of CONCURRENCY) {
    const stream = `RAW_${c}`;
    await jsm.streams.add({ name: stream, subjects: [`raw.${c}.>`], duplicate_window: 120e9 });
    await jsm.consumers.add(stream, { durable_name: "bob", ack_policy: AckPolicy.Explicit });
    const consumer = await js.consumers.get(stream, "bob");
    const bodies = Array.from({ length: N }, () => signed(alice, "bob-agent", {}, text));
    results.jetstream.push(
      await pipeline(
        c,
        async (i) => {
          const m = bodies[i]!;
          await js.publish(`raw.${c}.bob`, JSON.stringify(m), { msgID: m.headers.message_id });
          return m.headers.message_id;
        },
        async (onAcked, done) => {
          while (!done()) {
            const batch = await consumer.fetch({ max_messages: 100, expires: 1000 });
            for await (const m of batch) {
              const id = (m.json() as { headers: { message_id: string } }).headers.message_id;
              await m.ackAck();
              onAcked(id);
            }
          }
        },
      ),
    );
  }
  await nc.close();
}

// Through the relay process: signed publish, pull, DELETE.
{
  const port = await freePort();
  const manifest = writeRelayManifest(tempDir("ifp-bench-"), { url: "https://relay.bench", agents: [peerOf(alice), peerOf(bob)], limits: { perAgentPerMinute: 10_000_000 } }, "bench-relay");
  const child: ChildProcess = spawn(process.execPath, [here("../bin/ifp-runtime.ts"), "relay", "--manifest", manifest, "--port", String(port), "--host", "127.0.0.1", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url], { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, IFP_LOG_LEVEL: "warn" } });
  const base = `https://localhost:${port}`;
  await waitFor("relay", async () => (await httpsRequest(`${base}/readyz`, { ca: tls.ca })).status === 200, 30_000, 200);
  const http = new HttpClient({ extraCa: tls.ca });
  const pub = new RelayClient(base, alice.signing, http);
  const sub = new RelayClient(base, bob.signing, http);
  for (const c of CONCURRENCY) {
    const bodies = Array.from({ length: N }, () => signed(alice, "bob-agent", {}, text));
    results.relay.push(
      await pipeline(
        c,
        async (i) => {
          const m = bodies[i]!;
          const res = await pub.publish(m);
          if (res.status !== 202) throw new Error(`publish answered ${res.status}: ${res.text}`);
          return m.headers.message_id;
        },
        async (onAcked, done) => {
          let after = 0;
          while (!done()) {
            const { messages, next } = await sub.pull({ limit: 100, after });
            if (!messages.length) {
              await new Promise((r) => setTimeout(r, 5));
              continue;
            }
            after = next ?? after;
            const queue = [...messages];
            await Promise.all(
              Array.from({ length: Math.min(c, queue.length) }, async () => {
                for (let m = queue.shift(); m; m = queue.shift()) {
                  await sub.ack(m.headers.message_id);
                  onAcked(m.headers.message_id);
                }
              }),
            );
          }
        },
      ),
    );
  }
  results.relayRssMiB = peakRssMiB(child.pid!);
  await http.close();
  await new Promise((r) => {
    child.once("exit", r);
    child.kill("SIGTERM");
  });
}
await nats.close();

const rows = CONCURRENCY.map((c, i) => {
  const r = results.relay[i]!;
  const j = results.jetstream[i]!;
  return {
    concurrency: c,
    "jetstream msgs/s": j.perSecond,
    "relay msgs/s": r.perSecond,
    "relay/jetstream": `${round((100 * r.perSecond) / j.perSecond, 0)}%`,
    "jetstream p50/p99 ms": `${j.p50ms} / ${j.p99ms}`,
    "relay p50/p99 ms": `${r.p50ms} / ${r.p99ms}`,
  };
});
console.table(rows);
console.log(`relay peak RSS ${results.relayRssMiB} MiB; ${N} messages of ~2 KB per run`);
mkdirSync(".bench", { recursive: true });
writeFileSync(".bench/relay.json", `${JSON.stringify({ benchmark: "relay", date: new Date().toISOString(), node: process.version, messages: N, results, summary: rows }, null, 2)}\n`);
console.log(JSON.stringify({ benchmark: "relay", summary: rows, relayPeakRssMiB: results.relayRssMiB }));
console.log("written .bench/relay.json");
