import { request as httpRequest } from "node:http";
import { HANDOFF_SIGNATURE_HEADER, handoffSignatureProblem } from "../../src/protocol/handoff-signature.ts";
import { request as httpsRaw } from "node:https";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { agentNames } from "../../src/agent/names.ts";
import { replyId } from "../../src/agent/outbound/replies.ts";
import { signMessage } from "../../src/protocol/signing.ts";
import { identity, message, peerOf, signed, tempDir } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { handOffsSettled, metricValue, tlsHandshake } from "../support/probes.ts";

const alice = identity("alice-agent");
const pete = identity("pete-agent");
const mallory = identity("mallory-agent");

let nats: NatsServer;
let tls: Tls;

withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

async function streamMessages(agentId: string, subject?: string): Promise<number> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const names = agentNames(agentId);
    const info = await jsm.streams.info(names.inboxStream, subject ? { subjects_filter: subject } : undefined);
    if (!subject) return info.state.messages;
    return Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  } finally {
    await nc.close();
  }
}

/**
 * POST a chunked body of up to `chunks` × `chunkBytes` bytes, writing until the server answers;
 * resolves with the answer (or the error that came before any answer) and the bytes written.
 */
function streamUntilAnswered(
  url: string,
  chunkBytes: number,
  chunks: number,
): Promise<{ status?: number; text: string; error?: string; sent: number }> {
  return new Promise((resolve) => {
    let sent = 0;
    let answered = false;
    const req = httpsRaw(
      url,
      {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
        timeout: 30_000,
      },
      (res) => {
        answered = true;
        const body: Buffer[] = [];
        res.on("data", (c: Buffer) => body.push(c));
        res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(body).toString(), sent }));
        res.on("error", (err) =>
          resolve({ status: res.statusCode, text: Buffer.concat(body).toString(), error: err.message, sent }),
        );
      },
    );
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", (err) => {
      if (!answered) resolve({ text: "", error: err.message, sent });
    });
    void (async () => {
      const chunk = Buffer.alloc(chunkBytes, 0x20);
      for (let i = 0; i < chunks && !answered && !req.destroyed; i++) {
        sent += chunk.length;
        if (!req.write(chunk)) await new Promise((r) => (req.once("drain", r), req.once("close", r)));
      }
      if (!answered && !req.destroyed) req.end();
    })();
  });
}

/** ifp_handler_deliveries_total{result} of a running agent. */
async function handlerDeliveries(
  agent: { scrape(): Promise<string> },
  result: "delivered" | "failed",
): Promise<number> {
  return metricValue(await agent.scrape(), "ifp_handler_deliveries_total", { result });
}

const capabilities = [
  { name: "gossip.exchange", description: "Take part in gossip exchanges" },
  {
    name: "calendar.availability",
    version: "2",
    description: "Share availability",
    conditions: { minDisclosure: "professional", minAuthLevel: 1 },
  },
];

describe("agent mode over TLS with a real nats-server", () => {
  let agent: Awaited<ReturnType<typeof runAgent>>;
  const dir = tempDir();

  beforeAll(async () => {
    agent = await runAgent({
      self: alice,
      dir,
      natsUrl: nats.url,
      tls,
      spec: {
        displayName: "Alice's agent",
        capabilities,
        peers: [peerOf(pete), peerOf(mallory)],
        inbox: { maxMessageBytes: 4096, rateLimit: { perSenderPerMinute: 5 } },
        relay: { urls: ["https://relay.example"] },
      },
    });
  });
  afterAll(async () => {
    await agent?.close();
  });

  describe("capability discovery", () => {
    it("serves the capability document with ETag and Cache-Control, 304 on If-None-Match", async () => {
      const res = await agent.get("/.well-known/agent/capabilities");
      expect(res.status).toBe(200);
      expect(res.headers["content-type"]).toMatch(/^application\/json/);
      expect(res.headers["cache-control"]).toMatch(/max-age=\d+/);
      const doc = res.json();
      expect(doc).toEqual({
        ifp: 7,
        agent_id: "alice-agent",
        capabilities: [
          { name: "gossip.exchange", version: "1", description: "Take part in gossip exchanges" },
          {
            name: "calendar.availability",
            version: "2",
            description: "Share availability",
            conditions: { min_disclosure: "professional", min_auth_level: 1 },
          },
        ],
        ifp_support: [3, 4, 5, 6, 7, 8],
        updated: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        relay: { urls: ["https://relay.example"], preference: "any" },
      });
      const etag = res.headers.etag as string;
      expect(etag).toMatch(/^"[\w-]+"$/);
      const again = await agent.get("/.well-known/agent/capabilities", { "if-none-match": etag });
      expect(again.status).toBe(304);
      expect(again.text).toBe("");
      const other = await agent.get("/.well-known/agent/capabilities", { "if-none-match": '"stale"' });
      expect(other.status).toBe(200);
    });

    it("serves the IFP /.well-known/iface paths as aliases", async () => {
      const a = await agent.get("/.well-known/agent/capabilities");
      const b = await agent.get("/.well-known/iface/capabilities");
      expect(b.status).toBe(200);
      expect(b.json()).toEqual(a.json());
      expect((await agent.get("/.well-known/iface/identity")).status).toBe(200);
    });

    it("publishes its identity with the public half of its signing key", async () => {
      const res = await agent.get("/.well-known/agent/identity");
      expect(res.status).toBe(200);
      expect(res.json()).toEqual({
        ifp: 5,
        agent_id: "alice-agent",
        display: "Alice's agent",
        keys: [
          {
            key_id: "key-1",
            type: "ed25519",
            public_key: alice.publicKey,
            created: expect.any(String),
            status: "active",
          },
        ],
        endpoints: {
          inbox: `${agent.url.replace("localhost", "127.0.0.1")}/.well-known/agent/inbox`,
          capabilities: `${agent.url.replace("localhost", "127.0.0.1")}/.well-known/agent/capabilities`,
          identity: `${agent.url.replace("localhost", "127.0.0.1")}/.well-known/agent/identity`,
        },
        relay: { urls: ["https://relay.example"], preference: "any" },
      });
    });

    it("remembers when the capability set changed, across restarts", async () => {
      const before = (await agent.get("/.well-known/agent/capabilities")).json().updated;
      // Same capabilities in a fresh process: the same `updated`.
      const twin = await runAgent({
        self: alice,
        natsUrl: nats.url,
        tls,
        spec: { capabilities, peers: [peerOf(pete)], relay: { urls: ["https://relay.example"] } },
      });
      try {
        await waitFor(
          "updated to sync",
          async () => (await twin.get("/.well-known/agent/capabilities")).json().updated === before,
        );
      } finally {
        await twin.close();
      }
    });
  });

  describe("inbox", () => {
    it("accepts a signed message with 202 only once it is stored in JetStream", async () => {
      const before = await streamMessages("alice-agent");
      const m = signed(pete, "alice-agent");
      const res = await agent.post(m, { "idempotency-key": m.headers.message_id });
      expect(res.status).toBe(202);
      expect(res.json()).toEqual({ status: "accepted", message_id: m.headers.message_id });
      expect(await streamMessages("alice-agent")).toBe(before + 1);
    });

    it("answers a repeated message_id with 202 without storing it again", async () => {
      const m = signed(pete, "alice-agent");
      expect((await agent.post(m)).status).toBe(202);
      const after = await streamMessages("alice-agent");
      const again = await agent.post(m);
      expect(again.status).toBe(202);
      expect(again.json()).toEqual({ status: "accepted", message_id: m.headers.message_id });
      expect(await streamMessages("alice-agent")).toBe(after);
    });

    it.each([
      ["malformed JSON", '{"ifp": 4,', 400, "invalid_format"],
      ["a JSON array", "[]", 400, "invalid_format"],
      [
        "missing required headers",
        JSON.stringify({ ifp: 4, headers: { message_id: "x" }, body: {} }),
        400,
        "invalid_format",
      ],
    ])("%s → %s %s", async (_name, body, status, code) => {
      const res = await agent.post(body);
      expect(res.status).toBe(status);
      expect(res.json()).toEqual({ status: "error", code, message: expect.any(String) });
    });

    it("refuses a body that is not JSON with 415", async () => {
      const res = await agent.post("hello", { "content-type": "text/plain" });
      expect(res.status).toBe(415);
      expect(res.json().code).toBe("unsupported_media_type");
    });

    it("names the failing field in a schema error", async () => {
      const m = signed(pete, "alice-agent");
      (m.headers as Record<string, unknown>).date = "not a date";
      const res = await agent.post(m);
      expect(res.status).toBe(400);
      expect(res.json().message).toContain("headers.date");
    });

    it("refuses messages addressed to someone else", async () => {
      expect((await agent.post(signed(pete, "bob-agent"))).json()).toMatchObject({
        code: "invalid_format",
        message: expect.stringContaining("not to alice-agent"),
      });
    });

    it("refuses a stale date outside the replay window", async () => {
      const old = signed(pete, "alice-agent", { date: new Date(Date.now() - 49 * 3600_000).toISOString() });
      const res = await agent.post(old);
      expect(res.status).toBe(400);
      expect(res.json().message).toMatch(/outside the accepted window/);
    });

    it("answers 401 for missing, invalid and foreign signatures, and unknown senders", async () => {
      const unsigned = await agent.post(message("pete-agent", "alice-agent"));
      expect(unsigned.status).toBe(401);
      expect(unsigned.json()).toMatchObject({ status: "error", code: "invalid_signature" });

      const tampered = signed(pete, "alice-agent");
      tampered.body.text = "changed in transit";
      expect((await agent.post(tampered)).json()).toMatchObject({ code: "invalid_signature" });

      const forged = signMessage(message("pete-agent", "alice-agent"), mallory.signing);
      const f = await agent.post(forged);
      expect(f.status).toBe(401);
      expect(f.json().message).toMatch(/mallory-agent/);

      const stranger = await agent.post(signed(identity("stranger"), "alice-agent"));
      expect(stranger.status).toBe(401);
      expect(stranger.json().code).toBe("unknown_sender");
    });

    it("answers 413 for an oversized body, declared or streamed, without reading it all", async () => {
      const big = signed(pete, "alice-agent", {}, "x".repeat(5000));
      const declared = await agent.post(big);
      expect(declared.status).toBe(413);
      expect(declared.json()).toMatchObject({ status: "error", code: "payload_too_large" });

      // Chunked, no Content-Length: 64 MiB offered, the server must answer 413 and stop early.
      const streamed = await streamUntilAnswered(`${agent.url}/.well-known/agent/inbox`, 64 * 1024, 1024);
      expect(streamed.error).toBeUndefined();
      expect(streamed.status).toBe(413);
      expect(JSON.parse(streamed.text)).toMatchObject({ status: "error", code: "payload_too_large" });
      const sent = streamed.sent;
      expect(sent).toBeLessThan(64 * 1024 * 1024);
    });

    it("limits each verified sender and answers 429 with Retry-After", async () => {
      const sender = identity("chatty-agent");
      const own = await runAgent({
        self: identity("quiet-agent"),
        natsUrl: nats.url,
        tls,
        spec: { peers: [peerOf(sender), peerOf(pete)], inbox: { rateLimit: { perSenderPerMinute: 3 } } },
      });
      try {
        for (let i = 0; i < 3; i++) expect((await own.post(signed(sender, "quiet-agent"))).status).toBe(202);
        const limited = await own.post(signed(sender, "quiet-agent"));
        expect(limited.status).toBe(429);
        expect(Number(limited.headers["retry-after"])).toBeGreaterThanOrEqual(1);
        expect(limited.json()).toMatchObject({ status: "error", code: "rate_limited" });
        // Another sender is not affected.
        expect((await own.post(signed(pete, "quiet-agent"))).status).toBe(202);
      } finally {
        await own.close();
      }
    });

    it("answers 404 with the error body for unknown paths", async () => {
      const res = await agent.get("/.well-known/agent/nothing");
      expect(res.status).toBe(404);
      expect(res.json()).toMatchObject({ status: "error", code: "not_found" });
    });

    it("accepts a protocol-level problem with 202 and answers it with an error-phase message", async () => {
      const handler = await startHandler();
      const bob = identity("bob-agent");
      const own = await runAgent({
        self: bob,
        natsUrl: nats.url,
        tls,
        spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
      });
      try {
        const m = signed(pete, "bob-agent", { phase: "haggle" });
        const res = await own.post(m);
        expect(res.status).toBe(202);
        // pete-agent has no https URL in this spec, so the reply is recorded as having no route.
        const record = await waitFor("the error-phase reply to be handled", async () => {
          const r = await fetch(`${own.localApiUrl}/outbox/${encodeURIComponent(replyId(m, "unknown_phase"))}`);
          const body = r.status === 200 ? ((await r.json()) as any) : undefined;
          return body?.state === "failed" ? body : undefined;
        });
        expect(record.recipients).toEqual([
          expect.objectContaining({
            agent: "pete-agent",
            state: "failed",
            last_error: expect.stringMatching(/no route to pete-agent/),
          }),
        ]);
        // Had the message been handed on, its hand-off would be acknowledged by now.
        await waitFor("bob's hand-offs settled", () => handOffsSettled(nats.url, bob.agentId), 15_000);
        expect(handler.received).toHaveLength(0);
      } finally {
        await own.close();
        await handler.close();
      }
    });

    it("serves no plain HTTP and refuses TLS below 1.2", async () => {
      const port = new URL(agent.url).port;
      const plain = await new Promise<string>((resolve) => {
        const req = httpRequest({ host: "127.0.0.1", port, path: "/.well-known/agent/capabilities" }, (res) =>
          resolve(`status ${res.statusCode}`),
        );
        req.on("error", (err) => resolve(`error ${err.message}`));
        req.setTimeout(5000, () => req.destroy(new Error("timeout")));
        req.end();
      });
      // Whatever a plain request gets, it is never a capability document.
      expect(plain).not.toBe("status 200");
      // A client that offers TLS 1.0 and 1.1 only is refused by the server's protocol_version
      // alert; the same client allowed TLS 1.2 connects, so the refusal is the server's.
      expect(await tlsHandshake(Number(port), tls.ca, { minVersion: "TLSv1", maxVersion: "TLSv1.1" })).toMatchObject({
        ok: false,
        code: "ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION",
      });
      expect(await tlsHandshake(Number(port), tls.ca, { minVersion: "TLSv1", maxVersion: "TLSv1.2" })).toEqual({
        ok: true,
        protocol: "TLSv1.2",
      });
    });
  });
});

describe("agent mode when things fail", () => {
  it("answers 503 with Retry-After while NATS is down, and 202 again once it is back", async () => {
    const server = await startNats();
    const agent = await runAgent({
      self: identity("resilient-agent"),
      natsUrl: server.url,
      tls,
      spec: { peers: [peerOf(pete)] },
    });
    try {
      expect((await agent.post(signed(pete, "resilient-agent"))).status).toBe(202);
      await server.stop();
      await waitFor(
        "the runtime to notice",
        async () => (await agent.post(signed(pete, "resilient-agent"))).status === 503,
        20_000,
        200,
      );
      const res = await agent.post(signed(pete, "resilient-agent"));
      expect(res.status).toBe(503);
      expect(Number(res.headers["retry-after"])).toBeGreaterThan(0);
      expect(res.json()).toMatchObject({ status: "error", code: "unavailable" });
      expect((await agent.get("/readyz")).status).toBe(503);
      await server.restart();
      await waitFor(
        "202 after NATS returns",
        async () => (await agent.post(signed(pete, "resilient-agent"))).status === 202,
        30_000,
        250,
      );
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("keeps idempotency across a restart of the runtime", async () => {
    const self = identity("restart-agent");
    const dir = tempDir();
    const m = signed(pete, "restart-agent");
    const first = await runAgent({ self, dir, natsUrl: nats.url, tls, spec: { peers: [peerOf(pete)] } });
    expect((await first.post(m)).status).toBe(202);
    await first.close();
    const second = await runAgent({ self, dir, natsUrl: nats.url, tls, spec: { peers: [peerOf(pete)] } });
    try {
      const res = await second.post(m);
      expect(res.status).toBe(202);
      expect(await streamMessages("restart-agent")).toBe(1);
    } finally {
      await second.close();
    }
  });

  it("delivers a message accepted while the handler was down once it comes back, exactly once", async () => {
    const handler = await startHandler();
    await handler.down();
    const self = identity("handoff-agent");
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url, timeout: "2s" } },
    });
    try {
      const m = signed(pete, "handoff-agent");
      expect((await agent.post(m)).status).toBe(202);
      // The runtime tried the handler while it was down, and counted the failure.
      await waitFor("a failed hand-off", async () => handlerDeliveries(agent, "failed").then((n) => n >= 1));
      expect(await handlerDeliveries(agent, "delivered")).toBe(0);
      await handler.up();
      await waitFor(
        "delivery to the handler",
        async () => (await handlerDeliveries(agent, "delivered")) === 1 && handler.received.length > 0,
        30_000,
        100,
      );
      await waitFor("the hand-off settled", () => handOffsSettled(nats.url, self.agentId), 15_000);
      await consistently(
        "exactly one delivery",
        async () => handler.received.length === 1 && (await handlerDeliveries(agent, "delivered")) === 1,
        1500,
      );
      expect(handler.received[0]!.body).toEqual(m);
      expect(handler.received[0]!.headers).toMatchObject({
        "idempotency-key": `pete-agent ${m.headers.message_id}`,
        "ifp-sender": "pete-agent",
      });
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("signs each hand-off with the hand-off secret, so that the application can tell the runtime from anyone else", async () => {
    const handler = await startHandler();
    const self = identity("signed-handoff-agent");
    const secret = "the-hand-off-secret-0123456789";
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      handoffSecret: secret,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
    });
    try {
      expect((await agent.post(signed(pete, self.agentId))).status).toBe(202);
      await waitFor("the hand-off", () => handler.received.length === 1);
      const got = handler.received[0]!;
      expect(got.headers[HANDOFF_SIGNATURE_HEADER]).toMatch(/^t=\d+,v2=[0-9a-f]{64}$/);
      expect(handoffSignatureProblem(secret, got.headers, got.raw)).toBeUndefined();
      expect(handoffSignatureProblem("another-secret-0123456789", got.headers, got.raw)).toMatch(/does not match/);
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("refuses to start with a hand-off secret file that is missing or too short", async () => {
    const dir = tempDir();
    await expect(
      runAgent({
        self: identity("short-secret-agent"),
        natsUrl: nats.url,
        tls,
        dir,
        handoffSecret: "short",
        spec: { handler: { url: "http://127.0.0.1:9/x" } },
      }),
    ).rejects.toThrow(/shorter than 16 characters/);
  });

  it("retries a handler that fails, and dead-letters after deadLetterAfter", async () => {
    let code = 500;
    const handler = await startHandler(() => code);
    const self = identity("deadletter-agent");
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url, deadLetterAfter: "2s" } },
    });
    try {
      expect((await agent.post(signed(pete, "deadletter-agent"))).status).toBe(202);
      const names = agentNames("deadletter-agent");
      await waitFor(
        "a dead letter",
        async () => (await streamMessages("deadletter-agent", names.dead)) === 1,
        30_000,
        250,
      );
      const metrics = await agent.scrape();
      expect(metrics).toMatch(/ifp_dead_letters_total\{[^}]*source="handler"[^}]*\} 1/);
      const attempts = await handlerDeliveries(agent, "failed");
      expect(attempts).toBeGreaterThanOrEqual(1);
      // The handler works again, but a dead letter is never handed on: no further attempt at all.
      code = 200;
      // The witness: the hand-off consumer holds nothing unacknowledged or waiting, so nothing is redelivered.
      await waitFor("the dead letter settled in the hand-off consumer", () =>
        handOffsSettled(nats.url, "deadletter-agent"),
      );
      await consistently(
        "no hand-off after the dead letter",
        async () => handler.received.length === 0 && (await handlerDeliveries(agent, "failed")) === attempts,
        1500,
      );
      expect(await handlerDeliveries(agent, "delivered")).toBe(0);
    } finally {
      await agent.close();
      await handler.close();
    }
  });
});
