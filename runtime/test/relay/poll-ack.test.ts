// The agent's relay poll acknowledges the messages of a page it made durable with one signed
// POST /relay/messages/ack. On a real nats-server and a real relay over TLS.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, scrapeMetrics, startHandler } from "../support/agent-harness.ts";
import { peerOf, signed } from "../support/fixtures.ts";
import { metricValue } from "../support/probes.ts";
import { alice, baseUrl, bob, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env);
}, 60_000);
afterAll(async () => {
  await relay?.close();
  await env?.close();
});

/** The acknowledgement requests the relay answered: a DELETE or a whole POST /relay/messages/ack counts one. */
const ackRequests = async () =>
  metricValue(await scrapeMetrics(relay.metricsUrl), "ifp_relay_operations_total", { operation: "ack", result: "ok" });

describe("the agent's relay poll", () => {
  it("acknowledges a page of messages with one request, each handed on once", async () => {
    const n = 20;
    const sent = Array.from({ length: n }, (_, i) => signed(bob, "alice-agent", {}, `page ${i}`));
    const bobAtRelay = new RelayClient(baseUrl(relay), bob.signing, env.http);
    for (const m of sent) expect((await bobAtRelay.publish(m)).status).toBe(202);
    const before = await ackRequests();
    const handler = await startHandler();
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [peerOf(bob)],
        relay: { urls: [baseUrl(relay)], pollInterval: "200ms", receive: "poll" },
        handler: { url: handler.url },
      },
    });
    try {
      await waitFor(
        "the mailbox emptied",
        async () => (await new RelayClient(baseUrl(relay), alice.signing, env.http).pull()).messages.length === 0,
      );
      expect((await ackRequests()) - before).toBe(1);
      await waitFor("every message handed on", () => handler.received.length >= n || undefined);
      expect(handler.received.map((r) => r.body.headers.message_id).sort()).toEqual(
        sent.map((m) => m.headers.message_id).sort(),
      );
    } finally {
      await a.close();
      await handler.close();
    }
  });
});
