// Messages pulled from a relay pass the inbox's own checks. The relay here is real, and behaves
// badly: the test writes crafted copies straight into its JetStream stream, as a malicious or
// broken relay would hand them out.
import { jetstreamManager, jetstream } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentNames } from "../../src/agent/names.ts";
import { encodeToken } from "../../src/contract/nats.ts";
import { relayNames } from "../../src/contract/relay-stream.ts";
import type { Message } from "../../src/protocol/message.ts";
import { RelayClient } from "../../src/net/relay-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, startHandler } from "../support/agent-harness.ts";
import { peerOf, signed } from "../support/fixtures.ts";
import { metricValue } from "../support/probes.ts";
import { alice, baseUrl, bob, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;
let nc: NatsConnection;

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env);
  nc = await connect({ servers: env.nats.url });
}, 60_000);

afterAll(async () => {
  await nc?.close();
  await relay?.close();
  await env?.close();
});

/** A copy put into `agent`'s mailbox at the relay, bypassing its publish checks. */
async function plant(agent: string, message: Message): Promise<void> {
  const h = natsHeaders();
  h.set("Ifp-Recipient", agent);
  h.set("Ifp-Message-Id", message.headers.message_id);
  await jetstream(nc).publish(
    relayNames(relay.relay).copy(agent, message.headers.message_id),
    JSON.stringify(message),
    { headers: h },
  );
}

async function storedInInbox(agentId: string, messageId: string): Promise<boolean> {
  const names = agentNames(agentId);
  const info = await (await jetstreamManager(nc)).streams.info(names.inboxStream, {
    subjects_filter: `${names.inboxSubjects}`,
  });
  return Object.keys(info.state.subjects ?? {}).some((s) => s.endsWith(`.${encodeToken(messageId)}`));
}

describe("a relayed message is admitted like a direct one", () => {
  it("drops what is addressed to another agent or to a topic not subscribed, and refuses a stale replay", async () => {
    const handler = await startHandler();
    const a = await runAgent({
      self: alice,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: {
        peers: [peerOf(bob)],
        relay: { urls: [baseUrl(relay)], pollInterval: "200ms" },
        handler: { url: handler.url },
      },
    });
    try {
      const forCarol = signed(bob, "carol-agent", {}, "meant for carol");
      const forTopic = signed(bob, "topic:gossip.secret", {}, "a topic alice never joined");
      const stale = signed(
        bob,
        "alice-agent",
        { date: new Date(Date.now() - 72 * 3600_000).toISOString().replace(/\.\d+Z$/, "Z") },
        "captured three days ago",
      );
      const fine = signed(bob, "alice-agent", {}, "for alice");
      for (const m of [forCarol, forTopic, stale, fine]) await plant("alice-agent", m);

      const intake = async (result: string) =>
        metricValue(await a.scrape(), "ifp_relay_operations_total", { operation: "intake", result });
      await waitFor("the good one handed on", () =>
        handler.received.find((r) => r.body.headers.message_id === fine.headers.message_id),
      );
      await waitFor(
        "the mailbox emptied",
        async () => (await new RelayClient(baseUrl(relay), alice.signing, env.http).pull()).messages.length === 0,
      );
      expect(await intake("misaddressed")).toBe(2);
      expect(await intake("invalid_format")).toBe(1);
      expect(await intake("accepted")).toBe(1);
      for (const m of [forCarol, forTopic, stale]) {
        expect(await storedInInbox("alice-agent", m.headers.message_id), m.body.text).toBe(false);
        expect(handler.received.some((r) => r.body.headers.message_id === m.headers.message_id)).toBe(false);
      }
      // The stale one is answered (it was addressed to alice); the misaddressed ones are not.
      const answers = (await new RelayClient(baseUrl(relay), bob.signing, env.http).pull()).messages;
      expect(answers.map((m) => m.headers.thread?.in_reply_to)).toEqual([stale.headers.message_id]);

      // A topic alice is subscribed to at that relay is hers to take.
      await new RelayClient(baseUrl(relay), alice.signing, env.http).subscribe(["gossip.open"]);
      const onTopic = signed(bob, "topic:gossip.open", {}, "on an open topic");
      await plant("alice-agent", onTopic);
      await waitFor("the topic copy handed on", () =>
        handler.received.find((r) => r.body.headers.message_id === onTopic.headers.message_id),
      );
    } finally {
      await a.close();
      await handler.close();
    }
  });
});
