import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalApiClient } from "../../src/client/local.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { identity, peerOf } from "../support/fixtures.ts";
import { runAgent, scrapeMetrics } from "../support/agent-harness.ts";
import { baseUrl, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";
import { metricValue } from "../support/probes.ts";
import { scriptedPeer } from "../support/outbox-harness.ts";

const alice = identity("alice-agent");
const erin = identity("erin-agent");
/** An address nothing listens on: every request to it is a network error. */
const NOWHERE = "https://localhost:1";

let env: RelayEnv;
beforeAll(async () => {
  env = await relayEnv();
});
afterAll(async () => {
  await env?.close();
});

/** Publish requests a relay has answered, whatever the answer. */
const publishes = async (relay: RunningRelay) =>
  metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_operations_total", { operation: "publish" });

describe("relay fallback", () => {
  it("never asks a relay again for a message it refused with a 4xx, while retrying the relay that was unreachable (spec 7.2 rule 3)", async () => {
    // r1 does not serve erin: it answers 404, a final answer. The second relay cannot be reached.
    const r1 = await runRelay(env, { agents: [peerOf(alice)] });
    const relays = [baseUrl(r1), NOWHERE];
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [{ ...peerOf(erin), relay: { urls: relays } }],
        outbound: { backoff: ["200ms"], retryFor: "4s" },
        encryption: { relayTrust: relays.map((url) => ({ url, level: "self-operated" as const })) },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      const sent = await local.send({ to: "erin-agent", text: "to an agent r1 does not serve" });
      const record = await waitFor(
        "given up",
        async () => {
          const r = await local.status(sent.message_id);
          return r.state === "undeliverable" ? r : undefined;
        },
        20_000,
      );
      const erinState = record.recipients[0]!;
      // Several passes over the relay list: the unreachable relay each time, r1 only once.
      expect(erinState.attempts).toBeGreaterThanOrEqual(3);
      expect(await publishes(r1)).toBe(1);
      expect(erinState).toMatchObject({
        refused_relays: [baseUrl(r1)],
        last_error: expect.stringMatching(/1 relay that refused it for good not asked again/),
      });
    } finally {
      await a.close();
      await r1.close();
    }
  });

  it("tries the configured relays, and the agent's own, when an https agent id's identity document cannot be had", async () => {
    // carol's runtime answers 404 under /bob; nothing answers at NOWHERE.
    const carol = await runAgent({ self: identity("carol-agent"), natsUrl: env.nats.url, tls: env.tls, spec: {} });
    const bob = identity(`${carol.url.replace("127.0.0.1", "localhost")}/bob`);
    const dave = identity(`${NOWHERE}/dave`);
    const r = await runRelay(env, { agents: [peerOf(alice), peerOf(bob), peerOf(dave)] });
    const relayUrl = baseUrl(r);
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        // bob's relay is configured for him; dave is no peer at all, and alice's own relay serves him.
        peers: [{ ...peerOf(bob), relay: { urls: [relayUrl] } }],
        relay: { urls: [relayUrl], receive: "poll", pollInterval: "1s" },
        outbound: { backoff: ["300ms"], retryFor: "20s" },
        encryption: { relayTrust: [{ url: relayUrl, level: "self-operated" }] },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      for (const who of [bob, dave]) {
        const sent = await local.send({ to: who.agentId, text: `to ${who.agentId}` });
        const record = await waitFor(
          `delivered to ${who.agentId}`,
          async () => {
            const s = await local.status(sent.message_id);
            return s.state === "delivered" || s.state === "failed" ? s : undefined;
          },
          15_000,
        );
        expect(record.recipients[0]).toMatchObject({ state: "delivered", via: `relay:${relayUrl}` });
        const waiting = (await new RelayClient(relayUrl, who.signing, env.http).pull()).messages;
        expect(waiting.map((m) => m.headers.message_id)).toEqual([sent.message_id]);
      }
    } finally {
      await a.close();
      await carol.close();
      await r.close();
    }
  });

  it("falls back to the peer's relays when its inbox answers 5xx, and not when it refuses with a 4xx", async () => {
    const frank = identity("frank-agent");
    const r = await runRelay(env, { agents: [peerOf(alice), peerOf(erin), peerOf(frank)] });
    const relayUrl = baseUrl(r);
    const down = await scriptedPeer(env.tls, () => ({ status: 503, headers: { "retry-after": "60" } }));
    const refusing = await scriptedPeer(env.tls, () => ({ status: 400 }));
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [
          { ...peerOf(erin), url: down.url, relay: { urls: [relayUrl] } },
          { ...peerOf(frank), url: refusing.url, relay: { urls: [relayUrl] } },
        ],
        outbound: { backoff: ["200ms"], retryFor: "20s" },
        encryption: { relayTrust: [{ url: relayUrl, level: "self-operated" }] },
      },
    });
    try {
      const local = new LocalApiClient(a.localApiUrl);
      const toErin = await local.send({ to: "erin-agent", text: "erin's inbox answers 503" });
      const erins = await waitFor("erin's settled", async () => {
        const s = await local.status(toErin.message_id);
        return s.state === "delivered" || s.state === "failed" ? s : undefined;
      });
      expect(erins.recipients[0]).toMatchObject({ state: "delivered", via: `relay:${relayUrl}`, attempts: 1 });
      // One POST to the inbox for it, then the relay (the runtime's capabilities.update goes the same way).
      const ids = (list: { headers: { message_id: string } }[]) =>
        list.map((m) => m.headers.message_id).filter((id) => !id.startsWith("msg:capabilities-"));
      expect(ids(down.requests.map((q) => q.body))).toEqual([toErin.message_id]);
      expect(ids((await new RelayClient(relayUrl, erin.signing, env.http).pull()).messages)).toEqual([
        toErin.message_id,
      ]);
      const toFrank = await local.send({ to: "frank-agent", text: "frank's inbox refuses it" });
      const franks = await waitFor("frank's settled", async () => {
        const s = await local.status(toFrank.message_id);
        return s.state === "delivered" || s.state === "failed" ? s : undefined;
      });
      expect(franks.recipients[0]).toMatchObject({ state: "failed", via: `${refusing.url}/.well-known/agent/inbox` });
      expect(refusing.requests.map((q) => q.body.headers.message_id)).toContain(toFrank.message_id);
      expect(ids((await new RelayClient(relayUrl, frank.signing, env.http).pull()).messages)).toEqual([]);
    } finally {
      await a.close();
      await down.close();
      await refusing.close();
      await r.close();
    }
  });
});
