// The sending side's schedules against real servers: one message to several recipients (each on
// its own schedule), the message's ttl_seconds, and the fallback to a relay after a network error.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { identity, peerOf } from "../support/fixtures.ts";
import { outboxSettled } from "../support/probes.ts";
import { runAgent } from "../support/agent-harness.ts";
import { outboundResults, record, scriptedPeer, send, untilState } from "../support/outbox-harness.ts";
import { alice, baseUrl, bob, clientOf, ids, relayEnv, runRelay, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

describe("a message to several recipients", () => {
  it("keeps one schedule and one record per recipient: the one that is up gets one request, the failing one is retried until it recovers", async () => {
    const up = await scriptedPeer(env.tls, () => ({ status: 202 }));
    const flaky = await scriptedPeer(env.tls, (n) => ({ status: n <= 2 ? 503 : 202 }));
    const sender = await runAgent({
      self: identity("sender-multi"),
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [
          { ...peerOf(identity("up-peer")), url: up.url },
          { ...peerOf(identity("flaky-peer")), url: flaky.url },
        ],
        outbound: { backoff: ["700ms"], retryFor: "1m" },
      },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: ["up-peer", "flaky-peer"], text: "to both" });
      expect(sent.status).toBe(202);
      const id = sent.body.message_id;
      // While the flaky one waits for its next attempt, the other is already done.
      const midway = await waitFor("up-peer delivered while flaky-peer retries", async () => {
        const r = await record(sender.localApiUrl, id);
        const [u, f] = [
          r?.recipients.find((x: any) => x.agent === "up-peer"),
          r?.recipients.find((x: any) => x.agent === "flaky-peer"),
        ];
        return u?.state === "delivered" && f?.state === "retrying" ? { r, u, f } : undefined;
      });
      expect(midway.r.state).toBe("retrying");
      expect(midway.u).toMatchObject({ attempts: 1, last_status: 202, via: `${up.url}/.well-known/agent/inbox` });
      expect(midway.f).toMatchObject({ last_status: 503, next_attempt_at: expect.any(String) });

      const done = await untilState(sender.localApiUrl, id, "delivered");
      expect(done.recipients).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ agent: "up-peer", state: "delivered", attempts: 1 }),
          expect.objectContaining({ agent: "flaky-peer", state: "delivered", attempts: 3, last_status: 202 }),
        ]),
      );
      const at = (agent: string) => Date.parse(done.recipients.find((x: any) => x.agent === agent).delivered_at);
      expect(at("up-peer")).toBeLessThan(at("flaky-peer"));
      // The flaky one's retries never repeated the delivered recipient, and nothing is left to send.
      await waitFor("the outbox settled", () => outboxSettled(env.nats.url, "sender-multi"), 15_000);
      await consistently(
        "one request to up-peer, three to flaky-peer",
        () => up.requests.length === 1 && flaky.requests.length === 3,
      );
      expect([...up.requests, ...flaky.requests].every((r) => r.headers["idempotency-key"] === id)).toBe(true);
      // The flaky peer's attempts kept its own backoff (700 ms ± 10 %), not the other's pace.
      const gaps = flaky.requests.slice(1).map((r, i) => r.at - flaky.requests[i]!.at);
      for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(600);
      expect(await outboundResults(sender)).toMatchObject({ delivered: 2, retry: 2 });
    } finally {
      await sender.close();
      await Promise.all([up.close(), flaky.close()]);
    }
  });
});

describe("ttl_seconds on the sending side", () => {
  // The backoff (5 s) is longer than the TTL (2 s): after the first failure the only question is
  // what happens when the TTL runs out.
  async function expiring() {
    const peer = await scriptedPeer(env.tls, () => ({ status: 503 }));
    const self = identity(`sender-ttl-${Math.random().toString(36).slice(2, 6)}`);
    const sender = await runAgent({
      self,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [{ ...peerOf(identity("slow-peer")), url: peer.url }],
        outbound: { backoff: ["5s"], retryFor: "1m" },
      },
    });
    const sent = await send(sender.localApiUrl, { to: "slow-peer", text: "only for two seconds", ttl_seconds: 2 });
    expect(sent.status).toBe(202);
    const expiresAt = Date.parse(sent.body.message.headers.date) + 2_000;
    return {
      peer,
      sender,
      agentId: self.agentId,
      id: sent.body.message_id as string,
      expiresAt,
      async close() {
        await sender.close();
        await peer.close();
      },
    };
  }

  it("gives the recipient up as undeliverable once the TTL has passed, long before retryFor, and stops trying", async () => {
    const t = await expiring();
    try {
      const r = await untilState(t.sender.localApiUrl, t.id, "undeliverable", 20_000);
      expect(r.recipients[0]).toMatchObject({
        state: "undeliverable",
        decision: "the message's ttl_seconds passed",
        last_error: expect.stringMatching(/^503.*ttl_seconds passed$/),
      });
      expect(Date.parse(r.updated_at)).toBeLessThan(t.expiresAt + 5_000);
      const n = t.peer.requests.length;
      expect(n).toBeGreaterThanOrEqual(1);
      // The witness: given up, the message is acknowledged; no retry of it is pending.
      await waitFor("the outbox settled", () => outboxSettled(env.nats.url, t.agentId), 15_000);
      await consistently("no attempt after giving up", () => t.peer.requests.length === n, 1500);
      expect(await outboundResults(t.sender)).toMatchObject({ undeliverable: 1 });
    } finally {
      await t.close();
    }
  });

  // The last wait is clamped to the instant the TTL runs out; at that instant the recipient is
  // given up without a request (a relay would refuse an expired message anyway).
  it("makes no attempt once the TTL has passed", async () => {
    const t = await expiring();
    try {
      await untilState(t.sender.localApiUrl, t.id, "undeliverable", 20_000);
      expect(t.peer.requests.length).toBeGreaterThanOrEqual(1);
      expect(t.peer.requests.map((r) => r.at).filter((at) => at >= t.expiresAt)).toEqual([]);
    } finally {
      await t.close();
    }
  });
});

describe("relay fallback", () => {
  it("sends through the peer's relay when its inbox cannot be reached, and the message waits there", async () => {
    const relay = await runRelay(env);
    const sender = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      // Port 1 on loopback: connection refused, a network error.
      spec: {
        peers: [{ ...peerOf(bob), url: "https://localhost:1", relay: { urls: [baseUrl(relay)] } }],
        outbound: { backoff: ["300ms"], retryFor: "30s" },
        // A clear message falls back only to a relay marked trusted (docs/encryption.md).
        encryption: { relayTrust: [{ url: baseUrl(relay), level: "trusted" }] },
      },
    });
    try {
      const sent = await send(sender.localApiUrl, { to: "bob-agent", text: "through the relay, since bob is away" });
      const done = await untilState(sender.localApiUrl, sent.body.message_id, "delivered");
      expect(done.recipients).toEqual([
        expect.objectContaining({
          agent: "bob-agent",
          state: "delivered",
          attempts: 1,
          last_status: 202,
          via: `relay:${baseUrl(relay)}`,
        }),
      ]);
      const waiting = (await clientOf(env, relay, bob).pull()).messages;
      expect(ids(waiting)).toEqual([sent.body.message_id]);
      expect(waiting[0]!.headers.from).toEqual({ agent: "alice-agent" });
      expect(waiting[0]!.security!.signatures![0]!.key_id).toBe("alice-agent#key-1");
    } finally {
      await sender.close();
      await relay.close();
    }
  });
});
