// Bad input against the real runtimes: generated malformed, oversize, deeply nested, wrong-type,
// wrong-encoding, duplicate-key and tampered requests against the inbox and the relay's
// endpoints, bad WebSocket upgrades and malformed frames on the relay's WebSocket, each expected
// to get its documented 4xx and error body {status: "error", code, message} (on an open
// WebSocket: the error frame, or the close code the protocol gives); plus TLS 1.0/1.1 and plain
// HTTP refused.
// `npm run test:hardening` prints a table and writes hardening-results.json;
// IFP_HARDENING_REQUESTS sets the number of requests (default 10 000).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { Agent as HttpsAgent, request as httpsRequestRaw } from "node:https";
import { request as httpRequest } from "node:http";
import { connect as tlsConnect } from "node:tls";
import { fileURLToPath } from "node:url";
import { startNats } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import {
  identity,
  message,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../test/support/fixtures.ts";
import { signRequest } from "../src/protocol/http-signatures.ts";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export interface CaseResult {
  target: string;
  kind: string;
  expected: number;
  /** The documented error code (the body's, or the error frame's), or the WebSocket close code ("close 1002"). */
  code: string;
  sent: number;
  statuses: Record<string, number>;
  unexpected: number;
  /** Answers with the expected status but not the documented body (or frame, or close code), and the first few. */
  wrongBody: number;
  wrongBodySamples: string[];
}

export interface HardeningResult {
  requests: number;
  fiveXx: number;
  networkErrors: number;
  unexpected: number;
  wrongBodies: number;
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

export function send(
  agent: HttpsAgent,
  ca: string,
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: Buffer | string,
  onErrorBody?: (body: string) => void,
): Promise<number> {
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

/** An answer: its status (0: none), content type and body (at most 64 KiB kept). */
export interface Answer {
  status: number;
  contentType?: string;
  /** The body; for a WebSocket that opened (101), the first frame the relay answered with. */
  body: string;
  /** The code of the close frame the relay sent on an open WebSocket, if it closed it. */
  closeCode?: number;
}

const MAX_KEPT = 64 * 1024;

/** One HTTPS request, with the answer's body. */
export function answer(
  agent: HttpsAgent,
  ca: string,
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: Buffer | string,
): Promise<Answer> {
  return new Promise((resolve) => {
    const req = httpsRequestRaw(url, { method, headers, agent, ca, timeout: 30_000 }, (res) => {
      let text = "";
      res.on("data", (d: Buffer) => {
        if (text.length < MAX_KEPT) text += d.toString();
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, contentType: res.headers["content-type"], body: text }),
      );
      res.on("error", () => resolve({ status: 0, body: "" }));
    });
    req.on("error", () => resolve({ status: 0, body: "" }));
    req.on("timeout", () => req.destroy());
    req.end(body);
  });
}

/** A client frame (masked, as RFC 6455 requires of clients, unless `masked` is false). */
function clientFrame(opcode: number, payload: Buffer, masked = true): Buffer {
  const n = payload.length;
  const length = Buffer.alloc(n < 126 ? 1 : n < 65536 ? 3 : 9);
  if (n < 126) length[0] = n;
  else if (n < 65536) {
    length[0] = 126;
    length.writeUInt16BE(n, 1);
  } else {
    length[0] = 127;
    length.writeBigUInt64BE(BigInt(n), 1);
  }
  if (masked) length[0]! |= 0x80;
  const head = Buffer.concat([Buffer.from([0x80 | opcode]), length]);
  if (!masked) return Buffer.concat([head, payload]);
  const mask = randomBytes(4);
  return Buffer.concat([head, mask, Buffer.from(payload.map((b, i) => b ^ mask[i % 4]!))]);
}

/** A server frame at the start of `b` (unmasked), or undefined until all of it is there. */
function serverFrame(b: Buffer): { opcode: number; payload: Buffer; size: number } | undefined {
  if (b.length < 2) return undefined;
  let n = b[1]! & 0x7f;
  let at = 2;
  if (n === 126) {
    if (b.length < 4) return undefined;
    n = b.readUInt16BE(2);
    at = 4;
  } else if (n === 127) {
    if (b.length < 10) return undefined;
    n = Number(b.readBigUInt64BE(2));
    at = 10;
  }
  if (b.length < at + n) return undefined;
  return { opcode: b[0]! & 0x0f, payload: b.subarray(at, at + n), size: at + n };
}

/**
 * A WebSocket upgrade to `url`, written by hand over TLS with `headers` (the request signature)
 * and the handshake fields (`handshake` replaces them), and once it is open `frames` written as
 * they are (so that frames the protocol forbids can be sent). The answer: a refused upgrade's
 * status and body; or 101 and the first frame the relay answered with (a message copy aside),
 * or the code it closed the WebSocket with.
 */
export function wsExchange(
  url: string,
  ca: string,
  headers: Record<string, string>,
  frames: Buffer[],
  handshake: Record<string, string> = {},
): Promise<Answer> {
  return new Promise((resolve) => {
    const u = new URL(url);
    const socket = tlsConnect({ host: "127.0.0.1", port: Number(u.port), servername: u.hostname, ca });
    let buf = Buffer.alloc(0);
    let head: string | undefined;
    let status = 0;
    let contentType: string | undefined;
    let settled = false;
    const done = (a: Answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(a);
      // An open WebSocket is closed properly (1000); anything else just dropped.
      if (status === 101 && a.closeCode === undefined && socket.writable) {
        socket.end(clientFrame(0x8, Buffer.from([0x03, 0xe8])));
        setTimeout(() => socket.destroy(), 2000).unref();
      } else socket.destroy();
    };
    const timer = setTimeout(() => done({ status, contentType, body: "(no answer within 30 s)" }), 30_000);
    socket.on("error", () => {});
    socket.on("close", () =>
      done({
        status,
        contentType,
        body: head === undefined || status === 101 ? "" : buf.subarray(0, MAX_KEPT).toString(),
      }),
    );
    socket.once("secureConnect", () => {
      const fields: Record<string, string> = {
        host: u.host,
        upgrade: "websocket",
        connection: "Upgrade",
        "sec-websocket-key": randomBytes(16).toString("base64"),
        "sec-websocket-version": "13",
        ...headers,
        ...handshake,
      };
      socket.write(
        `GET ${u.pathname}${u.search} HTTP/1.1\r\n${Object.entries(fields)
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join("")}\r\n`,
      );
    });
    socket.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (head === undefined) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        head = buf.subarray(0, end).toString("latin1");
        buf = buf.subarray(end + 4);
        status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
        contentType = /\r\ncontent-type:[ \t]*([^\r\n]*)/i.exec(head)?.[1];
        if (status === 101) for (const f of frames) socket.write(f);
      }
      // A refused upgrade's body: until the relay closes the connection.
      if (status !== 101) return;
      for (let f = serverFrame(buf); f; f = serverFrame(buf)) {
        buf = buf.subarray(f.size);
        if (f.opcode === 0x8)
          return done({ status, body: "", closeCode: f.payload.length >= 2 ? f.payload.readUInt16BE(0) : 1005 });
        const text = f.payload.toString();
        if (f.opcode === 0x1 && !text.startsWith('{"type":"message"')) return done({ status, body: text });
      }
    });
  });
}

/** What the documented answer of a case is: an error body, an error frame on the open WebSocket, or a close code. */
type Documented = { body: string } | { frame: string } | { close: number };

/** Why `a` is not the documented answer `doc` (undefined when it is). */
function bodyProblem(doc: Documented, a: Answer): string | undefined {
  if ("close" in doc)
    return a.closeCode === doc.close ? undefined : `closed with ${a.closeCode ?? "no close frame"}, not ${doc.close}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(a.body);
  } catch {
    return `not JSON: ${a.body.slice(0, 160)}`;
  }
  const b = (parsed ?? {}) as Record<string, unknown>;
  const keys = Object.keys(b).sort().join(",");
  // An error body is {status: "error", code, message}; an error frame {type: "error", status: 400, code, message}.
  const frame = "frame" in doc;
  const code = frame ? doc.frame : doc.body;
  const [field, value] = frame ? ["type", "error"] : ["status", "error"];
  const fields = frame ? ["code", "message", "status", "type"] : ["code", "message", "status"];
  if (
    b[field] !== value ||
    b.code !== code ||
    typeof b.message !== "string" ||
    !b.message ||
    keys !== fields.join(",") ||
    (frame && b.status !== 400)
  ) {
    return `not {${field}: "${value}",${frame ? " status: 400," : ""} code: "${code}", message}: ${a.body.slice(0, 160)}`;
  }
  if ("body" in doc && !/^application\/json\b/.test(a.contentType ?? ""))
    return `content-type ${a.contentType ?? "(none)"}`;
  return undefined;
}

export async function startRuntime(args: string[], readyUrl: string, ca: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [here("../bin/ifp-runtime.ts"), ...args], {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, IFP_LOG_LEVEL: "error" },
  });
  const agent = new HttpsAgent();
  await waitFor(`${args[0]} ready`, async () => (await send(agent, ca, readyUrl, "GET", {})) === 200, 60_000, 200);
  agent.destroy();
  return child;
}

/** Whether a TLS handshake limited to `version` is refused by the server at host:port. */
function tlsRefused(port: number, version: "TLSv1" | "TLSv1.1"): Promise<{ refused: boolean; how: string }> {
  // openssl s_client when the machine has it (Debian's refuses these versions itself at its default level; -tls1 asks anyway).
  const openssl = spawnSync(
    "openssl",
    [
      "s_client",
      "-connect",
      `127.0.0.1:${port}`,
      version === "TLSv1" ? "-tls1" : "-tls1_1",
      "-cipher",
      "DEFAULT:@SECLEVEL=0",
    ],
    { input: "", timeout: 10_000, encoding: "utf8" },
  );
  const viaOpenssl = openssl.error ? undefined : !/Cipher is (?!\(NONE\))/.test(openssl.stdout);
  // And Node's client, offering only that version: both must fail to complete a handshake.
  return new Promise((resolve) => {
    const done = (nodeRefused: boolean, detail: string) =>
      resolve({
        refused: nodeRefused && viaOpenssl !== false,
        how: `${viaOpenssl === undefined ? "openssl absent" : `openssl s_client ${viaOpenssl ? "refused" : "HANDSHAKE DONE"}`}; node tls ${detail}`,
      });
    const s = tlsConnect({
      host: "127.0.0.1",
      port,
      minVersion: version,
      maxVersion: version,
      rejectUnauthorized: false,
      ciphers: "DEFAULT:@SECLEVEL=0",
    });
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
  const agentManifest = writeAgentManifest(
    dir,
    { agentId: self.agentId, peers: [peerOf(sender)], inbox: { maxMessageBytes: 8192, rateLimit: limits } },
    "agent",
  );
  const relayUrl = `https://localhost:${relayPort}`;
  // Streams per agent raised: WebSocket cases of one signer run side by side.
  const relayManifest = writeRelayManifest(
    dir,
    {
      url: relayUrl,
      agents: [peerOf(sender), peerOf(self)],
      limits: {
        maxMessageBytes: 8192,
        perAgentPerMinute: 10_000_000,
        perAddressPerMinute: 10_000_000,
        perAgentBytesPerHour: 1 << 30,
        maxStreamsPerAgent: 100,
      },
    },
    "relay",
  );
  const common = [
    "--host",
    "127.0.0.1",
    "--metrics-port",
    "0",
    "--tls-cert",
    tls.files.cert,
    "--tls-key",
    tls.files.key,
    "--nats",
    nats.url,
  ];
  const agentBase = `https://localhost:${agentPort}`;
  const agentProc = await startRuntime(
    [
      "agent",
      "--manifest",
      agentManifest,
      "--port",
      String(agentPort),
      "--signing-key",
      writeKey(dir, self),
      "--local-api-port",
      "0",
      ...common,
    ],
    `${agentBase}/readyz`,
    tls.ca,
  );
  const relayProc = await startRuntime(
    ["relay", "--manifest", relayManifest, "--port", String(relayPort), ...common],
    `${relayUrl}/readyz`,
    tls.ca,
  );
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
  const httpCases: { target: string; kind: string; expected: number; code: string; gen: Gen }[] = [
    {
      target: "inbox",
      kind: "malformed JSON",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: valid().slice(0, 40 + Math.floor(Math.random() * 40)),
      }),
    },
    {
      target: "inbox",
      kind: "wrong media type",
      expected: 415,
      code: "unsupported_media_type",
      gen: async () => ({ url: inbox, method: "POST", headers: { "content-type": "text/plain" }, body: valid() }),
    },
    {
      target: "inbox",
      kind: "oversize",
      expected: 413,
      code: "payload_too_large",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: JSON.stringify(message(sender.agentId, self.agentId, {}, "x".repeat(9000))),
      }),
    },
    {
      target: "inbox",
      kind: "deeply nested",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ url: inbox, method: "POST", headers: json, body: `{"ifp":4,"headers":${deep(3000)}}` }),
    },
    {
      target: "inbox",
      kind: "wrong type",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: JSON.stringify({ ...JSON.parse(valid()), headers: 42 }),
      }),
    },
    {
      target: "inbox",
      kind: "wrong encoding (lone surrogate)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().replace('"hi"', '"\\ud800"') }),
    },
    {
      target: "inbox",
      kind: "wrong encoding (invalid UTF-8)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: Buffer.concat([Buffer.from('{"ifp":4,"x":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}')]),
      }),
    },
    {
      target: "inbox",
      kind: "duplicate key (changes a signed value)",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: valid().replace('"date":', '"message_id":"msg:duplicate-key","date":'),
      }),
    },
    {
      target: "inbox",
      kind: "tampered body",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({ url: inbox, method: "POST", headers: json, body: valid().replace('"hi"', '"hj"') }),
    },
    {
      target: "inbox",
      kind: "unknown sender",
      expected: 401,
      code: "unknown_sender",
      gen: async () => ({
        url: inbox,
        method: "POST",
        headers: json,
        body: JSON.stringify(signed(stranger, self.agentId)),
      }),
    },
    {
      target: "relay publish",
      kind: "unsigned",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({ url: `${relayUrl}/relay/publish`, method: "POST", headers: json, body: valid() }),
    },
    {
      target: "relay publish",
      kind: "malformed JSON (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish", '{"ifp":4,')) }),
    },
    {
      target: "relay publish",
      kind: "deeply nested (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        method: "POST",
        ...(await signedRelay("POST", "/relay/publish", `{"ifp":4,"headers":${deep(3000)}}`)),
      }),
    },
    {
      target: "relay publish",
      kind: "oversize",
      expected: 413,
      code: "payload_too_large",
      gen: async () => ({
        method: "POST",
        ...(await signedRelay(
          "POST",
          "/relay/publish",
          JSON.stringify(message(sender.agentId, self.agentId, {}, "x".repeat(9000))),
        )),
      }),
    },
    {
      target: "relay publish",
      kind: "tampered (body after signing)",
      expected: 401,
      code: "invalid_signature",
      gen: async () => {
        const r = await signedRelay("POST", "/relay/publish", valid());
        return { ...r, method: "POST", body: r.body!.replace('"hi"', '"hj"') };
      },
    },
    {
      target: "relay publish batch",
      kind: "unsigned",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({
        url: `${relayUrl}/relay/publish/batch`,
        method: "POST",
        headers: json,
        body: `{"messages":[${valid()}]}`,
      }),
    },
    {
      target: "relay publish batch",
      kind: "malformed JSON (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        method: "POST",
        ...(await signedRelay("POST", "/relay/publish/batch", '{"messages":[{"ifp":4,')),
      }),
    },
    {
      target: "relay publish batch",
      kind: "wrong type (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish/batch", '{"messages":7}')) }),
    },
    {
      target: "relay publish batch",
      kind: "empty (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/publish/batch", '{"messages":[]}')) }),
    },
    {
      target: "relay publish batch",
      kind: "tampered (body after signing)",
      expected: 401,
      code: "invalid_signature",
      gen: async () => {
        const r = await signedRelay("POST", "/relay/publish/batch", `{"messages":[${valid()}]}`);
        return { ...r, method: "POST", body: r.body!.replace('"hi"', '"hj"') };
      },
    },
    {
      target: "relay messages",
      kind: "unsigned",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({ url: `${relayUrl}/relay/messages`, method: "GET", headers: {} }),
    },
    {
      target: "relay messages",
      kind: "signature for another relay",
      expected: 401,
      code: "invalid_signature",
      gen: async () => {
        const h = await signRequest(
          { method: "GET", url: "https://other-relay.example/relay/messages" },
          sender.signing,
        );
        return { url: `${relayUrl}/relay/messages`, method: "GET", headers: h };
      },
    },
    {
      target: "relay ack",
      kind: "wrong type (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({ method: "POST", ...(await signedRelay("POST", "/relay/messages/ack", '{"message_ids":7}')) }),
    },
    {
      target: "relay subscribe",
      kind: "wrong type (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        method: "POST",
        ...(await signedRelay("POST", "/relay/subscribe", '{"subscribe":{"topics":"x"}}')),
      }),
    },
    {
      target: "relay subscribe",
      kind: "webhook on link-local (signed)",
      expected: 400,
      code: "invalid_format",
      gen: async () => ({
        method: "POST",
        ...(await signedRelay("POST", "/relay/subscribe", '{"push":{"webhook":"https://169.254.169.254/x"}}')),
      }),
    },
    {
      target: "relay events",
      kind: "unsigned",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({ url: `${relayUrl}/relay/events`, method: "GET", headers: {} }),
    },
    {
      target: "relay dead-letters",
      kind: "unsigned",
      expected: 401,
      code: "invalid_signature",
      gen: async () => ({ url: `${relayUrl}/relay/dead-letters`, method: "GET", headers: {} }),
    },
  ];
  // The relay's WebSocket: bad upgrades (answered like any refused request), then malformed
  // frames on an open one (the error frame of docs/relay.md, or the close code RFC 6455 gives).
  const ws = `${relayUrl}/relay/ws`;
  const signedWs = (url = ws) => signRequest({ method: "GET", url }, sender.signing);
  const text = (s: string) => clientFrame(0x1, Buffer.from(s));
  type Case = {
    target: string;
    kind: string;
    expected: number;
    code: string;
    doc: Documented;
    run: (agent: HttpsAgent) => Promise<Answer>;
  };
  const wsCases: Case[] = [
    {
      target: "relay ws",
      kind: "upgrade unsigned",
      expected: 401,
      code: "invalid_signature",
      doc: { body: "invalid_signature" },
      run: () => wsExchange(ws, tls.ca, {}, []),
    },
    {
      target: "relay ws",
      kind: "upgrade signed for another relay",
      expected: 401,
      code: "invalid_signature",
      doc: { body: "invalid_signature" },
      run: async () => wsExchange(ws, tls.ca, await signedWs("https://other-relay.example/relay/ws"), []),
    },
    {
      target: "relay ws",
      kind: "upgrade on another path",
      expected: 404,
      code: "not_found",
      doc: { body: "not_found" },
      run: async () => wsExchange(`${relayUrl}/relay/websocket`, tls.ca, {}, []),
    },
    {
      target: "relay ws",
      kind: "upgrade with a bad key (signed)",
      expected: 400,
      code: "invalid_format",
      doc: { body: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [], { "sec-websocket-key": "not-a-key" }),
    },
    {
      target: "relay ws",
      kind: "upgrade with version 12 (signed)",
      expected: 400,
      code: "invalid_format",
      doc: { body: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [], { "sec-websocket-version": "12" }),
    },
    {
      target: "relay ws",
      kind: "frame not JSON",
      expected: 101,
      code: "invalid_format",
      doc: { frame: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [text('{"type":"ack",')]),
    },
    {
      target: "relay ws",
      kind: "ack of wrong type",
      expected: 101,
      code: "invalid_format",
      doc: { frame: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [text('{"type":"ack","message_id":7}')]),
    },
    {
      target: "relay ws",
      kind: "unknown frame type",
      expected: 101,
      code: "invalid_format",
      doc: { frame: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [text('{"type":"nack","message_id":"m"}')]),
    },
    {
      target: "relay ws",
      kind: "binary frame",
      expected: 101,
      code: "invalid_format",
      doc: { frame: "invalid_format" },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [clientFrame(0x2, randomBytes(32))]),
    },
    {
      target: "relay ws",
      kind: "unmasked frame",
      expected: 101,
      code: "close 1002",
      doc: { close: 1002 },
      run: async () =>
        wsExchange(ws, tls.ca, await signedWs(), [
          clientFrame(0x1, Buffer.from('{"type":"ack","message_id":"m"}'), false),
        ]),
    },
    {
      target: "relay ws",
      kind: "reserved opcode",
      expected: 101,
      code: "close 1002",
      doc: { close: 1002 },
      run: async () => wsExchange(ws, tls.ca, await signedWs(), [clientFrame(0x3, Buffer.from("x"))]),
    },
    {
      target: "relay ws",
      kind: "text not UTF-8",
      expected: 101,
      code: "close 1007",
      doc: { close: 1007 },
      run: async () =>
        wsExchange(ws, tls.ca, await signedWs(), [clientFrame(0x1, Buffer.from([0x7b, 0xc3, 0x28, 0xff, 0x7d]))]),
    },
    {
      target: "relay ws",
      kind: "frame over maxMessageBytes + 64 KiB",
      expected: 101,
      code: "close 1009",
      doc: { close: 1009 },
      run: async () =>
        wsExchange(ws, tls.ca, await signedWs(), [text(`{"type":"ack","message_id":"${"x".repeat(80_000)}"}`)]),
    },
  ];
  const cases: Case[] = [
    ...httpCases.map((c) => ({
      ...c,
      doc: { body: c.code },
      run: async (agent: HttpsAgent) => {
        const r = await c.gen();
        return answer(agent, tls.ca, r.url, r.method, r.headers, r.body);
      },
    })),
    ...wsCases,
  ];
  const results: CaseResult[] = cases.map((c) => ({
    target: c.target,
    kind: c.kind,
    expected: c.expected,
    code: c.code,
    sent: 0,
    statuses: {},
    unexpected: 0,
    wrongBody: 0,
    wrongBodySamples: [],
  }));
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const c = i % cases.length;
        const a = await cases[c]!.run(agent);
        const res = results[c]!;
        res.sent++;
        res.statuses[a.status] = (res.statuses[a.status] ?? 0) + 1;
        if (a.status !== res.expected) res.unexpected++;
        else {
          const problem = bodyProblem(cases[c]!.doc, a);
          if (problem) {
            res.wrongBody++;
            if (res.wrongBodySamples.length < 2) res.wrongBodySamples.push(problem);
          }
        }
      }
    }),
  );
  agent.destroy();
  rss.agent.end = rssMiB(agentProc.pid!);
  rss.relay.end = rssMiB(relayProc.pid!);
  const tlsResults = [];
  for (const [name, port] of [
    ["inbox", agentPort],
    ["relay", relayPort],
  ] as const) {
    for (const v of ["TLSv1", "TLSv1.1"] as const)
      tlsResults.push({ protocol: `${name} ${v}`, ...(await tlsRefused(port, v)) });
    tlsResults.push({ protocol: `${name} plain HTTP`, ...(await plainHttpRefused(port)) });
  }
  const crashed = crashes();
  for (const p of [agentProc, relayProc]) p.kill("SIGTERM");
  await nats.close();
  const sum = (f: (r: CaseResult) => number) => results.reduce((a, r) => a + f(r), 0);
  return {
    requests: sum((r) => r.sent),
    fiveXx: sum((r) =>
      Object.entries(r.statuses)
        .filter(([s]) => Number(s) >= 500)
        .reduce((a, [, n]) => a + n, 0),
    ),
    networkErrors: sum((r) => r.statuses["0"] ?? 0),
    unexpected: sum((r) => r.unexpected),
    wrongBodies: sum((r) => r.wrongBody),
    crashes: crashed,
    rssMiB: rss,
    cases: results,
    tls: tlsResults,
    durationS: Math.round((Date.now() - started) / 100) / 10,
  };
}

export function table(r: HardeningResult): string {
  const lines = [
    "target              | kind                                   | expected | code                   | sent | statuses                 | unexpected | wrong body",
    "--------------------|----------------------------------------|----------|------------------------|------|--------------------------|------------|-----------",
    ...r.cases.map(
      (c) =>
        `${c.target.padEnd(19)} | ${c.kind.padEnd(38)} | ${String(c.expected).padEnd(8)} | ${c.code.padEnd(22)} | ${String(c.sent).padStart(4)} | ${JSON.stringify(c.statuses).padEnd(24)} | ${String(c.unexpected).padStart(10)} | ${c.wrongBody}` +
        c.wrongBodySamples.map((w) => `\n    wrong body: ${w}`).join(""),
    ),
    "",
    ...r.tls.map((t) => `${t.protocol.padEnd(20)} ${t.refused ? "refused" : "ACCEPTED"}  (${t.how})`),
    "",
    `requests ${r.requests}, 5xx ${r.fiveXx}, network errors ${r.networkErrors}, unexpected status ${r.unexpected}, wrong body ${r.wrongBodies}, crashes ${r.crashes}, ` +
      `RSS agent ${r.rssMiB.agent.start}→${r.rssMiB.agent.end} MiB, relay ${r.rssMiB.relay.start}→${r.rssMiB.relay.end} MiB, ${r.durationS} s`,
  ];
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await runHardening({ requests: Number(process.env.IFP_HARDENING_REQUESTS ?? 10_000) });
  process.stdout.write(`${table(result)}\n`);
  writeFileSync("hardening-results.json", `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write("wrote hardening-results.json\n");
  process.exitCode =
    result.fiveXx || result.crashes || result.unexpected || result.wrongBodies || result.tls.some((t) => !t.refused)
      ? 1
      : 0;
}
