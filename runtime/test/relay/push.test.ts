import { scrapeMetrics } from "../support/agent-harness.ts";
import { metricValue } from "../support/probes.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { signed } from "../support/fixtures.ts";
import WebSocket from "ws";
import { consistently } from "../../../e2e/support/wait.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  clientOf,
  ids,
  openWs,
  pushConsumerInfo,
  pushSettled,
  readSse,
  relayEnv,
  runRelay,
  waitFor,
  webhook,
  type RelayEnv,
} from "../support/relay-harness.ts";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

describe("relay: push over SSE and WebSocket", () => {
  let relay: RunningRelay;
  const c = (who: typeof alice) => clientOf(env, relay, who);
  beforeAll(async () => {
    relay = await runRelay(env);
  });
  afterAll(async () => {
    await relay?.close();
  });

  it("streams waiting and new messages over SSE, resumable with Last-Event-ID, removing nothing until acknowledged", async () => {
    const m1 = signed(alice, "bob-agent");
    await c(alice).publish(m1);
    const first = await readSse(env, relay, bob, { count: 1 });
    expect(first.map((e) => e.data.headers.message_id)).toEqual([m1.headers.message_id]);
    expect(first[0]!.data.trace.received).toHaveLength(1);

    // New messages arrive on an open stream.
    const m2 = signed(alice, "bob-agent");
    let opened!: () => void;
    const open = new Promise<void>((r) => (opened = r));
    const live = readSse(env, relay, bob, { lastEventId: first[0]!.id, count: 1, onOpen: opened });
    await open;
    await c(alice).publish(m2);
    const resumed = await live;
    expect(resumed.map((e) => e.data.headers.message_id)).toEqual([m2.headers.message_id]);
    expect(Number(resumed[0]!.id)).toBeGreaterThan(Number(first[0]!.id));

    // Not acknowledged: a fresh stream delivers both again.
    const again = await readSse(env, relay, bob, { count: 2 });
    expect(again.map((e) => e.data.headers.message_id)).toEqual(ids([m1, m2]));
    await c(bob).ack(m1.headers.message_id);
    const afterAck = await readSse(env, relay, bob, { count: 1 });
    expect(afterAck.map((e) => e.data.headers.message_id)).toEqual([m2.headers.message_id]);
    await c(bob).ack(m2.headers.message_id);

    // Isolation: carol's stream never carries bob's messages. Her stream is ordered, so her own
    // message published after bob's is the first event she gets.
    const m3 = signed(alice, "bob-agent");
    await c(alice).publish(m3);
    const forCarol = signed(alice, carol.agentId);
    await c(alice).publish(forCarol);
    expect((await readSse(env, relay, carol, { count: 1 })).map((e) => e.data.headers.message_id)).toEqual([
      forCarol.headers.message_id,
    ]);
    expect(ids((await c(bob).pull()).messages)).toEqual([m3.headers.message_id]);
    await c(bob).ack(m3.headers.message_id);
    await c(carol).ack(forCarol.headers.message_id);
  });

  it("pushes over WebSocket, removes a message on the client's ack and redelivers what was not acknowledged", async () => {
    const waiting = signed(alice, "bob-agent");
    await c(alice).publish(waiting);
    const s = await openWs(env, relay, bob);
    await waitFor("the waiting message", () => s.messages().length === 1);
    const m = signed(alice, "bob-agent");
    await c(alice).publish(m);
    await waitFor("the new message", () => s.messages().length === 2);
    expect(s.messages().map((f) => f.message.headers.message_id)).toEqual(ids([waiting, m]));
    expect(s.messages()[1].message.trace.received).toHaveLength(1);

    s.send({ type: "ack", message_id: m.headers.message_id });
    s.send({ type: "ack", message_id: "not-there" });
    s.send("not json");
    await waitFor("the answers", () => s.frames.filter((f) => f.type !== "message").length === 3);
    // Each ack is answered when its own removal finishes, so answers may come in any order.
    const acked = s.frames.filter((f) => f.type === "acked");
    expect(acked).toHaveLength(2);
    expect(acked).toEqual(
      expect.arrayContaining([
        { type: "acked", message_id: m.headers.message_id, ok: true },
        { type: "acked", message_id: "not-there", ok: false },
      ]),
    );
    expect(s.frames.find((f) => f.type === "error")).toMatchObject({ code: "invalid_format" });
    await s.close();
    expect(ids((await c(bob).pull()).messages)).toEqual([waiting.headers.message_id]);

    // A reconnect delivers the unacknowledged message again; ?after= skips what was seen.
    const again = await openWs(env, relay, bob);
    await waitFor("redelivery", () => again.messages().length === 1);
    expect(again.messages()[0].message.headers.message_id).toBe(waiting.headers.message_id);
    const seen = again.messages()[0].id as number;
    // Carol cannot acknowledge bob's message through her own socket.
    const carolWs = await openWs(env, relay, carol);
    carolWs.send({ type: "ack", message_id: waiting.headers.message_id });
    await waitFor("carol's answer", () => carolWs.frames.some((f) => f.type === "acked"));
    expect(carolWs.frames.find((f) => f.type === "acked")).toMatchObject({ ok: false });
    await carolWs.close();
    await again.close();
    // Resumed after `seen`: a message published now is the first one it gets (the stream is
    // ordered), so the waiting one at or before `seen` was skipped.
    const resumed = await openWs(env, relay, bob, seen);
    const later = signed(alice, "bob-agent");
    await c(alice).publish(later);
    await waitFor("the later message", () => resumed.messages().length >= 1);
    expect(resumed.messages().map((f) => f.message.headers.message_id)).toEqual([later.headers.message_id]);
    resumed.send({ type: "ack", message_id: waiting.headers.message_id });
    resumed.send({ type: "ack", message_id: later.headers.message_id });
    await waitFor("the acks", () => resumed.frames.filter((f) => f.type === "acked" && f.ok).length === 2);
    await resumed.close();
    expect((await c(bob).pull()).messages).toEqual([]);
  });

  it("acknowledges many copies with one WebSocket ack frame, only the caller's, each id once", async () => {
    const forBob = [signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    const forCarol = signed(alice, carol.agentId);
    for (const m of [...forBob, forCarol]) await c(alice).publish(m);
    const s = await openWs(env, relay, bob);
    await waitFor("bob's copies", () => s.messages().length === 2);
    // Too many ids, or a malformed one: refused whole with the error frame, nothing removed.
    s.send({ type: "ack", message_ids: [...ids(forBob), ...Array.from({ length: 999 }, (_, i) => `missing-${i}`)] });
    s.send({ type: "ack", message_ids: [forBob[0]!.headers.message_id, 7] });
    s.send({ type: "ack", message_ids: [] });
    await waitFor("the refusals", () => s.frames.filter((f) => f.type === "error").length === 3);
    for (const f of s.frames.filter((f) => f.type === "error"))
      expect(f).toMatchObject({ status: 400, code: "invalid_format", message: expect.stringMatching(/message_ids/) });
    expect(ids((await c(bob).pull()).messages)).toEqual(ids(forBob));
    // Carol's id is not bob's to acknowledge, and an id repeated is answered once.
    const mine = ids(forBob);
    s.send({ type: "ack", message_ids: [...mine, forCarol.headers.message_id, mine[0]!, "not-there"] });
    await waitFor("the answer", () => s.frames.some((f) => f.type === "acked"));
    expect(s.frames.filter((f) => f.type === "acked")).toEqual([
      { type: "acked", acknowledged: mine, not_found: [forCarol.headers.message_id, "not-there"] },
    ]);
    await s.close();
    expect((await c(bob).pull()).messages).toEqual([]);
    expect(ids((await c(carol).pull()).messages)).toEqual([forCarol.headers.message_id]);
    await c(carol).ack(forCarol.headers.message_id);
  });

  it("refuses an unsigned or wrongly signed WebSocket upgrade with 401", async () => {
    const url = `${baseUrl(relay).replace("https", "wss")}/relay/ws`;
    const statusOf = (ws: WebSocket) =>
      new Promise<number>((r) =>
        ws.once("unexpected-response", (_req, res) => r(res.statusCode ?? 0)).once("error", () => r(-1)),
      );
    expect(await statusOf(new WebSocket(url, { ca: env.tls.ca }))).toBe(401);
    // Signed for another path.
    const headers = await signRequest({ method: "GET", url: `${baseUrl(relay)}/relay/events` }, bob.signing);
    expect(await statusOf(new WebSocket(url, { headers, ca: env.tls.ca }))).toBe(401);
    expect(
      await statusOf(new WebSocket(`${baseUrl(relay).replace("https", "wss")}/elsewhere`, { ca: env.tls.ca })),
    ).toBe(404);
  });
});

describe("relay: webhook push", () => {
  it("pushes waiting and new messages, redelivers after a failure, and removes each only after a 2xx", async () => {
    const hook = await webhook(env, (n) => (n === 1 ? 500 : 200));
    const relay = await runRelay(env, { delivery: { retries: 3, backoffDelay: "200ms", timeout: "2s" } });
    const c = (who: typeof alice) => clientOf(env, relay, who);
    try {
      const waiting = signed(alice, "bob-agent");
      await c(alice).publish(waiting);
      expect(await c(bob).registerWebhook(hook.url)).toMatchObject({
        status: "subscribed",
        push: { webhook: hook.url },
      });
      await waitFor("the waiting message", () => hook.calls.length === 1);
      const m = signed(alice, "bob-agent");
      await c(alice).publish(m);
      await waitFor("the failed push and its retry", () => hook.calls.length === 3, 15_000);
      expect(hook.calls.map((x) => [x.body.headers.message_id, x.status])).toEqual([
        [waiting.headers.message_id, 200],
        [m.headers.message_id, 500],
        [m.headers.message_id, 200],
      ]);
      await waitFor(
        "the retried push counted",
        async () =>
          metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_deliveries_total", {
            transport: "webhook",
            result: "delivered",
          }) === 2,
      );
      const pushed = await scrapeMetrics(relay.metricsUrl);
      expect(metricValue(pushed, "ifp_relay_deliveries_total", { transport: "webhook", result: "failed" })).toBe(1);
      expect(metricValue(pushed, "ifp_relay_redeliveries_total", { transport: "webhook" })).toBe(1);
      const retry = hook.calls[2]!;
      expect(retry.headers).toMatchObject({
        "idempotency-key": m.headers.message_id,
        "ifp-message-id": m.headers.message_id,
        "ifp-delivery-attempt": "2",
        "content-type": expect.stringMatching(/^application\/json/),
      });
      expect(retry.body.trace.received).toEqual([
        expect.objectContaining({ by: "relay:https://localhost", from: "alice-agent" }),
      ]);
      await waitFor("removal from the mailbox", async () => (await c(bob).pull()).messages.length === 0);
      // Other agents' messages are not pushed to bob's webhook: stored for carol, and the hook
      // hears only bob's message published after it.
      const forCarol = signed(alice, carol.agentId);
      await c(alice).publish(forCarol);
      expect(ids((await c(carol).pull()).messages)).toEqual([forCarol.headers.message_id]);
      const after = signed(alice, "bob-agent");
      await c(alice).publish(after);
      await waitFor("the push of bob's message after carol's", () => hook.calls.length >= 4);
      await waitFor("bob's push consumer settled", () => pushSettled(env, relay, bob));
      await consistently(
        "no push of carol's message",
        () => hook.calls.length === 4 && hook.calls[3]!.body.headers.message_id === after.headers.message_id,
      );
      await waitFor("its removal from the mailbox", async () => (await c(bob).pull()).messages.length === 0);

      // Without a webhook, messages wait for pull again: once nothing pulls from bob's push
      // consumer any more, a copy published then stays in it, undelivered.
      expect(await c(bob).registerWebhook(null)).toMatchObject({ push: null });
      await waitFor("no pull waiting on bob's push consumer", async () => {
        const info = await pushConsumerInfo(env, relay, bob);
        return info.num_waiting === 0 && info.num_ack_pending === 0;
      });
      const later = signed(alice, "bob-agent");
      await c(alice).publish(later);
      expect(ids((await c(bob).pull()).messages)).toEqual([later.headers.message_id]);
      await waitFor("the copy waiting in bob's push consumer", async () => {
        return (await pushConsumerInfo(env, relay, bob)).num_pending === 1;
      });
      await consistently("no push without a webhook", async () => {
        const info = await pushConsumerInfo(env, relay, bob);
        return hook.calls.length === 4 && info.num_pending === 1 && info.num_ack_pending === 0;
      });
      expect(ids((await c(bob).pull()).messages)).toEqual([later.headers.message_id]);
    } finally {
      await relay.close();
      await hook.close();
    }
  });

  it("dead-letters a push that exhausts its retries, readable and removable by its owner only", async () => {
    const hook = await webhook(env, () => 503);
    const relay = await runRelay(env, { delivery: { retries: 2, backoffDelay: "100ms", timeout: "2s" } });
    const c = (who: typeof alice) => clientOf(env, relay, who);
    try {
      await c(bob).registerWebhook(hook.url);
      const m = signed(alice, "bob-agent");
      await c(alice).publish(m);
      const dead = await waitFor(
        "a dead letter",
        async () => {
          const d = await c(bob).deadLetters();
          return d.length ? d : undefined;
        },
        15_000,
      );
      expect(dead).toEqual([
        {
          message_id: m.headers.message_id,
          reason: "webhook answered 503; gave up after 3 attempts",
          at: expect.any(String),
          message: expect.objectContaining({ headers: m.headers }),
        },
      ]);
      expect(hook.calls).toHaveLength(3);
      // The move is a copy into the dead letters, then the removal from the mailbox and the count:
      // a reader may see the dead letter a moment before the rest.
      await waitFor(
        "the message gone from bob's mailbox",
        async () => (await c(bob).pull()).messages.length === 0,
        15_000,
      );
      await waitFor(
        "the dead letter counted",
        async () =>
          /ifp_dead_letters_total\{source="relay-push",mode="relay"\} 1/.test(await scrapeMetrics(relay.metricsUrl)),
        15_000,
      );
      expect(await c(alice).deadLetters()).toEqual([]);
      expect(await c(alice).removeDeadLetter(m.headers.message_id)).toBe(false);
      expect(await c(bob).removeDeadLetter(m.headers.message_id)).toBe(true);
      expect(await c(bob).deadLetters()).toEqual([]);
    } finally {
      await relay.close();
      await hook.close();
    }
  });

  it("dead-letters at once what the webhook refuses with a 4xx, and waits out a 429's Retry-After", async () => {
    const hook = await webhook(env, (n) =>
      n === 0 ? { status: 429, headers: { "retry-after": "1" } } : n === 1 ? 200 : 422,
    );
    const relay = await runRelay(env, { delivery: { retries: 5, backoffDelay: "50ms", timeout: "2s" } });
    const c = (who: typeof alice) => clientOf(env, relay, who);
    try {
      await c(bob).registerWebhook(hook.url);
      const throttled = signed(alice, "bob-agent");
      const t0 = Date.now();
      await c(alice).publish(throttled);
      await waitFor("delivery after the 429", () => hook.calls.length === 2, 15_000);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
      const refused = signed(alice, "bob-agent");
      await c(alice).publish(refused);
      const dead = await waitFor(
        "a dead letter",
        async () => {
          const d = await c(bob).deadLetters();
          return d.length ? d : undefined;
        },
        15_000,
      );
      expect(dead[0]).toMatchObject({
        message_id: refused.headers.message_id,
        reason: "webhook refused the message with 422",
      });
      expect(hook.calls.map((x) => x.status)).toEqual([429, 200, 422]);
    } finally {
      await relay.close();
      await hook.close();
    }
  });
});

describe("relay: shutdown", () => {
  it("closes promptly while SSE and WebSocket streams are open", async () => {
    const relay = await runRelay(env);
    // The SSE client would give up by itself after 40 s, and the WebSocket never: a close that
    // waited for its streams would take that long, or forever.
    const sse = readSse(env, relay, bob, { count: 1, waitMs: 40_000 });
    const ws = await openWs(env, relay, bob);
    const closed = new Promise<number>((r) => ws.ws.once("close", (code) => r(code)));
    const open = async (transport: string) =>
      metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_connections", { transport });
    await waitFor(
      "both streams open at the relay",
      async () => (await open("sse")) === 1 && (await open("websocket")) === 1,
    );
    const t0 = Date.now();
    await relay.close();
    // Far below the streams' own ends, and generous for a loaded machine.
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(await closed).toBeGreaterThan(1000);
    expect(await sse).toEqual([]);
  });
});
