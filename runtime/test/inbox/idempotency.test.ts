import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { handOffsSettled, metricValue } from "../support/probes.ts";

const alice = identity("alice-agent");
const pete = identity("pete-agent");
let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

describe("Idempotency-Key at the inbox (IFP-6: optional, message_id only recommended)", () => {
  it("accepts any Idempotency-Key and deduplicates by message_id alone", async () => {
    const handler = await startHandler();
    const agent = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
    });
    try {
      const m = signed(pete, "alice-agent");
      const first = await agent.post(m, { "idempotency-key": "some-other-key" });
      expect(first.status).toBe(202);
      expect(first.json()).toEqual({ status: "accepted", message_id: m.headers.message_id });
      // The same message under another key, and under none: a repeat all the same.
      expect((await agent.post(m, { "idempotency-key": "yet-another-key" })).status).toBe(202);
      expect((await agent.post(m)).status).toBe(202);
      // Two messages under one key: both are new.
      const other = signed(pete, "alice-agent");
      expect((await agent.post(other, { "idempotency-key": "some-other-key" })).status).toBe(202);
      const inbox = async (result: string) => metricValue(await agent.scrape(), "ifp_inbox_requests_total", { result });
      expect(await inbox("duplicate")).toBe(2);
      expect(await inbox("accepted")).toBe(2);
      await waitFor("both handed on", () => handler.received.length === 2);
      await waitFor("the hand-offs settled", () => handOffsSettled(nats.url, alice.agentId), 15_000);
      await consistently("each handed on once", () => handler.received.length === 2, 1_000);
    } finally {
      await agent.close();
      await handler.close();
    }
  });
});
