// A relayed message whose sender's key cannot be found is not silently acknowledged: the agent
// answers it with a signed error-phase message through the same relay, then acknowledges it.
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { HttpClient } from "../../src/net/http-client.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { identity, signed } from "../support/fixtures.ts";
import { runAgent, startHandler, type Tls } from "../support/agent-harness.ts";
import { withRelay } from "../support/relay-harness.ts";
import { metricValue } from "../support/probes.ts";

const bob = identity("bob-agent");
const stranger = identity("stranger-agent");
let nats: NatsServer;
let tls: Tls;
let relay: RunningRelay;
let relayUrl: string;
let http: HttpClient;

withRelay([bob, stranger], (f) => ({ nats, tls, http, relay, relayUrl } = f));

describe("relay intake and identity", () => {
  it("answers a relayed message from a sender it cannot look up, then acknowledges it", async () => {
    const handler = await startHandler();
    const b = await runAgent({
      self: bob,
      natsUrl: nats.url,
      tls,
      spec: { relay: { urls: [relayUrl], pollInterval: "300ms" }, handler: { url: handler.url } },
    });
    try {
      const m = signed(stranger, "bob-agent", {}, "hello from nowhere");
      expect((await new RelayClient(relayUrl, stranger.signing, http).publish(m)).status).toBe(202);
      const answer = await waitFor("the error-phase answer in the stranger's mailbox", async () =>
        (await new RelayClient(relayUrl, stranger.signing, http).pull()).messages.find(
          (x) => x.headers.thread?.in_reply_to === m.headers.message_id,
        ),
      );
      expect(answer.headers).toMatchObject({
        phase: "error",
        from: { agent: "bob-agent" },
        to: [{ agent: "stranger-agent" }],
        conversation_id: m.headers.conversation_id,
      });
      expect(answer.body.parts?.[0]?.content).toMatchObject({
        code: "unknown_sender",
        in_reply_to: m.headers.message_id,
        status: 401,
      });
      expect(answer.body.text).toMatch(/not among this agent's peers/);
      expect(answer.security?.signatures?.[0]?.key_id).toBe("bob-agent#key-1");
      const intake = async (result: string) =>
        metricValue(await b.scrape(), "ifp_relay_operations_total", { operation: "intake", result });
      expect(await intake("unknown_sender")).toBe(1);
      await waitFor(
        "bob's mailbox emptied",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );
      expect(handler.received).toHaveLength(0);

      // An error-phase message is refused and counted but never answered: no echo between two refusing agents.
      const err = signed(
        stranger,
        "bob-agent",
        { phase: "error", conversation_id: "conv:echo" },
        "your message was refused",
      );
      expect((await new RelayClient(relayUrl, stranger.signing, http).publish(err)).status).toBe(202);
      await waitFor("the second refusal to be counted", async () => (await intake("unknown_sender")) === 2);
      await waitFor(
        "bob's mailbox emptied again",
        async () => (await new RelayClient(relayUrl, bob.signing, http).pull()).messages.length === 0,
      );
      const waiting = (await new RelayClient(relayUrl, stranger.signing, http).pull()).messages;
      expect(waiting.some((x) => x.headers.thread?.in_reply_to === err.headers.message_id)).toBe(false);
    } finally {
      await b.close();
      await handler.close();
    }
  });
});
