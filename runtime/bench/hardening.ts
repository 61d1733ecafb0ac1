// Bad input against the real runtimes: generated malformed, oversize, deeply nested, wrong-type,
// wrong-encoding, duplicate-key and tampered requests against the inbox and the relay's
// endpoints, each expected to get its documented 4xx; plus TLS 1.0/1.1 and plain HTTP refused.
// `npm run test:hardening` prints a table and writes hardening-results.json;
// IFP_HARDENING_REQUESTS sets the number of requests (default 10 000).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { Agent as HttpsAgent, request as httpsRequestRaw } from "node:https";
import { request as httpRequest } from "node:http";
import { connect as tlsConnect } from "node:tls";
import { fileURLToPath } from "node:url";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { identity, message, peerOf, signed, tempDir, writeAgentManifest, writeKey, writeRelayManifest } from "../test/fixtures.ts";
import { signRequest } from "../src/protocol/http-signatures.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export interface CaseResult {
  target: string;
  kind: string;
  expected: number;
  sent: number;
  statuses: Record<string, number>;
  unexpected: number;
}

export interface HardeningResult {
  requests: number;
  fiveXx: number;
  networkErrors: number;
  unexpected: number;
  crashes: number;
  rssMiB: { agent: { start: number; end: number }; relay: { start: number; end: number } };
  cases: CaseResult[];
  tls: { protocol: string; refused: boolean; how: string }[];
  durationS: number;
}

export function rssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Math.round(Number(m[1]) / 1024) : 0;
  } catch {
    return 0;
  }
}

export function send(agent: HttpsAgent, ca: string, url: string, method: string, headers: Record<string, string>, body?: Buffer | string, onErrorBody?: (body: string) => void): Promise<number> {
  return new Promise((resolve) => {
    const req = httpsRequestRaw(url, { method, headers, agent, ca, timeout: 30_000 }, (res) => {
      let text = "";
      if (onErrorBody && (res.statusCode ?? 0) >= 300) res.on("data", (d: Buffer) => (text += d.toString()));
      else res.resume();
      res.on("end", () => {
        if (onErrorBody && (res.statusCode ?? 0) >= 300) onErrorBody(text);
        resolve(res.statusCode ?? 0);
      });
      res.on("error", () => resolve(0));
    });
    req.on("error", () => resolve(0));
    req.on("timeout", () => req.destroy());
    req.end(body);
  });
}

export async function startRuntime(args: string[], readyUrl: string, ca: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [here("../bin/ifp-runtime.ts"), ...args], { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, IFP_LOG_LEVEL: "error" } });
  const agent = new HttpsAgent();
  await waitFor(`${args[0]} ready`, async () => (await send(agent, ca, readyUrl, "GET", {})) === 200, 60_000, 200);
  agent.destroy();
  return child;
}

/** Whether a TLS handshake limited to `version` is refused by the server at host:port. */
function tlsRefused(port: number, version: "TLSv1" | "TLSv1.1"): Promise<{ refused: boolean; how: string }> {
  // openssl s_client when the machine has it (Debian's refuses these versions itself at its default level; -tls1 asks anyway).
  const openssl = spawnSync("openssl", ["s_client", "-connect", `127.0.0.1:${port}`, version === "TLSv1" ? "-tls1" : "-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"], { input: "", timeout: 10_000, encoding: "utf8" });
  const viaOpenssl = openssl.error ? undefined : !/Cipher is (?!\(NONE\))/.test(openssl.stdout);
  // And Node's client, offering only that version: both must fail to complete a handshake.
  return new Promise((resolve) => {
    const done = (nodeRefused: boolean, detail: string) =>
      resolve({
        refused: nodeRefused && viaOpenssl !== false,
        how: `${viaOpenssl === undefined ? "openssl absent" : `openssl s_client ${viaOpenssl ? "refused" : "HANDSHAKE DONE"}`}; node tls ${detail}`,
      });
    const s = tlsConnect({ host: "127.0.0.1", port, minVersion: version, maxVersion: version, rejectUnauthorized: false, ciphers: "DEFAULT:@SECLEVEL=0" });
    s.once("secureConnect", () => {
      s.destroy();
      done(false, "HANDSHAKE DONE");
    });
    s.once("error", (e) => done(true, `refused (${e.message.slice(0, 50)})`));
  });
}

function plainHttpRefused(port: number): Promise<{ refused: boolean; how: string }> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: "127.0.0.1", port, path: "/.well-known/agent/identity", timeout: 5_000 }, (res) => {
      res.resume();
      // An answer over plain HTTP would be a protocol served without TLS.
      resolve({ refused: false, how: `answered ${res.statusCode}` });
    });
    req.on("error", (e) => resolve({ refused: true, how: `no HTTP answer (${e.message.slice(0, 40)})` }));
    req.on("timeout", () => {
      req.destroy();
      resolve({ refused: true, how: "no HTTP answer (timeout)" });
    });
    req.end();
  });
}

export async function runHardening(opts: { requests?: number; concurrency?: number } = {}): Promise<HardeningResult> {
  const total = opts.requests ?? 10_000;
  const concurrency = opts.concurrency ?? 16;
  const started = Date.now();
  const nats = await startNats();
  const tls = await localhostTls();
  const dir = tempDir("ifp-hardening-");
  const sender = identity("hardening-sender");
  const stranger = identity("hardening-stranger");
  const self = identity("hardening-agent");
  const [agentPort, relayPort] = await Promise.all([freePort(), freePort()]);
  const limits = { perSenderPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perSenderBytesPerHour: 1 << 30 };
  const agentManifest = writeAgentManifest(dir, { agentId: self.agentId, peers: [peerOf(sender)], inbox: { maxMessageBytes: 8192, rateLimit: limits } }, "agent");
  const relayUrl = `https://localhost:${relayPort}`;
  const relayManifest = writeRelayManifest(dir, { url: relayUrl, agents: [peerOf(sender), peerOf(self)], limits: { maxMessageBytes: 8192, perAgentPerMinute: 10_000_000, perAddressPerMinute: 10_000_000, perAgentBytesPerHour: 1 << 30 } }, "relay");
  const common = ["--host", "127.0.0.1", "--metrics-port", "0", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url];
  const agentBase = `https://localhost:${agentPort}`;
  const agentProc = await startRuntime(["agent", "--manifest", agentManifest, "--port", String(agentPort), "--signing-key", writeKey(dir, self), "--local-api-port", "0", ...common], `${agentBase}/readyz`, tls.ca);
  const relayProc = await startRuntime(["relay", "--manifest", relayManifest, "--port", String(relayPort), ...common], `${relayUrl}/readyz`, tls.ca);
  const crashes = () => [agentProc, relayProc].filter((p) => p.exitCode !== null || p.signalCode !== null).length;
  const rss = { agent: { start: rssMiB(agentProc.pid!), end: 0 }, relay: { start: rssMiB(relayProc.pid!), end: 0 } };

  const inbox = `${agentBase}/.well-known/agent/inbox`;
  const json = { "content-type": "application/json" };
  const valid = () => JSON.stringify(signed(sender, self.agentId, {}, "hi"));
  const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
  const signedRelay = async (method: string, path: string, body?: string, who = sender) => {
    const url = `${relayUrl}${path}`;
    const headers = await signRequest({ method, url, body, headers: body ? json : {} }, who.signing);
    return { url, headers, body };
  };

  type Gen = () => Promise<{ url: string; method: string; headers: Record<string, string>; body?: string | Buffer }>;
  const cases: { target: string; kind: string; expected: number; gen: Gen }[] = [
    { target: "inbox", kind: "malformed JSON", expected: 400, gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().slice(0, 40 + Math.floor(Math.random() * 40)) }) },
    { target: "inbox", kind: "wrong media type", expected: 415, gen: async () => ({ url: inbox, method: "POST", headers: { "content-type": "text/plain" }, body: valid() }) },
    { target: "inbox", kind: "oversize", expected: 413, gen: async () => ({ url: inbox, method: "POST", headers: json, body: JSON.stringify(message(sender.agentId, self.agentId, {}, "x".repeat(9000))) }) },
    { target: "inbox", kind: "deeply nested", expected: 400, gen: async () => ({ url: inbox, method: "POST", headers: json, body: `{"ifp":4,"headers":${deep(3000)}}` }) },
    { target: "inbox", kind: "wrong type", expected: 400, gen: async () => ({ url: inbox, method: "POST", headers: json, body: JSON.stringify({ ...JSON.parse(valid()), headers: 42 }) }) },
    { target: "inbox", kind: "wrong encoding (lone surrogate)", expected: 400, gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().replace('"hi"', '"\\ud800"') }) },
    { target: "inbox", kind: "wrong encoding (invalid UTF-8)", expected: 400, gen: async () => ({ url: inbox, method: "POST", headers: json, body: Buffer.concat([Buffer.from('{"ifp":4,"x":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}')]) }) },
    { target: "inbox", kind: "duplicate key (changes a signed value)", expected: 401, gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().replace('"date":', '"message_id":"msg:duplicate-key","date":') }) },
    { target: "inbox", kind: "tampered body", expected: 401, gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().replace('"hi"', '"hj"') }) },
    { target: "inbox", kind: "unknown sender", expected: 401, gen: async () => ({ url: inbox, method: "POST", headers: json, body: JSON.stringify(signed(stranger, self.agentId)) }) },
    { target: "relay publish", kind: "unsigned", expected: 401, gen: async () => ({ url: `${relayUrl}/relay/publish`, method: "POST", headers: json, body: valid() }) },
    { target: "relay publish", kind: "malformed JSON (signed)", expected: 400, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish", '{"ifp":4,')) }) },
    { target: "relay publish", kind: "deeply nested (signed)", expected: 400, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish", `{"ifp":4,"headers":${deep(3000)}}`)) }) },
    { target: "relay publish", kind: "oversize", expected: 413, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish", JSON.stringify(message(sender.agentId, self.agentId, {}, "x".repeat(9000))))) }) },
    { target: "relay publish", kind: "tampered (body after signing)", expected: 401, gen: async () => { const r = await signedRelay("POST", "/relay/publish", valid()); return { ...r, method: "POST", body: r.body!.replace('"hi"', '"hj"') }; } },
    { target: "relay messages", kind: "unsigned", expected: 401, gen: async () => ({ url: `${relayUrl}/relay/messages`, method: "GET", headers: {} }) },
    { target: "relay messages", kind: "signature for another relay", expected: 401, gen: async () => { const h = await signRequest({ method: "GET", url: "https://other-relay.example/relay/messages" }, sender.signing); return { url: `${relayUrl}/relay/messages`, method: "GET", headers: h }; } },
    { target: "relay ack", kind: "wrong type (signed)", expected: 400, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/messages/ack", '{"message_ids":7}')) }) },
    { target: "relay subscribe", kind: "wrong type (signed)", expected: 400, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/subscribe", '{"subscribe":{"topics":"x"}}')) }) },
    { target: "relay subscribe", kind: "webhook on link-local (signed)", expected: 400, gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/subscribe", '{"push":{"webhook":"https://169.254.169.254/x"}}')) }) },
    { target: "relay events", kind: "unsigned", expected: 401, gen: async () => ({ url: `${relayUrl}/relay/events`, method: "GET", headers: {} }) },
    { target: "relay dead-letters", kind: "unsigned", expected: 401, gen: async () => ({ url: `${relayUrl}/relay/dead-letters`, method: "GET", headers: {} }) },
  ];
  const results: CaseResult[] = cases.map((c) => ({ target: c.target, kind: c.kind, expected: c.expected, sent: 0, statuses: {}, unexpected: 0 }));
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const c = i % cases.length;
        const r = await cases[c]!.gen();
        const status = await send(agent, tls.ca, r.url, r.method, r.headers, r.body);
        const res = results[c]!;
        res.sent++;
        res.statuses[status] = (res.statuses[status] ?? 0) + 1;
        if (status !== res.expected) res.unexpected++;
      }
    }),
  );
  agent.destroy();
  rss.agent.end = rssMiB(agentProc.pid!);
  rss.relay.end = rssMiB(relayProc.pid!);
  const tlsResults = [];
  for (const [name, port] of [["inbox", agentPort], ["relay", relayPort]] as const) {
    for (const v of ["TLSv1", "TLSv1.1"] as const) tlsResults.push({ protocol: `${name} ${v}`, ...(await tlsRefused(port, v)) });
    tlsResults.push({ protocol: `${name} plain HTTP`, ...(await plainHttpRefused(port)) });
  }
  const crashed = crashes();
  for (const p of [agentProc, relayProc]) p.kill("SIGTERM");
  await nats.close();
  const sum = (f: (r: CaseResult) => number) => results.reduce((a, r) => a + f(r), 0);
  return {
    requests: sum((r) => r.sent),
    fiveXx: sum((r) => Object.entries(r.statuses).filter(([s]) => Number(s) >= 500).reduce((a, [, n]) => a + n, 0)),
    networkErrors: sum((r) => r.statuses["0"] ?? 0),
    unexpected: sum((r) => r.unexpected),
    crashes: crashed,
    rssMiB: rss,
    cases: results,
    tls: tlsResults,
    durationS: Math.round((Date.now() - started) / 100) / 10,
  };
}

export function table(r: HardeningResult): string {
  const lines = [
    "target              | kind                                   | expected | sent | statuses                 | unexpected",
    "--------------------|----------------------------------------|----------|------|--------------------------|-----------",
    ...r.cases.map((c) => `${c.target.padEnd(19)} | ${c.kind.padEnd(38)} | ${String(c.expected).padEnd(8)} | ${String(c.sent).padStart(4)} | ${JSON.stringify(c.statuses).padEnd(24)} | ${c.unexpected}`),
    "",
    ...r.tls.map((t) => `${t.protocol.padEnd(20)} ${t.refused ? "refused" : "ACCEPTED"}  (${t.how})`),
    "",
    `requests ${r.requests}, 5xx ${r.fiveXx}, network errors ${r.networkErrors}, unexpected status ${r.unexpected}, crashes ${r.crashes}, ` +
      `RSS agent ${r.rssMiB.agent.start}→${r.rssMiB.agent.end} MiB, relay ${r.rssMiB.relay.start}→${r.rssMiB.relay.end} MiB, ${r.durationS} s`,
  ];
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await runHardening({ requests: Number(process.env.IFP_HARDENING_REQUESTS ?? 10_000) });
  process.stdout.write(`${table(result)}\n`);
  writeFileSync("hardening-results.json", `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write("wrote hardening-results.json\n");
  process.exitCode = result.fiveXx || result.crashes || result.unexpected || result.tls.some((t) => !t.refused) ? 1 : 0;
}
