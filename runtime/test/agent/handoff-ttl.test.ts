import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { clockPast } from "../../../e2e/support/wait.ts";
import { agentNames } from "../../src/agent/names.ts";
import { expiredFor } from "../../src/agent/inbound/handoff.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { handOffsSettled, metricValue } from "../support/probes.ts";

const alice = identity("alice-agent");
const pete = identity("pete-agent");
let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** The Ifp-Dead-Reason of every message on the agent's dead-letter subject. */
async function deadReasons(agentId: string): Promise<string[]> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const names = agentNames(agentId);
    const info = await jsm.streams.info(names.inboxStream, { subjects_filter: names.dead });
    const reasons: string[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && reasons.length < 50; seq++) {
      const m = await jsm.streams.getMessage(names.inboxStream, { seq }).catch(() => undefined);
      if (m?.subject === names.dead) reasons.push(m.header.get("Ifp-Dead-Reason"));
    }
    return reasons;
  } finally {
    await nc.close();
  }
}

describe("ttl_seconds at the hand-off", () => {
  it("never hands an expired message to the application: dropped with its reason, counted", async () => {
    let up = false;
    const handler = await startHandler(() => (up ? 200 : 503));
    const agent = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
    });
    try {
      // Expired on arrival (dated 10 s ago, 5 s to live), expiring while the handler is down, and one without a TTL.
      const stale = signed(pete, "alice-agent", { date: new Date(Date.now() - 10_000).toISOString(), ttl_seconds: 5 });
      const short = signed(pete, "alice-agent", { ttl_seconds: 2 });
      const lasting = signed(pete, "alice-agent", { ttl_seconds: 3600 });
      const plain = signed(pete, "alice-agent");
      for (const m of [stale, short, lasting, plain]) expect((await agent.post(m)).status).toBe(202);
      const expired = async () =>
        metricValue(await agent.scrape(), "ifp_handler_deliveries_total", { result: "expired" });
      await waitFor("the stale message dropped", async () => (await expired()) >= 1);
      // The protocol's clock: the short-lived message's ttl_seconds run out while the handler still refuses.
      await clockPast("the short-lived message's TTL", Date.parse(short.headers.date) + 2_000);
      up = true;
      await waitFor(
        "the live messages handed on",
        () =>
          [lasting, plain].every((m) =>
            handler.received.some((r) => r.body.headers.message_id === m.headers.message_id),
          ),
        30_000,
      );
      await waitFor("the short-lived message dropped", async () => (await expired()) === 2, 30_000);
      await waitFor("the hand-offs settled", () => handOffsSettled(nats.url, alice.agentId), 15_000);
      await consistently(
        "no expired message is handed on",
        () =>
          !handler.received.some((r) => [stale, short].some((m) => m.headers.message_id === r.body.headers.message_id)),
        1_000,
      );
      const reasons = await deadReasons("alice-agent");
      expect(reasons).toHaveLength(2);
      expect(reasons.every((r) => /^expired: ttl_seconds/.test(r))).toBe(true);
      // Expiry is not a handler failure: no dead-letter alarm.
      expect(metricValue(await agent.scrape(), "ifp_dead_letters_total", { source: "handler" })).toBe(0);
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("reads the TTL from the stored message defensively", () => {
    const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
    const now = Date.parse("2026-01-01T00:00:10Z");
    expect(expiredFor(enc({ headers: { date: "2026-01-01T00:00:00Z", ttl_seconds: 5 } }), now)).toMatch(/^expired/);
    expect(expiredFor(enc({ headers: { date: "2026-01-01T00:00:00Z", ttl_seconds: 60 } }), now)).toBeUndefined();
    expect(expiredFor(enc({ headers: { date: "2026-01-01T00:00:00Z" } }), now)).toBeUndefined();
    expect(expiredFor(enc({ headers: { date: "garbage", ttl_seconds: 1 } }), now)).toBeUndefined();
    expect(expiredFor(enc({ headers: { date: "2026-01-01T00:00:00Z", ttl_seconds: "1" } }), now)).toBeUndefined();
    expect(expiredFor(new TextEncoder().encode("{not json"), now)).toBeUndefined();
    expect(expiredFor(enc(null), now)).toBeUndefined();
  });
});
