// The agent's sending side publishing through relays in batches (POST /relay/publish/batch):
// concurrent publishes to one relay go as one signed request, each message gets the outcome its
// own answer means, and a relay without the batch endpoint gets lone publishes. On a real
// nats-server and real relays over TLS.
import Fastify, { type FastifyInstance } from "fastify";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeliveryStates } from "../../src/agent/outbound/delivery-state.ts";
import { agentNames } from "../../src/agent/names.ts";
import { OutboundDelivery, type Outcome } from "../../src/agent/outbound/outbound.ts";
import { OutboxStore } from "../../src/agent/outbound/outbox.ts";
import { relayOutcome, relayPublisher } from "../../src/agent/relays/relays.ts";
import { DiscoveryClient } from "../../src/discovery/client.ts";
import { Nats } from "../../src/nats/connection.ts";
import type { Message } from "../../src/protocol/message.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { createRuntimeMetrics } from "../../src/server/metrics.ts";
import { scrapeMetrics } from "../support/agent-harness.ts";
import { signed } from "../support/fixtures.ts";
import { alice, baseUrl, bob, ids, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";
import { metricValue } from "../support/probes.ts";

let env: RelayEnv;
/** Default limits. */
let hub: RunningRelay;
/** Messages of at most 16 KiB. */
let small: RunningRelay;
/** Two requests a minute per agent. */
let tight: RunningRelay;
/** 16 KiB stored per agent per hour. */
let quota: RunningRelay;

beforeAll(async () => {
  env = await relayEnv();
  [hub, small, tight, quota] = await Promise.all([
    runRelay(env, {}),
    runRelay(env, { limits: { maxMessageBytes: 16_384 } }),
    runRelay(env, { limits: { perAgentPerMinute: 2 } }),
    runRelay(env, { limits: { perAgentBytesPerHour: 16_384 } }),
  ]);
});
afterAll(async () => {
  await Promise.all([hub, small, tight, quota].map((r) => r?.close()));
  await env?.close();
});

/** The publish requests a relay has answered 2xx: a lone publish or a whole batch counts one. */
const publishRequests = async (relay: RunningRelay) =>
  metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_operations_total", {
    operation: "publish",
    result: "ok",
  });

/** Everything waiting for `who` at a relay, taken (acknowledged). */
async function drain(relay: RunningRelay, who: typeof bob): Promise<string[]> {
  const client = new RelayClient(baseUrl(relay), who.signing, env.http);
  const { messages } = await client.pull({ limit: 1000 });
  if (messages.length) await client.ackMany(ids(messages));
  return ids(messages);
}

/** Publish these at once through the agent's relay publisher: one event-loop turn, one batch. */
const atOnce = (
  publisher: ReturnType<typeof relayPublisher>,
  url: string,
  messages: Message[],
  recipients = ["bob-agent"],
) => Promise.all(messages.map((m) => publisher.publish(url, m, recipients)));

/** The outcome a lone POST /relay/publish of `m` gets, through the same classification. */
const loneOutcome = (url: string, m: Message, recipients = ["bob-agent"]) =>
  relayOutcome(url, new RelayClient(url, alice.signing, env.http).publish(m, recipients));

describe("sending through a relay in batches", () => {
  it("sends an outbox backlog for one relay as batch requests, and every message arrives", async () => {
    const url = baseUrl(hub);
    const names = agentNames(alice.agentId);
    const log = pino({ level: process.env.IFP_TEST_LOG ?? "silent" });
    const conn = new Nats({ url: env.nats.url, name: "relay batch test" }, log);
    await conn.start();
    const outbox = new OutboxStore(conn, names);
    const states = new DeliveryStates(conn, names.outboxStateBucket);
    await outbox.ensure();
    await states.ensure();
    const delivery = new OutboundDelivery({
      nats: conn,
      names,
      states,
      http: env.http,
      discovery: new DiscoveryClient(env.http),
      log,
      metrics: createRuntimeMetrics("agent"),
      // Bob is reachable only through the hub.
      options: {
        backoffMs: [60_000],
        retryForMs: 3600_000,
        peerUrls: new Map(),
        peerRelays: new Map([["bob-agent", [url]]]),
      },
      relay: relayPublisher(alice.signing, env.http),
      onGiveUp: async () => {},
    });
    try {
      // A backlog: queued before the sender starts.
      const backlog = Array.from({ length: 40 }, (_, i) =>
        signed(alice, "bob-agent", { conversation_id: `conv:backlog-${i}` }, `backlog ${i}`),
      );
      for (const m of backlog) await outbox.enqueue(m);
      const before = await publishRequests(hub);
      delivery.start();
      const records = await waitFor(
        "every message delivered",
        async () => {
          const rs = await Promise.all(backlog.map((m) => states.get(m.headers.message_id)));
          return rs.every((r) => r?.state === "delivered") ? rs : undefined;
        },
        30_000,
        200,
      );
      expect(records.map((r) => r!.recipients[0]!.via)).toEqual(backlog.map(() => `relay:${url}`));
      expect(records.map((r) => r!.recipients[0]!.attempts)).toEqual(backlog.map(() => 1));
      // Each in bob's mailbox at the relay, once.
      expect((await drain(hub, bob)).sort()).toEqual(ids(backlog).sort());
      // Fewer signed requests than messages: the relay took them in batches.
      const requests = (await publishRequests(hub)) - before;
      expect(requests).toBeGreaterThan(0);
      expect(requests).toBeLessThanOrEqual(backlog.length / 2);
    } finally {
      await delivery.stop();
      await conn.close();
    }
  });

  it("publishes what comes in one turn as one request", async () => {
    const url = baseUrl(hub);
    const publisher = relayPublisher(alice.signing, env.http);
    const five = Array.from({ length: 5 }, () => signed(alice, "bob-agent"));
    let before = await publishRequests(hub);
    const outcomes = await atOnce(publisher, url, five);
    expect(outcomes).toEqual(five.map(() => ({ kind: "delivered", via: `relay:${url}`, status: 202 })));
    expect((await publishRequests(hub)) - before).toBe(1);
    expect((await drain(hub, bob)).sort()).toEqual(ids(five).sort());
    // Alone in its turn: one request too (which endpoint, the relay without batches below shows).
    before = await publishRequests(hub);
    const lone = signed(alice, "bob-agent");
    expect(await publisher.publish(url, lone, ["bob-agent"])).toEqual({
      kind: "delivered",
      via: `relay:${url}`,
      status: 202,
    });
    expect((await publishRequests(hub)) - before).toBe(1);
    expect(await drain(hub, bob)).toEqual([lone.headers.message_id]);
  });

  it("gives a bad message of a batch its own final outcome and delivers the others", async () => {
    const publisher = relayPublisher(alice.signing, env.http);
    // Not narrowed: the unknown recipient is the message's own, 404 as a lone publish would be.
    const hubUrl = baseUrl(hub);
    const good = [signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    const unknown = signed(alice, ["bob-agent", "nobody"]);
    let before = await publishRequests(hub);
    const outcomes = await atOnce(publisher, hubUrl, [good[0]!, unknown, good[1]!], []);
    expect((await publishRequests(hub)) - before).toBe(1);
    expect(outcomes[0]).toEqual({ kind: "delivered", via: `relay:${hubUrl}`, status: 202 });
    expect(outcomes[2]).toEqual({ kind: "delivered", via: `relay:${hubUrl}`, status: 202 });
    expect(outcomes[1]).toEqual({
      kind: "failed",
      via: `relay:${hubUrl}`,
      status: 404,
      error: "404 not_found: this relay does not serve nobody; nothing was stored; a 4xx is never retried",
    });
    expect(outcomes[1]).toEqual(await loneOutcome(hubUrl, unknown, []));
    expect((await drain(hub, bob)).sort()).toEqual(ids(good).sort());

    // Narrowed to bob, as the outbound delivery publishes: a message over the relay's size is refused alone.
    const smallUrl = baseUrl(small);
    const fits = [signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    const big = signed(alice, "bob-agent", {}, "x".repeat(20_000));
    before = await publishRequests(small);
    const sized = await atOnce(publisher, smallUrl, [fits[0]!, big, fits[1]!]);
    expect((await publishRequests(small)) - before).toBe(1);
    expect(sized.map((o) => [o.kind, o.status])).toEqual([
      ["delivered", 202],
      ["failed", 413],
      ["delivered", 202],
    ]);
    // A lone publish of it is refused for its size too (by the body limit, in other words).
    expect(await loneOutcome(smallUrl, big)).toMatchObject({
      kind: "failed",
      status: 413,
      error: expect.stringMatching(/^413 payload_too_large: /),
    });
    expect(sized[1]).toMatchObject({
      error: expect.stringMatching(/^413 payload_too_large: the message is \d+ bytes; this relay takes at most 16384/),
    });
    expect((await drain(small, bob)).sort()).toEqual(ids(fits).sort());
  });

  it("fails a message over the relay's limit alone, and the others of its batch arrive", async () => {
    const publisher = relayPublisher(alice.signing, env.http);
    // Two messages far over the relay's 16 KiB: each is refused with 413 (one in its batch's
    // results, one alone past the batch's 1 MiB), which says nothing about the two that fit.
    const smallUrl = baseUrl(small);
    const fits = [signed(alice, "bob-agent"), signed(alice, "bob-agent")];
    const huge = [
      signed(alice, "bob-agent", {}, "y".repeat(1_000_000)),
      signed(alice, "bob-agent", {}, "z".repeat(1_000_000)),
    ];
    const outcomes = await atOnce(publisher, smallUrl, [fits[0]!, huge[0]!, fits[1]!, huge[1]!]);
    expect(outcomes.map((o) => [o.kind, o.status])).toEqual([
      ["delivered", 202],
      ["failed", 413],
      ["delivered", 202],
      ["failed", 413],
    ]);
    expect((await drain(small, bob)).sort()).toEqual(ids(fits).sort());
  });

  it("retries after the relay's Retry-After when a batch, or one message of it, must wait", async () => {
    const publisher = relayPublisher(alice.signing, env.http);
    // Two requests a minute: a batch of five costs five, and is refused as a whole until a full
    // minute's worth is there; each of its messages waits the Retry-After (30 s for one request).
    const tightUrl = baseUrl(tight);
    const five = Array.from({ length: 5 }, () => signed(alice, "bob-agent"));
    const refused = await atOnce(publisher, tightUrl, five);
    const wait: Outcome = {
      kind: "retry",
      via: `relay:${tightUrl}`,
      status: 429,
      error: "429 rate_limited: rate limit of 2 requests per minute exceeded for alice-agent",
      afterMs: 30_000,
      decision: "429 is not final: retry after Retry-After 30 s",
    };
    expect(refused).toEqual(five.map(() => wait));
    expect(await drain(tight, bob)).toEqual([]);

    // A byte quota of 16 KiB an hour: two messages of about 6.5 KiB fit, the rest of the batch
    // is refused message by message, each with its own Retry-After.
    const quotaUrl = baseUrl(quota);
    const heavy = Array.from({ length: 5 }, (_, i) => signed(alice, "bob-agent", {}, `${i}`.repeat(6_000)));
    const before = await publishRequests(quota);
    const outcomes = await atOnce(publisher, quotaUrl, heavy);
    expect((await publishRequests(quota)) - before).toBe(1);
    expect(outcomes.slice(0, 2)).toEqual(
      heavy.slice(0, 2).map(() => ({ kind: "delivered", via: `relay:${quotaUrl}`, status: 202 })),
    );
    for (const o of outcomes.slice(2)) {
      expect(o).toMatchObject({
        kind: "retry",
        via: `relay:${quotaUrl}`,
        status: 429,
        error: expect.stringMatching(/^429 rate_limited: byte quota of 16384 bytes per hour exceeded for alice-agent/),
      });
      const after = (o as { afterMs?: number }).afterMs!;
      expect(after % 1000).toBe(0);
      expect(after).toBeGreaterThanOrEqual(1000);
      expect((o as { decision?: string }).decision).toBe(`429 is not final: retry after Retry-After ${after / 1000} s`);
    }
    // What a lone publish of one of them is answered now: the same refusal.
    const lone = await loneOutcome(quotaUrl, heavy[2]!);
    expect(lone).toMatchObject({ kind: "retry", status: 429, error: (outcomes[2] as { error: string }).error });
    expect((await drain(quota, bob)).sort()).toEqual(ids(heavy.slice(0, 2)).sort());
  });

  it("sends a batch refused as a whole for its body (413) again as lone publishes, and tries batches again after", async () => {
    // A relay whose batch body limit is lower than this sender's batches: 413 for the request,
    // which says nothing about any one message of it.
    const fake = await relayWithoutBatches({ batchStatus: 413 });
    const batchTries = () => fake.requests.filter((r) => r.path === "/relay/publish/batch").length;
    try {
      const publisher = relayPublisher(alice.signing, env.http);
      const first = Array.from({ length: 4 }, () => signed(alice, "bob-agent"));
      expect(await atOnce(publisher, fake.url, first)).toEqual(
        first.map(() => ({ kind: "delivered", via: `relay:${fake.url}`, status: 202 })),
      );
      expect(batchTries()).toBe(1);
      expect(fake.published.sort()).toEqual(ids(first).sort());
      // Not taken for a relay without batches: the next burst asks for a batch again.
      const second = Array.from({ length: 3 }, () => signed(alice, "bob-agent"));
      expect(await atOnce(publisher, fake.url, second)).toEqual(
        second.map(() => ({ kind: "delivered", via: `relay:${fake.url}`, status: 202 })),
      );
      expect(batchTries()).toBe(2);
      expect(fake.published.sort()).toEqual(ids([...first, ...second]).sort());
    } finally {
      await fake.close();
    }
  });

  it("falls back to lone publishes for a relay without the batch endpoint, and loses nothing", async () => {
    const fake = await relayWithoutBatches();
    const batchTries = () => fake.requests.filter((r) => r.path === "/relay/publish/batch").length;
    try {
      const publisher = relayPublisher(alice.signing, env.http);
      // Alone in its turn: the plain endpoint, the batch endpoint never asked.
      const alone = signed(alice, "bob-agent");
      expect(await publisher.publish(fake.url, alone, ["bob-agent"])).toEqual({
        kind: "delivered",
        via: `relay:${fake.url}`,
        status: 202,
      });
      expect(fake.requests.map((r) => r.path)).toEqual(["/relay/publish"]);

      const first = Array.from({ length: 5 }, () => signed(alice, "bob-agent"));
      const outcomes = await atOnce(publisher, fake.url, first);
      expect(outcomes).toEqual(first.map(() => ({ kind: "delivered", via: `relay:${fake.url}`, status: 202 })));
      // One try of the batch endpoint, then each message alone, narrowed as asked.
      expect(batchTries()).toBe(1);
      expect(fake.published.slice(1).sort()).toEqual(ids(first).sort());
      expect(
        fake.requests.filter((r) => r.path === "/relay/publish").every((r) => r.query === "recipient=bob-agent"),
      ).toBe(true);

      // Remembered: the next burst goes straight to lone publishes.
      const second = Array.from({ length: 5 }, () => signed(alice, "bob-agent"));
      expect(await atOnce(publisher, fake.url, second)).toEqual(
        second.map(() => ({ kind: "delivered", via: `relay:${fake.url}`, status: 202 })),
      );
      expect(batchTries()).toBe(1);
      expect(fake.published.sort()).toEqual(ids([alone, ...first, ...second]).sort());
    } finally {
      await fake.close();
    }
  });
});

/**
 * A relay of an older kind over real TLS: POST /relay/publish only (fastify answers 404 for
 * any other route), each publish answered 202 and recorded; with `batchStatus`, a relay that
 * has the batch endpoint but refuses every batch as a whole with that status.
 */
async function relayWithoutBatches(opts: { batchStatus?: number } = {}) {
  const requests: { path: string; query: string }[] = [];
  const published: string[] = [];
  const app: FastifyInstance = Fastify({ https: { cert: env.tls.cert, key: env.tls.key } });
  app.addHook("onRequest", async (req) => {
    const [path, query = ""] = req.url.split("?");
    requests.push({ path: path!, query });
  });
  if (opts.batchStatus) {
    const status = opts.batchStatus;
    app.post("/relay/publish/batch", async (_req, reply) =>
      reply
        .code(status)
        .send({ status: "error", code: "payload_too_large", message: "the request body exceeds the size limit" }),
    );
  }
  app.post("/relay/publish", async (req, reply) => {
    const id = (req.body as Message).headers.message_id;
    published.push(id);
    return reply.code(202).send({ status: "accepted", message_id: id, recipients: 1, stored: 1, duplicates: 0 });
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const port = (app.server.address() as { port: number }).port;
  return { url: `https://localhost:${port}`, requests, published, close: () => app.close() };
}
