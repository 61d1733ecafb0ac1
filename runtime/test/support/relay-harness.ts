// Shared set-up of the relay integration tests: a real nats-server, real TLS, relays started
// in this process through startRelay, and signed clients.
import type { IncomingHttpHeaders } from "node:http";
import { createServer, request as httpsRaw } from "node:https";
import { afterAll, beforeAll, expect } from "vitest";
import WebSocket from "ws";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import { RelayClient, type RelayError } from "../../src/net/relay-client.ts";
import { startRelay, type RunningRelay } from "../../src/relay/main.ts";
import { relayNames } from "../../src/contract/relay-stream.ts";
import { jetstreamManager, type ConsumerInfo } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { consumerSettledAt } from "./probes.ts";
import type { RelaySpecInput } from "../../src/resources/relay.ts";
import { identity, peerOf, tempDir, writeRelayManifest, type TestIdentity } from "./fixtures.ts";
import { withRuntimeLog, type LogLine } from "./runtime-log.ts";

export const alice = identity("alice-agent");
export const bob = identity("bob-agent");
export const carol = identity("carol.agent*>"); // dots and wildcards must be safe in subjects
export const stranger = identity("stranger");

export interface RelayEnv {
  nats: NatsServer;
  tls: Awaited<ReturnType<typeof localhostTls>>;
  http: HttpClient;
  close(): Promise<void>;
}

export async function relayEnv(): Promise<RelayEnv> {
  const [nats, tls] = await Promise.all([startNats(), localhostTls()]);
  const http = new HttpClient({ extraCa: tls.ca });
  return {
    nats,
    tls,
    http,
    async close() {
      await http.close();
      await nats.close();
    },
  };
}

export const randomName = (prefix = "relay") => `${prefix}-${Math.random().toString(36).slice(2, 8)}`;

/**
 * Start a relay in-process, on `port` (default a free one). Its log (debug and up) is kept,
 * printed when a test fails, and read by `logLines()`.
 */
export async function runRelay(
  env: RelayEnv,
  spec: Partial<RelaySpecInput> = {},
  name = randomName(),
  dir = tempDir(),
  port = 0,
): Promise<RunningRelay & { logLines(): LogLine[] }> {
  const manifest = writeRelayManifest(
    dir,
    { url: "https://localhost", agents: [peerOf(alice), peerOf(bob), peerOf(carol)], ...spec },
    name,
  );
  const relay = await withRuntimeLog(`relay ${name} (in-process)`, (logger) =>
    startRelay({
      manifest,
      port,
      host: "127.0.0.1",
      tlsCert: env.tls.files.cert,
      tlsKey: env.tls.files.key,
      nats: { url: env.nats.url },
      caFile: env.tls.files.ca,
      metricsPort: 0,
      logger,
    }),
  );
  await waitFor(
    "relay ready",
    async () => (await httpsRequest(`${relay.url}/readyz`, { ca: env.tls.ca })).status === 200,
  ).catch(async (err: unknown) => {
    await relay.close().catch(() => {});
    throw err;
  });
  return relay;
}

export interface RelayFixture extends RelayEnv {
  relay: RunningRelay;
  /** The relay's URL under the name its certificate carries. */
  relayUrl: string;
}

/** One nats-server, test TLS and one relay ("hub") serving these agents, for a whole test file. */
export function withRelay(agents: TestIdentity[], set: (f: RelayFixture) => void): void {
  let f: RelayFixture | undefined;
  beforeAll(async () => {
    const env = await relayEnv();
    try {
      const relay = await runRelay(env, { agents: agents.map((a) => peerOf(a)) }, "hub");
      f = { ...env, relay, relayUrl: baseUrl(relay) };
    } catch (err) {
      await env.close();
      throw err;
    }
    set(f);
  });
  afterAll(async () => {
    await f?.relay.close();
    await f?.close();
  });
}

/** The relay's URL under the name its certificate carries. */
export const baseUrl = (relay: RunningRelay) => relay.url.replace("127.0.0.1", "localhost");

export const clientOf = (env: RelayEnv, relay: RunningRelay, who: TestIdentity) =>
  new RelayClient(baseUrl(relay), who.signing, env.http);

export async function failure(p: Promise<unknown>): Promise<{ status: number; code: string; message: string }> {
  try {
    await p;
  } catch (err) {
    const e = err as RelayError;
    return { status: e.status, code: e.code, message: e.message };
  }
  throw new Error("expected a failure");
}

/** An answer that is the documented error: its status, and the error body with its code. */
export async function expectError(
  p: Promise<{ status: number; text: string }>,
  status: number,
  code: string,
): Promise<void> {
  const res = await p;
  expect(res.status, res.text).toBe(status);
  expect(JSON.parse(res.text)).toMatchObject({ status: "error", code, message: expect.any(String) });
}

/** A signed request with a hand-made body or signature, answered as status and JSON. */
export async function raw(
  env: RelayEnv,
  relay: RunningRelay,
  opts: { method: string; path: string; headers: Record<string, string>; body?: string },
) {
  const res = await httpsRequest(`${baseUrl(relay)}${opts.path}`, {
    method: opts.method,
    headers: opts.headers,
    body: opts.body,
    ca: env.tls.ca,
  });
  return {
    status: res.status,
    headers: res.headers,
    body: res.text ? (JSON.parse(res.text) as { status: string; code: string; message: string }) : undefined,
  };
}

export interface SseEvent {
  id: string;
  data: any;
}

/** Open GET /relay/events and collect `count` events (or what came within `waitMs`). */
export async function readSse(
  env: RelayEnv,
  relay: RunningRelay,
  who: TestIdentity,
  opts: { lastEventId?: string; count: number; waitMs?: number; onOpen?: () => void },
): Promise<SseEvent[]> {
  const url = `${baseUrl(relay)}/relay/events`;
  const headers = await signRequest(
    { method: "GET", url, headers: opts.lastEventId ? { "last-event-id": opts.lastEventId } : {} },
    who.signing,
  );
  return new Promise<SseEvent[]>((resolve, reject) => {
    const events: SseEvent[] = [];
    const req = httpsRaw(url, { headers, ca: env.tls.ca }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        return reject(new Error(`status ${res.statusCode}`));
      }
      opts.onOpen?.();
      let buf = "";
      res.on("data", (c: Buffer) => {
        buf += c.toString();
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const id = /^id: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (id && data) events.push({ id, data: JSON.parse(data) });
          if (events.length >= opts.count) {
            req.destroy();
            resolve(events);
          }
        }
      });
    });
    req.on("error", (e) => (events.length >= opts.count ? undefined : reject(e)));
    const timer = setTimeout(() => {
      req.destroy();
      if (opts.waitMs !== undefined) resolve(events);
      else reject(new Error(`only ${events.length} of ${opts.count} events`));
    }, opts.waitMs ?? 15_000);
    req.on("close", () => {
      clearTimeout(timer);
      // The relay ended the stream (it shuts down, say): what came, when that was all we waited for.
      if (opts.waitMs !== undefined) resolve(events);
      else reject(new Error(`the stream ended after ${events.length} of ${opts.count} events`));
    });
    req.end();
  });
}

/** A signed WebSocket to /relay/ws that records the frames it receives (`push: "off"` for a session that only sends). */
export async function openWs(
  env: RelayEnv,
  relay: RunningRelay,
  who: TestIdentity,
  after?: number,
  opts: { push?: "off" } = {},
) {
  const q = new URLSearchParams();
  if (after) q.set("after", String(after));
  if (opts.push) q.set("push", opts.push);
  const url = `${baseUrl(relay).replace("https", "wss")}/relay/ws${q.size ? `?${q}` : ""}`;
  const headers = await signRequest({ method: "GET", url: url.replace("wss", "https") }, who.signing);
  const ws = new WebSocket(url, { headers, ca: env.tls.ca });
  const frames: any[] = [];
  ws.on("message", (d) => frames.push(JSON.parse(d.toString())));
  await new Promise((r, j) => ws.once("open", r).once("error", j));
  return {
    ws,
    frames,
    messages: () => frames.filter((f) => f.type === "message"),
    /** The answer frame (published or error) about `messageId`, once it came. */
    answerTo: (messageId: string) =>
      frames.find((f) => (f.type === "published" || f.type === "error") && f.message_id === messageId),
    send: (frame: unknown) => ws.send(typeof frame === "string" ? frame : JSON.stringify(frame)),
    close: () =>
      new Promise<void>((r) => (ws.readyState === ws.CLOSED ? r() : (ws.once("close", () => r()), ws.close()))),
  };
}

export interface WebhookCall {
  status: number;
  headers: IncomingHttpHeaders;
  body: any;
}

/** An HTTPS webhook on loopback that answers each POST with `answer()`. */
export async function webhook(
  env: RelayEnv,
  answer: (call: number) => number | { status: number; headers?: Record<string, string> },
) {
  const calls: WebhookCall[] = [];
  const server = createServer({ cert: env.tls.cert, key: env.tls.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const a = answer(calls.length);
      const { status, headers } = typeof a === "number" ? { status: a, headers: {} } : a;
      calls.push({ status, headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString()) });
      res.writeHead(status, headers).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `https://localhost:${port}/push`,
    calls,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The relay's durable consumer that pushes `who`'s mailbox to a webhook: its JetStream info. */
export async function pushConsumerInfo(env: RelayEnv, relay: RunningRelay, who: TestIdentity): Promise<ConsumerInfo> {
  const names = relayNames(relay.relay);
  const nc = await connect({ servers: env.nats.url });
  try {
    return await (await jetstreamManager(nc)).consumers.info(names.stream, names.pushConsumer(who.agentId));
  } finally {
    await nc.close();
  }
}

/**
 * Whether the relay's push consumer for `who` has nothing left to deliver and nothing delivered
 * but not yet acknowledged: no push of what is in the mailbox can come any more.
 */
export function pushSettled(env: RelayEnv, relay: RunningRelay, who: TestIdentity): Promise<boolean> {
  const names = relayNames(relay.relay);
  return consumerSettledAt(env.nats.url, names.stream, names.pushConsumer(who.agentId));
}

export const ids = (messages: { headers: { message_id: string } }[]) => messages.map((m) => m.headers.message_id);

export { waitFor };
