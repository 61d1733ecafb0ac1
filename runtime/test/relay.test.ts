import { spawn } from "node:child_process";
import { request as httpsRaw } from "node:https";
import { createServer, type Server } from "node:http";
import pino from "pino";
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../e2e/support/nats.ts";
import { localhostTls } from "../../e2e/support/tls.ts";
import { httpsRequest } from "../../e2e/support/https.ts";
import { freePort, waitFor } from "../../e2e/support/ports.ts";
import { HttpClient } from "../src/net/http-client.ts";
import { signRequest } from "../src/protocol/http-signatures.ts";
import { RelayClient, RelayError } from "../src/relay/client.ts";
import { startRelay, type RunningRelay } from "../src/relay/main.ts";
import type { RelaySpecInput } from "../src/resources/relay.ts";
import { identity, peerOf, signed, tempDir, writeRelayManifest, type TestIdentity } from "./fixtures.ts";

const alice = identity("alice-agent");
const bob = identity("bob-agent");
const stranger = identity("stranger");
let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
let http: HttpClient;

beforeAll(async () => {
  [nats, tls] = await Promise.all([startNats(), localhostTls()]);
  http = new HttpClient({ extraCa: tls.ca });
});
afterAll(async () => {
  await http?.close();
  await nats?.close();
});

async function runRelay(spec: Partial<RelaySpecInput> = {}, name = `relay-${Math.random().toString(36).slice(2, 8)}`, dir = tempDir()): Promise<RunningRelay> {
  const manifest = writeRelayManifest(dir, { url: "https://relay.test", agents: [peerOf(alice), peerOf(bob)], ...spec }, name);
  const r = await startRelay({ manifest, port: 0, host: "127.0.0.1", tlsCert: tls.files.cert, tlsKey: tls.files.key, nats: { url: nats.url }, logger: pino({ level: process.env.IFP_TEST_LOG ?? "silent" }) });
  await waitFor("relay ready", async () => (await httpsRequest(`${r.url}/readyz`, { ca: tls.ca })).status === 200);
  return r;
}

const client = (relay: RunningRelay, who: TestIdentity) => new RelayClient(relay.url.replace("127.0.0.1", "localhost"), who.signing, http);

async function failure(p: Promise<unknown>): Promise<{ status: number; code: string; message: string }> {
  try {
    await p;
  } catch (err) {
    const e = err as RelayError;
    return { status: e.status, code: e.code, message: e.message };
  }
  throw new Error("expected a failure");
}

describe("relay: store and forward", () => {
  let relay: RunningRelay;
  beforeAll(async () => {
    relay = await runRelay();
  });
  afterAll(async () => {
    await relay?.close();
  });

  it("publishes with 202, appends the trace entry, and lets only the recipient pull and acknowledge", async () => {
    const m = signed(alice, "bob-agent");
    const res = await client(relay, alice).publish(m);
    expect(res.status).toBe(202);
    expect(JSON.parse(res.text)).toMatchObject({ status: "accepted", message_id: m.headers.message_id, recipients: 1 });

    const { messages } = await client(relay, bob).pull();
    expect(messages).toHaveLength(1);
    expect(messages[0]!.headers.message_id).toBe(m.headers.message_id);
    expect(messages[0]!.trace!.received).toEqual([{ by: "relay:https://relay.test", with: "https+ifp-4", at: expect.stringMatching(/Z$/), from: "alice-agent" }]);
    expect(messages[0]!.security).toEqual(m.security);

    // Isolation: alice sees nothing of bob's and cannot acknowledge it.
    expect((await client(relay, alice).pull()).messages).toHaveLength(0);
    expect(await client(relay, alice).ack(m.headers.message_id)).toBe(false);

    expect(await client(relay, bob).ack(m.headers.message_id)).toBe(true);
    expect((await client(relay, bob).pull()).messages).toHaveLength(0);
    expect(await client(relay, bob).ack(m.headers.message_id)).toBe(false);
  });

  it("stores a repeated message_id once per recipient", async () => {
    const m = signed(alice, "bob-agent");
    await client(relay, alice).publish(m);
    const again = await client(relay, alice).publish(m);
    expect(again.status).toBe(202);
    expect(JSON.parse(again.text)).toMatchObject({ stored: 0, duplicates: 1 });
    const ids = (await client(relay, bob).pull()).messages.map((x) => x.headers.message_id);
    expect(ids.filter((id) => id === m.headers.message_id)).toHaveLength(1);
    await client(relay, bob).ack(m.headers.message_id);
  });

  it("pages oldest first with a cursor", async () => {
    const sent = [signed(alice, "bob-agent"), signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    for (const m of sent) await client(relay, alice).publish(m);
    const first = await client(relay, bob).pull({ limit: 2 });
    expect(first.messages.map((m) => m.headers.message_id)).toEqual(sent.slice(0, 2).map((m) => m.headers.message_id));
    const second = await client(relay, bob).pull({ limit: 2, after: first.next });
    expect(second.messages.map((m) => m.headers.message_id)).toEqual([sent[2]!.headers.message_id]);
    for (const m of sent) await client(relay, bob).ack(m.headers.message_id);
  });

  it("refuses bad requests with the documented status and never a 5xx", async () => {
    const unsigned = await httpsRequest(`${relay.url}/relay/messages`, { ca: tls.ca });
    expect(unsigned.status).toBe(401);
    expect(unsigned.json()).toMatchObject({ status: "error", code: "invalid_signature" });
    expect(await failure(client(relay, stranger).pull())).toMatchObject({ status: 401, code: "unknown_sender" });
    // The signer must be the message's sender.
    const forged = await client(relay, bob).publish(signed(alice, "bob-agent"));
    expect(forged.status).toBe(401);
    // Unknown recipient, malformed message, bad paging, oversize.
    expect((await client(relay, alice).publish(signed(alice, "nobody"))).status).toBe(404);
    expect((await client(relay, alice).request("POST", "/relay/publish", { ifp: 4 })).status).toBe(400);
    expect((await client(relay, alice).request("GET", "/relay/messages?limit=0")).status).toBe(400);
    expect((await client(relay, alice).publish(signed(alice, "bob-agent", {}, "x".repeat(1_100_000)))).status).toBe(413);
    expect((await client(relay, alice).request("GET", "/relay/nothing")).status).toBe(404);
  });

  it("honours ttl_seconds: refuses an expired message, never hands out one that expired", async () => {
    const stale = signed(alice, "bob-agent", { ttl_seconds: 1, date: new Date(Date.now() - 5000).toISOString() });
    expect((await client(relay, alice).publish(stale)).status).toBe(400);
    const short = signed(alice, "bob-agent", { ttl_seconds: 1 });
    expect((await client(relay, alice).publish(short)).status).toBe(202);
    expect((await client(relay, bob).pull()).messages.map((m) => m.headers.message_id)).toContain(short.headers.message_id);
    await new Promise((r) => setTimeout(r, 1500));
    expect((await client(relay, bob).pull()).messages.map((m) => m.headers.message_id)).not.toContain(short.headers.message_id);
    expect(await client(relay, bob).ack(short.headers.message_id)).toBe(false);
  });

  it("fans a topic message out to each subscriber's mailbox", async () => {
    expect(await client(relay, bob).subscribe(["capabilities.update"])).toMatchObject({ topics: ["capabilities.update"] });
    expect(await failure(client(relay, bob).request("POST", "/relay/subscribe", { subscribe: { topics: ["x"], agent: "alice-agent" } }).then((r) => {
      if (r.status >= 400) throw new RelayError(r.status, JSON.parse(r.text).code, JSON.parse(r.text).message);
    }))).toMatchObject({ status: 401 });
    const m = signed(alice, "topic:capabilities.update", { phase: "context" });
    const res = await client(relay, alice).publish(m);
    expect(JSON.parse(res.text)).toMatchObject({ recipients: 1 });
    const got = (await client(relay, bob).pull()).messages.find((x) => x.headers.message_id === m.headers.message_id);
    expect(got?.headers.to).toEqual([{ agent: "topic:capabilities.update" }]);
    expect((await client(relay, alice).pull()).messages).toHaveLength(0);
    await client(relay, bob).ack(m.headers.message_id);
  });

  it("streams a mailbox over SSE, resumable with Last-Event-ID", async () => {
    const m1 = signed(alice, "bob-agent");
    await client(relay, alice).publish(m1);
    const events = await readSse(relay, bob, undefined, 1);
    expect(events[0]!.data.headers.message_id).toBe(m1.headers.message_id);
    const m2 = signed(alice, "bob-agent");
    await client(relay, alice).publish(m2);
    const resumed = await readSse(relay, bob, events[0]!.id, 1);
    expect(resumed[0]!.data.headers.message_id).toBe(m2.headers.message_id);
    // SSE does not remove anything: both wait until acknowledged.
    expect((await client(relay, bob).pull()).messages.length).toBeGreaterThanOrEqual(2);
    await client(relay, bob).ack(m1.headers.message_id);
    await client(relay, bob).ack(m2.headers.message_id);
  });

  it("pushes over WebSocket and removes a message on the client's ack", async () => {
    const url = `${relay.url.replace("https", "wss").replace("127.0.0.1", "localhost")}/relay/ws`;
    const headers = await signRequest({ method: "GET", url: url.replace("wss", "https") }, bob.signing);
    const ws = new WebSocket(url, { headers, ca: tls.ca });
    const frames: any[] = [];
    ws.on("message", (d) => frames.push(JSON.parse(d.toString())));
    await new Promise((r, j) => ws.once("open", r).once("error", j));
    const m = signed(alice, "bob-agent");
    await client(relay, alice).publish(m);
    const got = await waitFor("a pushed message", () => frames.find((f) => f.type === "message" && f.message.headers.message_id === m.headers.message_id));
    expect(got.message.trace.received).toHaveLength(1);
    ws.send(JSON.stringify({ type: "ack", message_id: m.headers.message_id }));
    await waitFor("the ack", () => frames.find((f) => f.type === "acked"));
    expect(frames.find((f) => f.type === "acked")).toEqual({ type: "acked", message_id: m.headers.message_id, ok: true });
    ws.close();
    expect((await client(relay, bob).pull()).messages.map((x) => x.headers.message_id)).not.toContain(m.headers.message_id);
    // A WebSocket upgrade without a valid signature is refused.
    const bad = new WebSocket(url, { ca: tls.ca });
    const status = await new Promise<number>((r) => bad.once("unexpected-response", (_req, res) => r(res.statusCode ?? 0)).once("error", () => r(-1)));
    expect(status).toBe(401);
  });
});

async function readSse(relay: RunningRelay, who: TestIdentity, lastEventId: string | undefined, count: number) {
  const url = `${relay.url.replace("127.0.0.1", "localhost")}/relay/events`;
  const headers = await signRequest({ method: "GET", url, headers: lastEventId ? { "last-event-id": lastEventId } : {} }, who.signing);
  return new Promise<{ id: string; data: any }[]>((resolve, reject) => {
    const events: { id: string; data: any }[] = [];
    const req = httpsRaw(url, { headers, ca: tls.ca }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
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
          if (events.length >= count) {
            req.destroy();
            resolve(events);
          }
        }
      });
    });
    req.on("error", (e) => (events.length >= count ? undefined : reject(e)));
    req.setTimeout(15_000, () => req.destroy(new Error("no events")));
    req.end();
  });
}

describe("relay: retention, restarts, push", () => {
  it("refuses with 503 relay_full and Retry-After when retention limits are reached", async () => {
    const relay = await runRelay({ retention: { maxMessages: 2 } });
    try {
      for (let i = 0; i < 2; i++) expect((await client(relay, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
      const full = await client(relay, alice).publish(signed(alice, "bob-agent"));
      expect(full.status).toBe(503);
      expect(JSON.parse(full.text)).toMatchObject({ status: "error", code: "relay_full" });
      expect(Number(full.retryAfter)).toBeGreaterThan(0);
      // Acknowledging makes room again: nothing unacknowledged was dropped.
      const [first] = (await client(relay, bob).pull()).messages;
      await client(relay, bob).ack(first!.headers.message_id);
      expect((await client(relay, alice).publish(signed(alice, "bob-agent"))).status).toBe(202);
    } finally {
      await relay.close();
    }
  });

  it("keeps messages across a restart of the relay", async () => {
    const dir = tempDir();
    const first = await runRelay({}, "durable-relay", dir);
    const m = signed(alice, "bob-agent");
    await client(first, alice).publish(m);
    await first.close();
    const second = await runRelay({}, "durable-relay", dir);
    try {
      expect((await client(second, bob).pull()).messages.map((x) => x.headers.message_id)).toEqual([m.headers.message_id]);
    } finally {
      await second.close();
    }
  });

  it("pushes to a webhook, redelivers after a failure, and removes the message only after a 2xx", async () => {
    let answers = [500, 200];
    const hook = await webhook(() => answers.shift() ?? 200);
    const relay = await runRelay({ delivery: { retries: 3, backoffDelay: "200ms", timeout: "2s" } });
    try {
      await client(relay, bob).registerWebhook(hook.url);
      const m = signed(alice, "bob-agent");
      await client(relay, alice).publish(m);
      await waitFor("the successful push", () => hook.calls.filter((c) => c.status === 200).length === 1, 15_000);
      expect(hook.calls.map((c) => c.status)).toEqual([500, 200]);
      expect(hook.calls[1]!.body.headers.message_id).toBe(m.headers.message_id);
      await waitFor("removal from the mailbox", async () => (await client(relay, bob).pull()).messages.length === 0);
    } finally {
      await relay.close();
      await hook.close();
    }
  });

  it("dead-letters a push that exhausts its retries, readable by its owner only", async () => {
    const hook = await webhook(() => 500);
    const relay = await runRelay({ delivery: { retries: 1, backoffDelay: "100ms", timeout: "2s" } });
    try {
      await client(relay, bob).registerWebhook(hook.url);
      const m = signed(alice, "bob-agent");
      await client(relay, alice).publish(m);
      const dead = await waitFor("a dead letter", async () => {
        const r = await client(relay, bob).request("GET", "/relay/dead-letters");
        const d = JSON.parse(r.text).dead_letters;
        return d.length ? d : undefined;
      }, 15_000);
      expect(dead[0]).toMatchObject({ message_id: m.headers.message_id, reason: expect.stringMatching(/webhook answered 500; gave up after 2 attempts/) });
      expect(hook.calls).toHaveLength(2);
      expect(JSON.parse((await client(relay, alice).request("GET", "/relay/dead-letters")).text).dead_letters).toEqual([]);
      expect((await client(relay, bob).pull()).messages).toHaveLength(0);
    } finally {
      await relay.close();
      await hook.close();
    }
  });

  it("runs from the documented start contract", async () => {
    const dir = tempDir();
    const manifest = writeRelayManifest(dir, { url: "https://relay.test", agents: [peerOf(alice), peerOf(bob)] }, "cli-relay");
    const port = await freePort();
    const child = spawn(process.execPath, [new URL("../bin/ifp-runtime.ts", import.meta.url).pathname, "relay", "--manifest", manifest, "--port", String(port), "--host", "127.0.0.1", "--tls-cert", tls.files.cert, "--tls-key", tls.files.key, "--nats", nats.url], { stdio: "ignore" });
    try {
      await waitFor("the relay process", async () => (await httpsRequest(`https://localhost:${port}/readyz`, { ca: tls.ca })).status === 200, 30_000, 200);
      const c = new RelayClient(`https://localhost:${port}`, alice.signing, http);
      expect((await c.publish(signed(alice, "bob-agent"))).status).toBe(202);
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    }
  });
});

async function webhook(answer: () => number) {
  const calls: { status: number; body: any }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const status = answer();
      calls.push({ status, body: JSON.parse(Buffer.concat(chunks).toString()) });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  return { url: `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/push`, calls, close: () => new Promise<void>((r) => server.close(() => r())) };
}
