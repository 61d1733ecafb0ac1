import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { get as httpGet } from "node:http";
import { agentNames } from "../../src/agent/names.ts";
import type { InboundDelivery, LocalApiClient } from "../../src/client/local.ts";
import { startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runLocalApiAgent, type LocalApiAgent } from "../support/local-api-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const alice = identity("alice-agent");

/** An open stream reader that records what it gets; close() ends it and waits until its messages are handed back. */
function openReader(b: LocalApiAgent, ifp: LocalApiClient, lastEventId?: number) {
  const ac = new AbortController();
  const got: InboundDelivery[] = [];
  const done = (async () => {
    for await (const d of ifp.messages({ signal: ac.signal, lastEventId })) got.push(d);
  })();
  return {
    got,
    texts: () => got.map((d) => d.message.body.text),
    until: (n: number) => waitFor(`${n} messages streamed`, async () => got.length >= n),
    async close() {
      ac.abort();
      await done;
      await waitFor("the closed reader to hand its messages back", async () => b.appStream!.activeReaders === 0);
    },
  };
}

describe("the application's message stream (no spec.handler)", () => {
  const bob = identity("bob-agent");
  let b: LocalApiAgent;
  const sendToBob = async (text: string) => {
    const m = signed(alice, "bob-agent", { phase: "context" }, text);
    expect((await b.deliver(m)).status).toBe(202);
    return m.headers.message_id;
  };
  const auth = () => ({ authorization: `Bearer ${"t".repeat(43)}` });

  beforeAll(async () => {
    b = await runLocalApiAgent({ self: bob, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
  });
  afterAll(async () => {
    await b?.close();
  });

  it("hands out accepted messages in order, with what a handler would get, and again after a reconnect until acknowledged", async () => {
    const ids = [await sendToBob("one"), await sendToBob("two"), await sendToBob("three")];
    const r1 = openReader(b, b.local());
    await r1.until(3);
    expect(r1.got.map((d) => d.message_id)).toEqual(ids);
    expect(r1.texts()).toEqual(["one", "two", "three"]);
    expect(r1.got[0]).toMatchObject({ sender: "alice-agent", auth_level: 2, delivery_attempt: 1 });
    expect(r1.got[1]!.seq).toBeGreaterThan(r1.got[0]!.seq);
    await r1.close();
    expect(await b.unacked()).toBe(3);

    // Not acknowledged: all three again, in order, on the next stream.
    const r2 = openReader(b, b.local());
    await r2.until(3);
    expect(r2.texts()).toEqual(["one", "two", "three"]);
    expect(r2.got.map((d) => d.delivery_attempt)).toEqual([2, 2, 2]);
    // Acknowledged while the stream is open (through the TLS listener too): gone for good.
    await b.remote().ack(ids[0]!);
    expect(await b.local().ackMany([ids[1]!, ids[1]!, "no-such-message"])).toEqual({
      acknowledged: [ids[1]],
      not_found: ["no-such-message"],
    });
    expect(await b.unacked()).toBe(1);
    await r2.close();

    const r3 = openReader(b, b.remote());
    await r3.until(1);
    expect(r3.texts()).toEqual(["three"]);
    await b.local().ack(ids[2]!);
    expect(await b.unacked()).toBe(0);
    await r3.close();
  });

  it("answers an acknowledgement of an unknown, already acknowledged or handed-back message with 404 and the error body", async () => {
    const unknown = await b.request("/messages/never-seen/ack", { method: "POST", headers: auth() });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toEqual({
      status: "error",
      code: "not_found",
      message: expect.stringMatching(/never-seen/),
    });
    const id = await sendToBob("four");
    const r = openReader(b, b.local());
    await r.until(1);
    await r.close();
    // Handed back when its stream closed: no longer held, so not acknowledgeable until handed out again.
    await expect(b.local().ack(id)).rejects.toMatchObject({ status: 404, code: "not_found" });
    const r2 = openReader(b, b.local());
    await r2.until(1);
    await b.local().ack(id);
    await expect(b.local().ack(id)).rejects.toMatchObject({ status: 404, code: "not_found" });
    await r2.close();
    const tooLong = await b.request(`/messages/${"x".repeat(300)}/ack`, { method: "POST", headers: auth() });
    expect(tooLong.status).toBe(400);
    expect(tooLong.json()).toMatchObject({ status: "error", code: "invalid_format" });
    for (const body of ["{}", '{"message_ids": []}', '{"message_ids": [1]}', "[]", "{not json"]) {
      const bad = await b.request("/messages/ack", {
        method: "POST",
        headers: { ...auth(), "content-type": "application/json" },
        body,
      });
      expect(bad.status, body).toBe(400);
      expect(bad.json()).toMatchObject({ status: "error", code: "invalid_format" });
    }
  });

  it("resumes after Last-Event-ID: what the reader already holds is kept for its acknowledgement, not sent again", async () => {
    const ids = [await sendToBob("five"), await sendToBob("six"), await sendToBob("seven")];
    const r1 = openReader(b, b.local());
    await r1.until(3);
    await r1.close();
    // The reader had all three but lost its connection after "six": it resumes after it.
    const r2 = openReader(b, b.local(), r1.got[1]!.seq);
    await r2.until(1);
    expect(r2.texts()).toEqual(["seven"]);
    // It still acknowledges "five" and "six", which it holds without getting them again.
    expect(await b.local().ackMany(ids.slice(0, 2))).toEqual({ acknowledged: ids.slice(0, 2), not_found: [] });
    await b.local().ack(ids[2]!);
    expect(await b.unacked()).toBe(0);
    expect(r2.texts()).toEqual(["seven"]);
    await r2.close();
  });

  it("shares the messages between two readers: each message goes to one of them", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await sendToBob(`shared ${i}`));
    const one = openReader(b, b.local());
    const two = openReader(b, b.remote());
    await waitFor("all eight streamed", async () => one.got.length + two.got.length >= 8);
    const a1 = one.got.map((d) => d.message_id);
    const a2 = two.got.map((d) => d.message_id);
    expect([...a1, ...a2].sort()).toEqual([...ids].sort());
    expect(a1.filter((id) => a2.includes(id))).toEqual([]);
    expect((await b.local().ackMany(ids)).acknowledged.sort()).toEqual([...ids].sort());
    await Promise.all([one.close(), two.close()]);
    expect(await b.unacked()).toBe(0);
  });

  it("recreates its consumer when it goes away, from the acknowledgement floor", async () => {
    const r = openReader(b, b.local());
    // The reader is pulling: it has looked at the consumer (and its acknowledgement floor) after every earlier ack.
    await waitFor(
      "the reader pulling",
      async () => (await b.nats.jsm.consumers.info("IFP_INBOX_bob-agent", "application")).num_waiting > 0,
    );
    await b.nats.jsm.consumers.delete("IFP_INBOX_bob-agent", "application");
    const id = await sendToBob("after the loss");
    await r.until(1);
    expect(r.got.map((d) => d.message_id)).toEqual([id]);
    await b.local().ack(id);
    await r.close();
    expect(await b.unacked()).toBe(0);
  });

  it("has a pull variant: GET /messages?limit= hands out up to that many, to be acknowledged", async () => {
    const ids = [await sendToBob("p1"), await sendToBob("p2"), await sendToBob("p3")];
    const first = await b.remote().pull(2);
    expect(first.map((d) => d.message_id)).toEqual(ids.slice(0, 2));
    expect(first[0]).toMatchObject({ sender: "alice-agent", auth_level: 2, message: { body: { text: "p1" } } });
    const next = await b.remote().pull(10);
    expect(next.map((d) => d.message_id)).toEqual([ids[2]]);
    expect(await b.remote().ackMany(ids)).toEqual({ acknowledged: ids, not_found: [] });
    expect(await b.remote().pull(5)).toEqual([]);
    // A limit or wait out of range is brought into it.
    const odd = await b.request("/messages?limit=abc&wait=-3", { headers: auth() });
    expect(odd.status).toBe(200);
    expect(odd.json()).toEqual({ messages: [] });
  });
});

/** The message_id and Ifp-Dead-Reason of every message on the agent's dead-letter subject, in order. */
async function deadLetters(agent: LocalApiAgent, agentId: string): Promise<{ id: string; reason: string }[]> {
  const names = agentNames(agentId);
  const info = await agent.nats.jsm.streams.info(names.inboxStream, { subjects_filter: names.dead });
  const out: { id: string; reason: string }[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && out.length < 50; seq++) {
    const m = await agent.nats.jsm.streams.getMessage(names.inboxStream, { seq }).catch(() => undefined);
    if (m?.subject === names.dead)
      out.push({ id: m.header.get("Ifp-Message-Id"), reason: m.header.get("Ifp-Dead-Reason") });
  }
  return out;
}

describe("ttl_seconds on the message stream", () => {
  it("never hands out a message whose ttl_seconds passed, streamed or pulled: dead-lettered with its reason, as with a handler", async () => {
    const erin = identity("erin-agent");
    const e = await runLocalApiAgent({ self: erin, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
    try {
      const toErin = (text: string, headers: { date?: string; ttl_seconds?: number } = {}) =>
        signed(alice, "erin-agent", { phase: "context", ...headers }, text);
      const tenSecondsAgo = () => new Date(Date.now() - 10_000).toISOString();
      // Expired on arrival (dated 10 s ago, 5 s to live), expiring while handed out and not acknowledged, lasting, and without a TTL.
      const stale = toErin("stale", { date: tenSecondsAgo(), ttl_seconds: 5 });
      const short = toErin("short", { ttl_seconds: 5 });
      const lasting = toErin("lasting", { ttl_seconds: 3600 });
      const plain = toErin("plain");
      for (const m of [stale, short, lasting, plain]) expect((await e.deliver(m)).status).toBe(202);

      // The stale one, first in the inbox, is skipped; the short-lived one is still in time.
      const r1 = openReader(e, e.local());
      await r1.until(3);
      expect(r1.texts()).toEqual(["short", "lasting", "plain"]);
      expect(await deadLetters(e, "erin-agent")).toEqual([
        { id: stale.headers.message_id, reason: expect.stringMatching(/^expired: ttl_seconds 5 from /) },
      ]);
      await r1.close();

      // Handed back unacknowledged; when it comes round again its ttl_seconds has passed.
      await waitFor(
        "the short one's ttl_seconds to pass",
        () => Date.now() > Date.parse(short.headers.date) + 5_000,
        15_000,
      );
      const r2 = openReader(e, e.local());
      await r2.until(2);
      expect(r2.texts()).toEqual(["lasting", "plain"]);
      expect(r2.got.map((d) => d.delivery_attempt)).toEqual([2, 2]);
      await waitFor("the short one dead-lettered", async () => (await deadLetters(e, "erin-agent")).length === 2);
      await consistently(
        "no expired message streamed",
        () => !r2.got.some((d) => ["stale", "short"].includes(d.message.body.text ?? "")),
      );
      expect(await e.local().ackMany([lasting.headers.message_id, plain.headers.message_id])).toMatchObject({
        not_found: [],
      });
      await r2.close();
      // Not held for anyone: acknowledging an expired one finds nothing.
      await expect(e.local().ack(short.headers.message_id)).rejects.toMatchObject({ status: 404 });

      // The pull variant checks the same.
      const stalePulled = toErin("stale, pulled", { date: tenSecondsAgo(), ttl_seconds: 5 });
      const fresh = toErin("fresh, pulled", { ttl_seconds: 3600 });
      for (const m of [stalePulled, fresh]) expect((await e.deliver(m)).status).toBe(202);
      const pulled = await e.local().pull(10);
      expect(pulled.map((d) => d.message.body.text)).toEqual(["fresh, pulled"]);
      await e.local().ack(fresh.headers.message_id);
      const dead = await deadLetters(e, "erin-agent");
      expect(dead.map((d) => d.id)).toEqual([stale, short, stalePulled].map((m) => m.headers.message_id));
      expect(dead.every((d) => /^expired: ttl_seconds/.test(d.reason))).toBe(true);
      expect(await e.unacked()).toBe(0);
    } finally {
      await e.close();
    }
  });
});

describe("abuse of the message stream", () => {
  it("refuses a stream past 32 open ones with 429, and takes a malformed Last-Event-ID as none", async () => {
    const dave = identity("dave-agent");
    const d = await runLocalApiAgent({ self: dave, natsUrl: nats.url, tls, spec: { peers: [peerOf(alice)] } });
    try {
      const readers = Array.from({ length: 32 }, () => openReader(d, d.local()));
      await waitFor("32 readers open", async () => d.appStream!.activeReaders === 32);
      const refused = await d.request("/messages/stream", { headers: { authorization: `Bearer ${"t".repeat(43)}` } });
      expect(refused.status).toBe(429);
      expect(refused.json()).toMatchObject({ status: "error", code: "rate_limited" });
      await Promise.all(readers.map((r) => r.close()));
      const m = signed(alice, "dave-agent", { phase: "context" }, "after garbage");
      expect((await d.deliver(m)).status).toBe(202);
      const raw = await new Promise<string>((resolve, reject) => {
        const req = httpGet(
          `${d.localApiUrl}/messages/stream?after=-1`,
          { headers: { "last-event-id": "99999999999999999999 x" } },
          (res) => {
            let buf = "";
            res.on("data", (c: Buffer) => {
              buf += c.toString();
              if (buf.includes("event: message")) {
                req.destroy();
                resolve(buf);
              }
            });
          },
        );
        req.on("error", reject);
      });
      expect(raw).toContain("after garbage");
    } finally {
      await d.close();
    }
  });
});

describe("an agent with spec.handler", () => {
  it("offers no message stream: its messages go to the handler", async () => {
    const handler = await startHandler();
    const carol = identity("carol-agent");
    const c = await runLocalApiAgent({
      self: carol,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(alice)], handler: { url: handler.url } },
    });
    try {
      for (const path of ["/messages/stream", "/messages"]) {
        const res = await c.request(path, { headers: { authorization: `Bearer ${"t".repeat(43)}` } });
        expect(res.status, `${path} ${res.text}`).toBe(404);
        expect(res.json()).toEqual({
          status: "error",
          code: "not_found",
          message: expect.stringMatching(/spec\.handler is set/),
        });
      }
      await expect(c.local().ack("x")).rejects.toMatchObject({ status: 404 });
      const m = signed(alice, "carol-agent", { phase: "context" });
      expect((await c.deliver(m)).status).toBe(202);
      await waitFor("the handler got it", async () => handler.received.length === 1);
    } finally {
      await c.close();
      await handler.close();
    }
  });
});
