// npm run bench:inbox — drives the agent inbox over TLS with signed 2 KB messages at several
// concurrencies and prints accepted msgs/s, p50/p99 latency and the runtime's peak RSS, next to
// a bare fastify HTTPS POST handler measured in the same run. Results: .bench/inbox.json.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { identity, peerOf, signed, tempDir, writeAgentManifest, writeKey } from "../test/fixtures.ts";
import { peakRssMiB, postLoad, round, type LoadResult } from "./load.ts";

const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,8,32,64").split(",").map(Number);
const PER_LEVEL = Number(process.env.BENCH_MESSAGES ?? 3000);
const SENDERS = 16;
const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

async function startProcess(args: string[], readyUrl: string, ca: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, args, { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, IFP_LOG_LEVEL: "warn" } });
  await waitFor(`${args[0]} to listen`, async () => {
    const res = await httpsRequest(readyUrl, { ca, method: readyUrl.endsWith("inbox") ? "POST" : "GET", headers: { "content-type": "application/json" }, body: "{}" });
    return res.status > 0 && res.status !== 503;
  }, 30_000, 200);
  return child;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (child.exitCode !== null) return r();
    child.once("exit", () => r());
    child.kill("SIGTERM");
  });
}

const nats = await startNats();
const tls = await localhostTls();
const dir = tempDir("ifp-bench-");
const senders = Array.from({ length: SENDERS }, (_, i) => identity(`sender-${i}`));
const self = identity("bench-agent");
const manifest = writeAgentManifest(dir, {
  agentId: "bench-agent",
  capabilities: [{ name: "message.receive", description: "Accept IFP-4 structured messages" }],
  peers: senders.map(peerOf),
  inbox: { rateLimit: { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000 } },
});

/** Signed messages of about 2 KB each, made before the clock starts. */
function messages(n: number): Buffer[] {
  const text = "x".repeat(1500);
  return Array.from({ length: n }, (_, i) => Buffer.from(JSON.stringify(signed(senders[i % SENDERS]!, "bench-agent", {}, text))));
}

const sample = messages(1)[0]!;
process.stderr.write(`message size ${sample.length} bytes; ${PER_LEVEL} messages per level; concurrency ${CONCURRENCY.join(", ")}\n`);

const results: { bare: LoadResult[]; inbox: LoadResult[]; rssMiB: { bare?: number; inbox?: number } } = { bare: [], inbox: [], rssMiB: {} };

// Bare fastify baseline.
{
  const port = await freePort();
  const url = `https://localhost:${port}/.well-known/agent/inbox`;
  const child = await startProcess([here("./bare-server.ts"), tls.files.cert, tls.files.key, String(port)], url, tls.ca);
  for (const c of CONCURRENCY) results.bare.push(await postLoad(url, messages(PER_LEVEL), c, tls.ca));
  results.rssMiB.bare = peakRssMiB(child.pid!);
  await stop(child);
}

// The full inbox: schema, signature verification, rate limits, JetStream persistence.
{
  const port = await freePort();
  const base = `https://localhost:${port}`;
  const child = await startProcess(
    [here("../bin/ifp-runtime.ts"), "agent", "--manifest", manifest, "--port", String(port), "--host", "127.0.0.1", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--signing-key", writeKey(dir, self), "--nats", nats.url, "--local-api-port", "0"],
    `${base}/readyz`,
    tls.ca,
  );
  for (const c of CONCURRENCY) results.inbox.push(await postLoad(`${base}/.well-known/agent/inbox`, messages(PER_LEVEL), c, tls.ca));
  results.rssMiB.inbox = peakRssMiB(child.pid!);
  await stop(child);
}
await nats.close();

const rows = CONCURRENCY.map((c, i) => {
  const b = results.bare[i]!;
  const f = results.inbox[i]!;
  return {
    concurrency: c,
    "bare msgs/s": b.perSecond,
    "inbox msgs/s": f.perSecond,
    "inbox/bare": `${round((100 * f.perSecond) / b.perSecond, 0)}%`,
    "bare p50/p99 ms": `${b.p50ms} / ${b.p99ms}`,
    "inbox p50/p99 ms": `${f.p50ms} / ${f.p99ms}`,
    "inbox errors": f.errors,
  };
});
console.table(rows);
console.log(`peak RSS: runtime ${results.rssMiB.inbox} MiB, bare fastify ${results.rssMiB.bare} MiB`);
const out = {
  benchmark: "inbox",
  date: new Date().toISOString(),
  node: process.version,
  messageBytes: sample.length,
  messagesPerLevel: PER_LEVEL,
  results,
  summary: rows,
};
mkdirSync(".bench", { recursive: true });
writeFileSync(".bench/inbox.json", JSON.stringify(out, null, 2) + "\n");
console.log(JSON.stringify({ benchmark: "inbox", summary: rows, peakRssMiB: results.rssMiB }));
console.log("written .bench/inbox.json");
