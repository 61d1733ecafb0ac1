// Per-conversation state against real runtimes and a real nats-server: the record a conversation
// keeps with each peer, sequence checks (IFP-5 4.2), replies threaded from the inbox stream, and an
// error-phase answer linked to the message it concerns.
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { agentNames } from "../../src/contract/agent-names.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, runPeers, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { send, untilState } from "../support/outbox-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const conversation = async (localApiUrl: string, id: string) => {
  const res = await fetch(`${localApiUrl}/conversations/${encodeURIComponent(id)}`);
  return { status: res.status, body: (await res.json()) as any };
};

describe("conversations", () => {
  const alice = identity("alice-conv");
  const bob = identity("bob-conv");
  const carol = identity("carol-conv");
  let a: Awaited<ReturnType<typeof runAgent>>;
  let b: Awaited<ReturnType<typeof runAgent>>;
  let strict: Awaited<ReturnType<typeof runAgent>>;
  let aHandler: Awaited<ReturnType<typeof startHandler>>;
  let bHandler: Awaited<ReturnType<typeof startHandler>>;

  beforeAll(async () => {
    [aHandler, bHandler] = await Promise.all([startHandler(), startHandler()]);
    const outbound = { backoff: ["300ms"], retryFor: "30s" };
    [a, b, strict] = await runPeers(
      { natsUrl: nats.url, tls },
      (bobUrl) => ({
        self: alice,
        spec: {
          peers: [{ ...peerOf(bob), url: bobUrl, temperature: "warm" }, peerOf(carol)],
          handler: { url: aHandler.url },
          outbound,
        },
      }),
      (aliceUrl) => ({
        self: bob,
        spec: { peers: [{ ...peerOf(alice), url: aliceUrl }], handler: { url: bHandler.url }, outbound },
      }),
      {
        self: identity("strict-conv"),
        spec: { peers: [peerOf(alice), peerOf(carol)], inbox: { sequenceCheck: "strict" } },
      },
    );
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close(), strict?.close()]);
    await Promise.all([aHandler?.close(), bHandler?.close()]);
  });

  it("keeps a record per peer: participants, phase, sequences both ways, the level reached and the peer's temperature", async () => {
    const first = await send(a.localApiUrl, { to: "bob-conv", phase: "greeting", text: "Hello Bob" });
    expect(first.status).toBe(202);
    const conv = first.body.message.headers.conversation_id;
    await waitFor("bob's handler", () =>
      bHandler.received.some((r) => r.body.headers.message_id === first.body.message_id),
    );
    const reply = await send(b.localApiUrl, { in_reply_to: first.body.message_id, phase: "context", text: "Hi Alice" });
    await waitFor("alice's handler", () =>
      aHandler.received.some((r) => r.body.headers.message_id === reply.body.message_id),
    );
    // A further message of the same conversation without a sequence takes the next one.
    const third = await send(a.localApiUrl, {
      to: "bob-conv",
      conversation_id: conv,
      phase: "context",
      text: "And another thing",
    });
    expect(third.body.message.headers.sequence).toBe(3);

    const atAlice = await conversation(a.localApiUrl, conv);
    expect(atAlice.status).toBe(200);
    expect(await new LocalApiClient(a.localApiUrl).conversation(conv)).toEqual(atAlice.body);
    expect(atAlice.body.peers).toHaveLength(1);
    expect(atAlice.body.peers[0]).toMatchObject({
      conversation_id: conv,
      peer: "bob-conv",
      participants: ["alice-conv", "bob-conv"],
      phase: "context",
      temperature: "warm",
      auth_level: 2,
      last_sequence_in: 2,
      last_sequence_out: 3,
    });
    expect(atAlice.body.peers[0].recent.map((m: any) => [m.direction, m.sequence, m.message_id])).toEqual([
      ["out", 1, first.body.message_id],
      ["in", 2, reply.body.message_id],
      ["out", 3, third.body.message_id],
    ]);
    await waitFor("bob's handler", () =>
      bHandler.received.some((r) => r.body.headers.message_id === third.body.message_id),
    );
    const atBob = await conversation(b.localApiUrl, conv);
    expect(atBob.body.peers[0]).toMatchObject({
      peer: "alice-conv",
      last_sequence_in: 3,
      last_sequence_out: 2,
      phase: "context",
      auth_level: 2,
    });
  });

  it("has the record written when it answers 202, whether the message was admitted before it was stored or while", async () => {
    // Level 2 (carol's key is in alice's peers) with sequences only noted: recorded while stored;
    // with sequenceCheck strict: admitted first. Either way the record holds the message at once.
    for (const [runtime, to] of [
      [a, "alice-conv"],
      [strict, "strict-conv"],
    ] as const) {
      const conv = `conv:at-once-${to}-${Date.now()}`;
      const m = signed(carol, to, { conversation_id: conv, sequence: 1 });
      expect((await runtime.post(m)).status).toBe(202);
      const record = await conversation(runtime.localApiUrl, conv);
      expect(record.status).toBe(200);
      expect(record.body.peers[0]).toMatchObject({ peer: "carol-conv", auth_level: 2, last_sequence_in: 1 });
      expect(record.body.peers[0].recent.map((r: { message_id: string }) => r.message_id)).toEqual([
        m.headers.message_id,
      ]);
    }
  });

  it("answers 503 while the record cannot be written, though a message recorded while stored was stored", async () => {
    const lone = await runAgent({
      self: identity("lone-conv"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(carol)] },
    });
    const nc = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc)).streams.delete(`KV_${agentNames("lone-conv").conversationsBucket}`);
      const m = signed(carol, "lone-conv", { conversation_id: `conv:unrecorded-${Date.now()}` });
      const r = await lone.post(m);
      expect(r.status, r.text).toBe(503);
      expect(JSON.parse(r.text)).toMatchObject({ code: "unavailable" });
      // Stored meanwhile: the sender's retry is a duplicate of it, recorded once the records are back.
      const held = await (await jetstreamManager(nc)).streams.getMessage(agentNames("lone-conv").inboxStream, {
        last_by_subj: agentNames("lone-conv").inbox(m.headers.message_id),
      });
      expect(held?.json()).toMatchObject({ headers: { message_id: m.headers.message_id } });
    } finally {
      await nc.close();
      await lone.close();
    }
  });

  it("answers 404 for a conversation it does not know, and for an over-long id 400", async () => {
    expect(await conversation(a.localApiUrl, "conv:nobody-knows")).toMatchObject({
      status: 404,
      body: { code: "not_found" },
    });
    expect((await conversation(a.localApiUrl, "x".repeat(300))).status).toBe(400);
  });

  it("takes many messages of one conversation arriving together, each counted, none answered 503", async () => {
    const conv = `conv:burst-${Date.now()}`;
    const statuses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        a.post(signed(bob, "alice-conv", { conversation_id: conv }, `burst ${i}`)).then((r) => r.status),
      ),
    );
    expect(statuses.filter((s) => s !== 202)).toEqual([]);
    const record = await conversation(a.localApiUrl, conv);
    expect(record.status).toBe(200);
    expect(record.body.peers).toHaveLength(1);
    expect(record.body.peers[0]).toMatchObject({ conversation_id: conv, peer: "bob-conv" });
    // Every one of them went through the record (the most recent ones are listed).
    const listed = record.body.peers[0].recent.map((m: { direction: string }) => m.direction);
    expect(listed.length).toBeGreaterThan(0);
    expect(listed.every((d: string) => d === "in")).toBe(true);
  });

  it("notes a sequence number a sender reuses, and with sequenceCheck strict refuses it with 409; a repeat is no reuse", async () => {
    const conv = `conv:seq-${Date.now()}`;
    const one = signed(alice, "strict-conv", { conversation_id: conv, sequence: 1 });
    expect((await strict.post(one)).status).toBe(202);
    // The same message again: a duplicate, not a conflict.
    expect((await strict.post(one)).status).toBe(202);
    const reuse = signed(
      alice,
      "strict-conv",
      { conversation_id: conv, sequence: 1 },
      "another message, same sequence",
    );
    const refused = await strict.post(reuse);
    expect(refused.status).toBe(409);
    expect(refused.json()).toMatchObject({
      status: "error",
      code: "sequence_conflict",
      message: expect.stringContaining(
        `sequence 1 of conversation ${conv} was already used by ${one.headers.message_id}`,
      ),
    });
    // Another sender's record is its own: carol may use sequence 1 in a conversation of that id.
    expect((await strict.post(signed(carol, "strict-conv", { conversation_id: conv, sequence: 1 }))).status).toBe(202);
    expect((await strict.post(signed(alice, "strict-conv", { conversation_id: conv, sequence: 2 }))).status).toBe(202);

    // The default ("record") takes it and counts it in the conversation's record.
    const conv2 = `conv:seq-record-${Date.now()}`;
    expect((await a.post(signed(carol, "alice-conv", { conversation_id: conv2, sequence: 1 }))).status).toBe(202);
    expect((await a.post(signed(carol, "alice-conv", { conversation_id: conv2, sequence: 1 }, "again 1"))).status).toBe(
      202,
    );
    const rec = await conversation(a.localApiUrl, conv2);
    expect(rec.body.peers[0]).toMatchObject({ peer: "carol-conv", sequence_reused: 1, last_sequence_in: 1 });
    expect(rec.body.peers[0].recent).toHaveLength(2);
  });

  it("threads a reply to a received message from the inbox stream, which keeps it a week; once it is gone, a reply naming it is refused 400", async () => {
    const conv = `conv:old-${Date.now()}`;
    const original = signed(
      carol,
      "alice-conv",
      { conversation_id: conv, sequence: 4, thread: { references: ["msg:earlier"] } },
      "from long ago",
    );
    expect((await a.post(original)).status).toBe(202);
    await waitFor("alice's handler", () =>
      aHandler.received.some((r) => r.body.headers.message_id === original.headers.message_id),
    );
    const replyTo = (text: string) =>
      send(a.localApiUrl, { in_reply_to: original.headers.message_id, to: "carol-conv", phase: "context", text });
    const reply = await replyTo("Still here");
    expect(reply.status).toBe(202);
    expect(reply.body.message.headers).toMatchObject({
      to: [{ agent: "carol-conv" }],
      conversation_id: conv,
      sequence: 5,
      thread: { in_reply_to: original.headers.message_id, references: ["msg:earlier", original.headers.message_id] },
    });
    // Without `to`, the first sender of that message_id is answered.
    const again = await send(a.localApiUrl, {
      in_reply_to: original.headers.message_id,
      phase: "context",
      text: "Once more",
    });
    expect(again.body.message.headers).toMatchObject({
      to: [{ agent: "carol-conv" }],
      conversation_id: conv,
      sequence: 6,
    });
    const nc = await connect({ servers: nats.url });
    try {
      // The conversations bucket holds the records only: a message is found in the inbox stream.
      const kv = await new Kvm(nc).open(agentNames("alice-conv").conversationsBucket);
      const keys: string[] = [];
      for await (const k of await kv.keys()) keys.push(k);
      expect(keys.length).toBeGreaterThan(0);
      expect(keys.filter((k) => !k.startsWith("c."))).toEqual([]);
      // The stream's retention lets it go (as a purge does here).
      await (await jetstreamManager(nc)).streams.purge(agentNames("alice-conv").inboxStream);
    } finally {
      await nc.close();
    }
    const late = await replyTo("Too late");
    expect(late.status).toBe(400);
    expect(late.body).toMatchObject({ code: "invalid_format" });
    expect(late.body.message).toContain(`no received message has message_id ${original.headers.message_id}`);
    // The conversation itself is kept: a message naming it continues after what was sent.
    const onward = await send(a.localApiUrl, {
      to: "carol-conv",
      conversation_id: conv,
      phase: "context",
      text: "Go on",
    });
    expect(onward.status).toBe(202);
    expect(onward.body.message.headers).toMatchObject({ conversation_id: conv, sequence: 7 });
  });

  it("links an error-phase answer to the outbound message it concerns, in that message's delivery record", async () => {
    const asked = await send(a.localApiUrl, { to: "bob-conv", phase: "context", text: "Can you do X?" });
    await untilState(a.localApiUrl, asked.body.message_id, "delivered");
    await waitFor("bob's handler", () =>
      bHandler.received.some((r) => r.body.headers.message_id === asked.body.message_id),
    );
    const answer = await send(b.localApiUrl, {
      in_reply_to: asked.body.message_id,
      phase: "error",
      text: "I cannot do X: it is not one of my capabilities.",
      body: { parts: [{ content_type: "application/json", name: "error", content: { code: "capability_unknown" } }] },
    });
    expect(answer.status).toBe(202);
    const record = await waitFor("the error linked", async () => {
      const r = await new LocalApiClient(a.localApiUrl).status(asked.body.message_id);
      return r.recipients[0]?.peer_error ? r : undefined;
    });
    expect(record).toMatchObject({
      state: "delivered",
      recipients: [
        {
          agent: "bob-conv",
          peer_error: {
            message_id: answer.body.message_id,
            code: "capability_unknown",
            text: "I cannot do X: it is not one of my capabilities.",
          },
        },
      ],
    });
    // An error-phase message from someone else naming alice's message is not linked to it.
    const forged = signed(
      carol,
      "alice-conv",
      { phase: "error", thread: { in_reply_to: asked.body.message_id }, conversation_id: `conv:forged-${Date.now()}` },
      "not yours",
    );
    expect((await a.post(forged)).status).toBe(202);
    await waitFor("alice's handler", () =>
      aHandler.received.some((r) => r.body.headers.message_id === forged.headers.message_id),
    );
    const after = await new LocalApiClient(a.localApiUrl).status(asked.body.message_id);
    expect(after.recipients[0]!.peer_error!.message_id).toBe(answer.body.message_id);
  });
});
