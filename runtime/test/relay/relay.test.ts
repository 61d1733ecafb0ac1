import { scrapeMetrics } from "../support/agent-harness.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contentDigest, signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { relayNames } from "../../src/contract/relay-stream.ts";
import { COPY_HEADERS } from "../../src/relay/mailbox.ts";
import { signed } from "../support/fixtures.ts";
import { metricValue } from "../support/probes.ts";
import { clockPast } from "../../../e2e/support/wait.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  clientOf,
  expectError,
  failure,
  ids,
  raw,
  readSse,
  relayEnv,
  runRelay,
  stranger,
  type RelayEnv,
} from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;
const c = (who: typeof alice) => clientOf(env, relay, who);

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env);
});
afterAll(async () => {
  await relay?.close();
  await env?.close();
});

describe("relay: store and forward", () => {
  it("publishes with 202, appends the trace entry, and lets only the recipient pull and acknowledge", async () => {
    const m = signed(alice, "bob-agent");
    const res = await c(alice).publish(m);
    expect(res.status).toBe(202);
    expect(JSON.parse(res.text)).toEqual({
      status: "accepted",
      message_id: m.headers.message_id,
      recipients: 1,
      stored: 1,
      duplicates: 0,
    });

    const { messages } = await c(bob).pull();
    expect(ids(messages)).toEqual([m.headers.message_id]);
    const got = messages[0]!;
    expect(got.trace!.received).toEqual([
      {
        by: "relay:https://localhost",
        with: "https+ifp-4",
        at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        from: "alice-agent",
      },
    ]);
    // Everything else is kept as sent: the sender's signature still covers it.
    const { trace: _t, ...rest } = got;
    expect(rest).toEqual(m);

    // Isolation: alice and carol see nothing of bob's and cannot acknowledge it.
    expect((await c(alice).pull()).messages).toEqual([]);
    expect((await c(carol).pull()).messages).toEqual([]);
    expect(await c(alice).ack(m.headers.message_id)).toBe(false);
    expect(await c(carol).ack(m.headers.message_id)).toBe(false);
    expect(ids((await c(bob).pull()).messages)).toEqual([m.headers.message_id]);

    expect(await c(bob).ack(m.headers.message_id)).toBe(true);
    expect((await c(bob).pull()).messages).toEqual([]);
    expect(await c(bob).ack(m.headers.message_id)).toBe(false);
  });

  it("hands a message out as it was sent: key order and unknown fields, the trace entry appended", async () => {
    const { body, ...rest } = signed(alice, "bob-agent");
    const sent = { zz_extension: { kept: true }, body, ...rest };
    expect((await c(alice).request("POST", "/relay/publish", sent)).status).toBe(202);
    const { text } = await c(bob).request("GET", "/relay/messages");
    expect(
      text.startsWith(`[${JSON.stringify(sent).slice(0, -1)},"trace":{"received":[{"by":"relay:https://localhost"`),
    ).toBe(true);
    expect(await c(bob).ack(rest.headers.message_id)).toBe(true);
  });

  it("authenticates before it looks at the body, and counts every answer per operation", async () => {
    const count = async (result: string) =>
      metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_operations_total", {
        operation: "publish",
        result,
      });
    const before = {
      invalid_signature: await count("invalid_signature"),
      invalid_format: await count("invalid_format"),
      ok: await count("ok"),
    };
    // Unsigned and malformed: refused for the signature, not for the body.
    const unsigned = await raw(env, relay, {
      method: "POST",
      path: "/relay/publish",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(unsigned).toMatchObject({ status: 401, body: { code: "invalid_signature" } });
    const bad = await c(alice).request("POST", "/relay/publish", { ifp: 4 });
    expect(JSON.parse(bad.text)).toMatchObject({
      code: "invalid_format",
      message: expect.stringMatching(/^the message does not follow IFP-4: headers: /),
    });
    const good = signed(alice, "bob-agent");
    expect((await c(alice).publish(good)).status).toBe(202);
    // Exactly the answers of this test, whatever ran before it.
    expect({
      invalid_signature: await count("invalid_signature"),
      invalid_format: await count("invalid_format"),
      ok: await count("ok"),
    }).toEqual({
      invalid_signature: before.invalid_signature + 1,
      invalid_format: before.invalid_format + 1,
      ok: before.ok + 1,
    });
    await c(bob).ack(good.headers.message_id);
  });

  it("keeps an existing trace and appends to it", async () => {
    const m = {
      ...signed(alice, "bob-agent"),
      trace: {
        received: [
          { by: "relay:https://earlier.example", with: "https+ifp-4", at: "2026-01-01T00:00:00Z", from: "alice-agent" },
        ],
      },
    };
    await c(alice).publish(m);
    const [got] = (await c(bob).pull()).messages;
    expect(got!.trace!.received!.map((e) => e.by)).toEqual([
      "relay:https://earlier.example",
      "relay:https://localhost",
    ]);
    await c(bob).ack(m.headers.message_id);
  });

  it("stores a message once per recipient, also when repeated after acknowledgement", async () => {
    const m = signed(alice, ["bob-agent", carol.agentId]);
    expect(JSON.parse((await c(alice).publish(m)).text)).toMatchObject({ recipients: 2, stored: 2, duplicates: 0 });
    const again = await c(alice).publish(m);
    expect(again.status).toBe(202);
    expect(JSON.parse(again.text)).toMatchObject({ stored: 0, duplicates: 2 });
    expect(ids((await c(bob).pull()).messages)).toEqual([m.headers.message_id]);
    expect(ids((await c(carol).pull()).messages)).toEqual([m.headers.message_id]);
    // Each recipient's copy has its own acknowledgement.
    expect(await c(bob).ack(m.headers.message_id)).toBe(true);
    expect(ids((await c(carol).pull()).messages)).toEqual([m.headers.message_id]);
    // A sender's retry after bob acknowledged does not bring the message back.
    expect(JSON.parse((await c(alice).publish(m)).text)).toMatchObject({ stored: 0, duplicates: 2 });
    expect((await c(bob).pull()).messages).toEqual([]);
    expect(await c(carol).ack(m.headers.message_id)).toBe(true);
  });

  it("pages oldest first with a cursor", async () => {
    const sent = [signed(alice, "bob-agent"), signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    for (const m of sent) await c(alice).publish(m);
    const first = await c(bob).pull({ limit: 2 });
    expect(ids(first.messages)).toEqual(ids(sent.slice(0, 2)));
    const page = await c(bob).request("GET", "/relay/messages?limit=2");
    expect(page.headers.get("link")).toBe(`</relay/messages?limit=2&after=${first.next}>; rel="next"`);
    const second = await c(bob).pull({ limit: 2, after: first.next });
    expect(ids(second.messages)).toEqual([sent[2]!.headers.message_id]);
    const tail = await c(bob).request("GET", `/relay/messages?limit=2&after=${second.next}`);
    expect(JSON.parse(tail.text)).toEqual([]);
    expect(tail.headers.get("link")).toBeNull();
    for (const m of sent) await c(bob).ack(m.headers.message_id);
  });

  it("acknowledges many messages in one request, and only the caller's", async () => {
    const forBob = [signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    const forCarol = signed(alice, carol.agentId);
    for (const m of [...forBob, forCarol]) await c(alice).publish(m);
    expect(await c(bob).ackMany([...ids(forBob), forCarol.headers.message_id, forBob[0]!.headers.message_id])).toEqual({
      acknowledged: ids(forBob),
      not_found: [forCarol.headers.message_id],
    });
    expect((await c(bob).pull()).messages).toEqual([]);
    expect(ids((await c(carol).pull()).messages)).toEqual([forCarol.headers.message_id]);
    expect(await failure(c(bob).ackMany([]))).toMatchObject({ status: 400, code: "invalid_format" });
    await c(carol).ack(forCarol.headers.message_id);
  });

  it("refuses an acknowledgement of too many or malformed ids whole with 400, removing nothing", async () => {
    const kept = signed(alice, "bob-agent");
    await c(alice).publish(kept);
    const id = kept.headers.message_id;
    const many = (n: number) => [id, ...Array.from({ length: n - 1 }, (_, i) => `missing-${i}`)];
    for (const body of [
      { message_ids: many(1001) },
      { message_ids: [id, "x".repeat(257)] },
      { message_ids: [id, ""] },
      { message_ids: [id, 7] },
      { message_ids: id },
      {},
    ]) {
      const res = await c(bob).request("POST", "/relay/messages/ack", body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "invalid_format" });
    }
    // None of the refused requests removed the copy they named.
    expect(ids((await c(bob).pull()).messages)).toEqual([id]);
    expect(await c(bob).ackMany(many(100))).toEqual({ acknowledged: [id], not_found: many(100).slice(1) });
    expect((await c(bob).pull()).messages).toEqual([]);
  });

  it("answers bad input with the documented 4xx and never a 5xx", async () => {
    const a = c(alice);
    // The signer must be the message's sender.
    await expectError(c(bob).publish(signed(alice, "bob-agent")), 401, "invalid_signature");
    // Unknown recipient: nothing is stored for anyone.
    const mixed = signed(alice, ["bob-agent", "nobody"]);
    await expectError(a.publish(mixed), 404, "not_found");
    expect(ids((await c(bob).pull()).messages)).not.toContain(mixed.headers.message_id);
    await expectError(a.request("POST", "/relay/publish", { ifp: 4 }), 400, "invalid_format");
    await expectError(a.request("POST", "/relay/publish", [1, 2]), 400, "invalid_format");
    await expectError(a.publish(signed(alice, "topic:not a topic")), 400, "invalid_format");
    await expectError(a.request("GET", "/relay/messages?limit=0"), 400, "invalid_format");
    await expectError(a.request("GET", "/relay/messages?after=-1"), 400, "invalid_format");
    await expectError(a.publish(signed(alice, "bob-agent", {}, "x".repeat(1_100_000))), 413, "payload_too_large");
    await expectError(a.request("GET", "/relay/nothing"), 404, "not_found");
    await expectError(a.request("DELETE", `/relay/messages/${"x".repeat(300)}`), 404, "not_found");
    await expectError(a.request("POST", "/relay/subscribe", { subscribe: { topics: [] } }), 400, "invalid_format");
    await expectError(
      a.request("POST", "/relay/subscribe", { push: { webhook: "http://127.0.0.1:9/hook" } }),
      400,
      "invalid_format",
    );
    // Invalid JSON, signed correctly.
    const url = `${baseUrl(relay)}/relay/publish`;
    const body = '{"ifp": 4,';
    const headers = await signRequest(
      { method: "POST", url, body, headers: { "content-type": "application/json" } },
      alice.signing,
    );
    expect(await raw(env, relay, { method: "POST", path: "/relay/publish", headers, body })).toMatchObject({
      status: 400,
      body: { code: "invalid_format" },
    });
    // Another media type.
    const textHeaders = await signRequest(
      { method: "POST", url, body: "hi", headers: { "content-type": "text/plain" } },
      alice.signing,
    );
    expect(
      await raw(env, relay, { method: "POST", path: "/relay/publish", headers: textHeaders, body: "hi" }),
    ).toMatchObject({ status: 415 });
  });

  it("refuses an expired message and never hands out one whose TTL passes while it waits", async () => {
    const stale = signed(alice, "bob-agent", { ttl_seconds: 1, date: new Date(Date.now() - 5000).toISOString() });
    const refused = await c(alice).publish(stale);
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.text).message).toMatch(/ttl_seconds \(1\) has already passed/);
    // TTL counts from headers.date: 10 s, of which 9 are gone.
    const older = signed(alice, "bob-agent", { ttl_seconds: 10, date: new Date(Date.now() - 9000).toISOString() });
    const short = signed(alice, "bob-agent", { ttl_seconds: 1 });
    const long = signed(alice, "bob-agent", { ttl_seconds: 600 });
    for (const m of [older, short, long]) expect((await c(alice).publish(m)).status).toBe(202);
    const storedBy = Date.now();
    expect(ids((await c(bob).pull()).messages)).toEqual(ids([older, short, long]));
    // The relay's clock: a copy is kept for the whole seconds its TTL had left when it was stored
    // (1 s for both), and hidden from then on.
    await clockPast("the copies' TTLs", storedBy + 1_000);
    expect(ids((await c(bob).pull()).messages)).toEqual([long.headers.message_id]);
    await c(bob).ack(long.headers.message_id);
  });

  it("hides a copy whose Ifp-Expires-At has passed from a pull and from the event stream, while JetStream still holds it", async () => {
    // A copy as the relay stores it, its TTL passed a minute ago, but without JetStream's
    // per-message TTL: the stream keeps it, so only the relay's own check at read time hides it.
    const names = relayNames(relay.relay);
    const stale = signed(alice, "bob-agent", { ttl_seconds: 60, date: new Date(Date.now() - 120_000).toISOString() });
    const h = natsHeaders();
    h.set(COPY_HEADERS.recipient, "bob-agent");
    h.set(COPY_HEADERS.messageId, stale.headers.message_id);
    h.set(COPY_HEADERS.expiresAt, new Date(Date.now() - 60_000).toISOString());
    h.set(COPY_HEADERS.sender, "alice-agent");
    await relay.nats.js.publish(names.copy("bob-agent", stale.headers.message_id), JSON.stringify(stale), {
      headers: h,
    });
    const fresh = signed(alice, "bob-agent");
    expect((await c(alice).publish(fresh)).status).toBe(202);

    expect(ids((await c(bob).pull()).messages)).toEqual([fresh.headers.message_id]);
    // The stream's first event is the fresh copy, stored after the expired one.
    expect((await readSse(env, relay, bob, { count: 1 })).map((e) => e.data.headers.message_id)).toEqual([
      fresh.headers.message_id,
    ]);
    // Still in the stream: nothing but the relay's check kept it from bob.
    const held = await relay.nats.jsm.streams.getMessage(names.stream, {
      last_by_subj: names.copy("bob-agent", stale.headers.message_id),
    });
    expect(held?.header.get(COPY_HEADERS.messageId)).toBe(stale.headers.message_id);
    await c(bob).ack(fresh.headers.message_id);
    await relay.nats.jsm.streams.purge(names.stream, { filter: names.copy("bob-agent", stale.headers.message_id) });
  });

  it("limits requests per agent with 429 and Retry-After", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: 2 } });
    try {
      const cl = clientOf(env, limited, alice);
      expect((await cl.request("GET", "/relay/messages")).status).toBe(200);
      expect((await cl.request("GET", "/relay/messages")).status).toBe(200);
      const res = await cl.request("GET", "/relay/messages");
      expect(res.status).toBe(429);
      expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "rate_limited" });
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      // Another agent has its own budget.
      expect((await clientOf(env, limited, bob).request("GET", "/relay/messages")).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});

describe("relay: request signatures", () => {
  const path = "/relay/messages";
  const at = (offsetMs: number) => new Date(Date.now() + offsetMs);

  it("accepts a fresh signature and refuses a stale, future, unknown-key, unsigned or tampered one with 401", async () => {
    const url = `${baseUrl(relay)}${path}`;
    expect(
      await raw(env, relay, {
        method: "GET",
        path,
        headers: await signRequest({ method: "GET", url }, bob.signing, at(-50_000)),
      }),
    ).toMatchObject({ status: 200 });
    // A signature lives 60 s, and the relay allows 5 minutes of clock skew either way.
    const stale = await raw(env, relay, {
      method: "GET",
      path,
      headers: await signRequest({ method: "GET", url }, bob.signing, at(-362_000)),
    });
    expect(stale).toMatchObject({
      status: 401,
      body: { status: "error", code: "invalid_signature", message: expect.stringMatching(/has expired|older than/) },
    });
    const future = await raw(env, relay, {
      method: "GET",
      path,
      headers: await signRequest({ method: "GET", url }, bob.signing, at(302_000)),
    });
    expect(future).toMatchObject({ status: 401, body: { code: "invalid_signature" } });
    expect(await raw(env, relay, { method: "GET", path, headers: {} })).toMatchObject({
      status: 401,
      body: { code: "invalid_signature", message: expect.stringMatching(/not signed/) },
    });
    // An agent the relay does not serve, and a key of bob's it does not know.
    expect(await failure(clientOf(env, relay, stranger).pull())).toMatchObject({ status: 401, code: "unknown_sender" });
    const { identity } = await import("../support/fixtures.ts");
    const bobsOtherKey = identity("bob-agent", "key-2");
    expect(await failure(clientOf(env, relay, bobsOtherKey).pull())).toMatchObject({
      status: 401,
      code: "invalid_signature",
    });
    // A key that claims to be bob's key-1 but is not.
    expect(await failure(clientOf(env, relay, identity("bob-agent")).pull())).toMatchObject({
      status: 401,
      code: "invalid_signature",
    });
  });

  it("refuses a signature replayed on another path or query, and a body that does not match", async () => {
    const url = `${baseUrl(relay)}${path}?limit=1`;
    const headers = await signRequest({ method: "GET", url }, bob.signing);
    expect(await raw(env, relay, { method: "GET", path: `${path}?limit=1`, headers })).toMatchObject({ status: 200 });
    expect(await raw(env, relay, { method: "GET", path: `${path}?limit=2`, headers })).toMatchObject({ status: 401 });
    expect(await raw(env, relay, { method: "GET", path: "/relay/dead-letters?limit=1", headers })).toMatchObject({
      status: 401,
    });
    expect(await raw(env, relay, { method: "DELETE", path: `${path}/x?limit=1`, headers })).toMatchObject({
      status: 401,
    });

    const m = signed(alice, "bob-agent");
    const body = JSON.stringify(m);
    const pubUrl = `${baseUrl(relay)}/relay/publish`;
    const h = await signRequest(
      { method: "POST", url: pubUrl, body, headers: { "content-type": "application/json" } },
      alice.signing,
    );
    const tampered = body.replace('"hello"', '"HELLO"');
    expect(await raw(env, relay, { method: "POST", path: "/relay/publish", headers: h, body: tampered })).toMatchObject(
      { status: 401, body: { message: expect.stringMatching(/Content-Digest does not match/) } },
    );
    // Even with a recomputed digest the signature no longer verifies.
    const redigested = { ...h, "content-digest": contentDigest(tampered) };
    expect(
      await raw(env, relay, { method: "POST", path: "/relay/publish", headers: redigested, body: tampered }),
    ).toMatchObject({ status: 401, body: { message: expect.stringMatching(/does not verify/) } });
    expect((await c(bob).pull()).messages).toEqual([]);
    expect(await raw(env, relay, { method: "POST", path: "/relay/publish", headers: h, body })).toMatchObject({
      status: 202,
    });
    expect(await c(bob).ack(m.headers.message_id)).toBe(true);
  });
});

describe("relay: topics", () => {
  it("fans a topic message out to each subscriber's mailbox, with its own acknowledgement", async () => {
    expect(await c(bob).subscribe(["capabilities.update"])).toEqual({
      status: "subscribed",
      agent: "bob-agent",
      topics: ["capabilities.update"],
      push: null,
    });
    await c(carol).subscribe(["capabilities.update", "gossip.exchange"]);
    await c(alice).subscribe(["capabilities.update"]);
    expect(await c(carol).subscriptions()).toMatchObject({ topics: ["capabilities.update", "gossip.exchange"] });

    const m = signed(alice, "topic:capabilities.update", { phase: "context" });
    const res = await c(alice).publish(m);
    // Alice is subscribed too, but a topic copy never goes back to its sender.
    expect(JSON.parse(res.text)).toMatchObject({ status: "accepted", recipients: 2, stored: 2 });
    for (const who of [bob, carol]) {
      const got = (await c(who).pull()).messages;
      expect(ids(got)).toEqual([m.headers.message_id]);
      expect(got[0]!.headers.to).toEqual([{ agent: "topic:capabilities.update" }]);
    }
    expect((await c(alice).pull()).messages).toEqual([]);
    expect(await c(bob).ack(m.headers.message_id)).toBe(true);
    expect(ids((await c(carol).pull()).messages)).toEqual([m.headers.message_id]);
    expect(await c(carol).ack(m.headers.message_id)).toBe(true);

    // A topic and a direct recipient in one message: one copy per agent.
    const both = signed(alice, ["topic:gossip.exchange", carol.agentId, "bob-agent"]);
    expect(JSON.parse((await c(alice).publish(both)).text)).toMatchObject({ recipients: 2, stored: 2 });
    expect(ids((await c(carol).pull()).messages)).toEqual([both.headers.message_id]);
    await c(carol).ack(both.headers.message_id);
    await c(bob).ack(both.headers.message_id);

    // After unsubscribing, nothing more arrives; a topic without subscribers stores nothing.
    await c(bob).unsubscribe(["capabilities.update"]);
    const later = signed(alice, "topic:capabilities.update");
    expect(JSON.parse((await c(alice).publish(later)).text)).toMatchObject({ recipients: 1 });
    expect((await c(bob).pull()).messages).toEqual([]);
    await c(carol).ack(later.headers.message_id);
    const nobody = signed(alice, "topic:nobody.listens");
    expect(JSON.parse((await c(alice).publish(nobody)).text)).toMatchObject({
      status: "accepted",
      recipients: 0,
      stored: 0,
    });
  });

  it("lets an agent subscribe only for itself", async () => {
    const res = await c(bob).request("POST", "/relay/subscribe", {
      subscribe: { topics: ["gossip.exchange"], agent: "alice-agent" },
    });
    expect(res.status).toBe(401);
    expect(JSON.parse(res.text)).toMatchObject({ status: "error", code: "invalid_signature" });
    expect((await c(alice).subscriptions()).topics).not.toContain("gossip.exchange");
  });
});
