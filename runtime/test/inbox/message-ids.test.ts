// A message_id is unique per sender only: another peer reusing alice's message_id must not
// take her reply, nor make the hand-off or a relay drop her message as a repeat.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalApiClient } from "../../src/client/local.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { runAgent, startHandler } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { alice, bob, clientOf, relayEnv, runRelay, waitFor, type RelayEnv } from "../support/relay-harness.ts";

const mallory = identity("mallory-agent");
let env: RelayEnv;

beforeAll(async () => {
  env = await relayEnv();
}, 60_000);

afterAll(async () => {
  await env?.close();
});

describe("message ids are keyed by (sender, message_id)", () => {
  it("a second peer reusing alice's message_id does not hijack the reply meant for alice", async () => {
    const handler = await startHandler();
    const b = await runAgent({
      self: bob,
      natsUrl: env.nats.url,
      tls: env.tls,
      spec: { peers: [peerOf(alice), peerOf(mallory)], handler: { url: handler.url } },
    });
    try {
      const fromAlice = signed(alice, "bob-agent", { conversation_id: "conv:alice" }, "from alice");
      const reused = signed(
        mallory,
        "bob-agent",
        { message_id: fromAlice.headers.message_id, conversation_id: "conv:mallory" },
        "from mallory, same id",
      );
      expect((await b.post(fromAlice)).status).toBe(202);
      expect((await b.post(reused)).status).toBe(202);

      // Both are handed on, each with its own idempotency key.
      await waitFor("both handed on", () => handler.received.length >= 2, 10_000);
      const keys = handler.received.map((r) => r.headers["idempotency-key"]).sort();
      expect(keys).toEqual([
        `alice-agent ${fromAlice.headers.message_id}`,
        `mallory-agent ${fromAlice.headers.message_id}`,
      ]);

      const api = new LocalApiClient(b.localApiUrl);
      const reply = await api.send({ in_reply_to: fromAlice.headers.message_id, text: "answer" });
      expect(reply.message.headers.to).toEqual([{ agent: "alice-agent" }]);
      expect(reply.message.headers.conversation_id).toBe("conv:alice");
      // Naming the sender picks that sender's message.
      const toMallory = await api.send({
        in_reply_to: fromAlice.headers.message_id,
        to: "mallory-agent",
        text: "answer",
      });
      expect(toMallory.message.headers.conversation_id).toBe("conv:mallory");
    } finally {
      await b.close();
      await handler.close();
    }
  });

  it("a relay stores alice's message even when another sender used its message_id first", async () => {
    const relay: RunningRelay = await runRelay(env);
    try {
      const fromAlice = signed(alice, "bob-agent", {}, "from alice");
      const first = signed(bob, "bob-agent", { message_id: fromAlice.headers.message_id }, "bob to himself, same id");
      const pre = await clientOf(env, relay, bob).publish(first);
      expect(pre.status).toBe(202);
      const res = await clientOf(env, relay, alice).publish(fromAlice);
      expect(res.status).toBe(202);
      expect(JSON.parse(res.text)).toMatchObject({ stored: 1, duplicates: 0 });
      const { messages } = await clientOf(env, relay, bob).pull();
      expect(messages.map((m) => m.body.text).sort()).toEqual(["bob to himself, same id", "from alice"]);
      // The same sender repeating itself is still a duplicate.
      expect(JSON.parse((await clientOf(env, relay, alice).publish(fromAlice)).text)).toMatchObject({
        stored: 0,
        duplicates: 1,
      });
    } finally {
      await relay.close();
    }
  });
});
