import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { identity, peerOf, tempDir } from "../support/fixtures.ts";
import { runAgent, runPeers, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { notifySink, outboundResults, scriptedPeer, send, untilState } from "../support/outbox-harness.ts";
import { handOffsSettled, outboxSettled } from "../support/probes.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const fast: AgentSpecInput["outbound"] = { backoff: ["300ms"], retryFor: "30s" };

describe("two agents talking over HTTPS", () => {
  const alice = identity("alice-agent");
  const bob = identity("bob-agent");
  let a: Awaited<ReturnType<typeof runAgent>>;
  let b: Awaited<ReturnType<typeof runAgent>>;
  let aHandler: Awaited<ReturnType<typeof startHandler>>;
  let bHandler: Awaited<ReturnType<typeof startHandler>>;

  beforeAll(async () => {
    [aHandler, bHandler] = await Promise.all([startHandler(), startHandler()]);
    [a, b] = await runPeers(
      { natsUrl: nats.url, tls },
      (bobUrl) => ({
        self: alice,
        spec: {
          capabilities: [{ name: "gossip.exchange", description: "Gossip" }],
          peers: [{ ...peerOf(bob), url: bobUrl }],
          handler: { url: aHandler.url },
          outbound: fast,
        },
      }),
      (aliceUrl) => ({
        self: bob,
        spec: {
          capabilities: [
            { name: "gossip.exchange", description: "Gossip" },
            { name: "calendar.availability", description: "Availability", conditions: { minDisclosure: "personal" } },
          ],
          peers: [{ ...peerOf(alice), url: aliceUrl }],
          handler: { url: bHandler.url },
          outbound: fast,
        },
      }),
    );
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await Promise.all([aHandler?.close(), bHandler?.close()]);
  });

  it("sends a greeting that carries the capability document, and the peer learns it", async () => {
    const sent = await send(a.localApiUrl, { to: "bob-agent", phase: "greeting", text: "Hello from Alice's agent" });
    expect(sent.status).toBe(202);
    expect(sent.body).toMatchObject({ status: "queued", message_id: expect.stringMatching(/^msg:/) });
    const id = sent.body.message_id;
    const done = await untilState(a.localApiUrl, id, "delivered");
    expect(done.recipients).toEqual([
      expect.objectContaining({
        agent: "bob-agent",
        state: "delivered",
        attempts: 1,
        via: `${b.url.replace("127.0.0.1", "localhost")}/.well-known/agent/inbox`,
      }),
    ]);
    await waitFor("bob's handler", () => bHandler.received.some((r) => r.body.headers.message_id === id));
    const got = bHandler.received.find((r) => r.body.headers.message_id === id)!.body;
    expect(got.headers).toMatchObject({
      from: { agent: "alice-agent" },
      to: [{ agent: "bob-agent" }],
      phase: "greeting",
      sequence: 1,
    });
    expect(got.body.parts).toEqual([
      {
        content_type: "application/json",
        name: "capabilities",
        content: expect.objectContaining({ ifp: 7, agent_id: "alice-agent" }),
      },
    ]);
    expect(got.security.signatures[0].key_id).toBe("alice-agent#key-1");
    const learned = await waitFor("bob to cache alice's capabilities", () =>
      new LocalApiClient(b.localApiUrl).peerCapabilities("alice-agent"),
    );
    expect(learned).toMatchObject({
      source: "greeting",
      message_id: id,
      document: { capabilities: [{ name: "gossip.exchange" }] },
    });
  });

  it("threads a reply: same conversation, next sequence, in_reply_to", async () => {
    const first = await send(a.localApiUrl, { to: "bob-agent", phase: "context", text: "What is new?" });
    await waitFor("bob's handler", () =>
      bHandler.received.some((r) => r.body.headers.message_id === first.body.message_id),
    );
    const reply = await send(b.localApiUrl, { in_reply_to: first.body.message_id, phase: "context", text: "Plenty." });
    expect(reply.status).toBe(202);
    await waitFor("alice's handler", () =>
      aHandler.received.some((r) => r.body.headers.message_id === reply.body.message_id),
    );
    const got = aHandler.received.find((r) => r.body.headers.message_id === reply.body.message_id)!.body;
    expect(got.headers).toMatchObject({
      to: [{ agent: "alice-agent" }],
      conversation_id: first.body.message.headers.conversation_id,
      sequence: first.body.message.headers.sequence + 1,
      thread: { in_reply_to: first.body.message_id, references: [first.body.message_id] },
    });
  });

  it("answers a request for a capability whose conditions are not met with an error-phase message", async () => {
    const asked = await send(a.localApiUrl, {
      to: "bob-agent",
      phase: "probe",
      text: "Free next week?",
      disclosure: "professional",
      capabilities: { request: ["calendar.availability"] },
    });
    const err = await waitFor(
      "the error-phase answer at alice",
      () => aHandler.received.find((r) => r.body.headers.thread?.in_reply_to === asked.body.message_id)?.body,
    );
    expect(err.headers).toMatchObject({ phase: "error", from: { agent: "bob-agent" } });
    expect(err.body.text).toMatch(
      /calendar.availability needs min_disclosure "personal" but this conversation has "professional"/,
    );
    expect(err.body.parts[0].content).toMatchObject({ code: "capability_conditions_not_met" });
    // Had bob handed the request on, its hand-off would be acknowledged by now.
    await waitFor("bob's hand-offs settled", () => handOffsSettled(nats.url, bob.agentId), 15_000);
    expect(bHandler.received.some((r) => r.body.headers.message_id === asked.body.message_id)).toBe(false);
  });

  it("refuses bad outbox requests with 400 and names the problem", async () => {
    expect(await send(a.localApiUrl, { phase: "context", text: "to nobody" })).toMatchObject({
      status: 400,
      body: { code: "invalid_format", message: expect.stringMatching(/`to` is required/) },
    });
    expect(await send(a.localApiUrl, { to: "bob-agent", in_reply_to: "msg:unknown" })).toMatchObject({
      status: 400,
      body: { message: expect.stringMatching(/no received message/) },
    });
    expect(await send(a.localApiUrl, { to: 42 })).toMatchObject({ status: 400, body: { code: "invalid_format" } });
    const missing = await fetch(`${a.localApiUrl}/outbox/msg:none`);
    expect(missing.status).toBe(404);
  });
});

describe("delivery failures", () => {
  it("retries a peer that answers 500 for a while and delivers once it recovers", async () => {
    const peer = await scriptedPeer(tls, (n) => ({ status: n <= 3 ? 500 : 202 }));
    const sender = await runAgent({
      self: identity("sender-500"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [{ ...peerOf(identity("flaky")), url: peer.url }], outbound: fast },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: "flaky", text: "hi" });
      const done = await untilState(sender.localApiUrl, sent.body.message_id, "delivered");
      expect(done.recipients[0]).toMatchObject({ attempts: 4, state: "delivered" });
      // The witness: the outbox holds nothing unacknowledged or waiting, so nothing is sent again.
      await waitFor("the outbox settled", () => outboxSettled(nats.url, "sender-500"), 15_000);
      await consistently("no request after the delivery", () => peer.requests.length === 4);
      expect(peer.requests.filter((r) => r.headers["idempotency-key"] === sent.body.message_id)).toHaveLength(4);
    } finally {
      await sender.close();
      await peer.close();
    }
  });

  it("never retries a 400, records it as a dead letter and notifies", async () => {
    const peer = await scriptedPeer(tls, () => ({ status: 400 }));
    const sink = await notifySink();
    const sender = await runAgent({
      self: identity("sender-400"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [{ ...peerOf(identity("strict")), url: peer.url }], outbound: fast, notify: { url: sink.url } },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: "strict", text: "hi" });
      const failed = await untilState(sender.localApiUrl, sent.body.message_id, "failed");
      expect(failed.recipients[0]).toMatchObject({
        attempts: 1,
        last_status: 400,
        last_error: expect.stringMatching(/never retried/),
      });
      const dead = await new LocalApiClient(sender.localApiUrl).deadLetters();
      expect(dead.map((d) => d.message_id)).toContain(sent.body.message_id);
      await waitFor("the notification", () => sink.got.some((n) => n.message_id === sent.body.message_id));
      expect(sink.got.find((n) => n.message_id === sent.body.message_id)).toMatchObject({
        event: "failed",
        recipient: "strict",
        agent_id: "sender-400",
      });
      await waitFor("the outbox settled", () => outboxSettled(nats.url, "sender-400"), 15_000);
      await consistently("no second request", () => peer.requests.length === 1, 1500);
      expect(await outboundResults(sender)).toMatchObject({ failed: 1, refused: 1 });
    } finally {
      await sender.close();
      await peer.close();
      await sink.close();
    }
  });

  it("waits for Retry-After on 429 and records the decision", async () => {
    const peer = await scriptedPeer(tls, (n) =>
      n === 1 ? { status: 429, headers: { "retry-after": "1" } } : { status: 202 },
    );
    const sender = await runAgent({
      self: identity("sender-429"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [{ ...peerOf(identity("busy")), url: peer.url }], outbound: { backoff: ["1h"], retryFor: "24h" } },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: "busy", text: "hi" });
      const retrying = await untilState(sender.localApiUrl, sent.body.message_id, "retrying");
      expect(retrying.recipients[0].decision).toMatch(/429 is not final: retry after Retry-After 1 s/);
      await untilState(sender.localApiUrl, sent.body.message_id, "delivered", 15_000);
      expect(peer.requests).toHaveLength(2);
    } finally {
      await sender.close();
      await peer.close();
    }
  });

  it("gives up on a peer that stays down past the retry window, and tells the human", async () => {
    const sink = await notifySink();
    const sender = await runAgent({
      self: identity("sender-down"),
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [{ ...peerOf(identity("gone")), url: "https://localhost:1" }],
        outbound: { backoff: ["300ms"], retryFor: "2s" },
        notify: { url: sink.url },
      },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: "gone", text: "anyone?" });
      const r = await untilState(sender.localApiUrl, sent.body.message_id, "undeliverable", 30_000);
      expect(r.recipients[0]).toMatchObject({
        state: "undeliverable",
        last_error: expect.stringMatching(/network error.*retry window/),
      });
      expect(r.recipients[0].attempts).toBeGreaterThanOrEqual(3);
      await waitFor("the notification", () => sink.got.some((n) => n.message_id === sent.body.message_id));
      expect(sink.got[0]).toMatchObject({ event: "undeliverable", recipient: "gone", agent_id: "sender-down" });
    } finally {
      await sender.close();
      await sink.close();
    }
  });

  it("survives a restart of the sender in the middle of retrying, delivering once", async () => {
    let up = false;
    const peer = await scriptedPeer(tls, () => ({ status: up ? 202 : 503 }));
    const self = identity("sender-restart");
    const dir = tempDir();
    const spec = {
      peers: [{ ...peerOf(identity("later")), url: peer.url }],
      outbound: { backoff: ["500ms"], retryFor: "1m" },
    };
    const first = await runAgent({ self, dir, natsUrl: nats.url, tls, spec });
    const sent = await send(first.localApiUrl, { to: "later", text: "eventually" });
    await untilState(first.localApiUrl, sent.body.message_id, "retrying");
    await first.close();
    const before = peer.requests.length;
    up = true;
    const second = await runAgent({ self, dir, natsUrl: nats.url, tls, spec });
    try {
      const done = await untilState(second.localApiUrl, sent.body.message_id, "delivered");
      expect(done.recipients[0].attempts).toBeGreaterThan(1);
      await waitFor("the outbox settled", () => outboxSettled(nats.url, self.agentId), 15_000);
      await consistently("one request after the restart", () => peer.requests.length === before + 1, 1500);
      expect(peer.requests.filter((r) => r.body.headers.message_id === sent.body.message_id).length).toBe(
        peer.requests.length,
      );
    } finally {
      await second.close();
      await peer.close();
    }
  });
});
