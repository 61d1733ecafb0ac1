// A message is stored and handed on exactly as its sender wrote it (docs/architecture.md: byte
// for byte): white space, key order, escapes and number spellings the JSON parse would lose
// reach the application unchanged, by the hand-off and by the local API's pull alike.
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import type { Message } from "../../src/protocol/message.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";

const alice = identity("alice-agent");
const pete = identity("pete-agent");
const bob = identity("bob-agent");
let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/**
 * The signed message as JSON no serializer writes: keys in another order, a tab and newlines,
 * spaces before colons, é escaped, `ifp` spelled 4.0. It parses to the same message, so its
 * signature (over the canonical form) still verifies.
 */
function oddlySpelled(m: Message): string {
  const h = JSON.stringify(m.headers, null, 1);
  const security = JSON.stringify(m.security);
  const body = JSON.stringify(m.body).replace("é", "\\u00e9");
  return `{\n\t"security" :${security},\r\n  "body":   ${body} ,"headers":${h},\n"ifp":4.0   }\n`;
}

describe("the inbox stores what was sent", () => {
  it("hands the sender's bytes to spec.handler.url", async () => {
    const handler = await startHandler();
    const agent = await runAgent({
      self: alice,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: handler.url } },
    });
    try {
      const m = signed(pete, "alice-agent", {}, "Grüße, café");
      const sent = oddlySpelled(m);
      expect(JSON.parse(sent)).toEqual(JSON.parse(JSON.stringify(m)));
      expect(sent).not.toBe(JSON.stringify(m));
      const answer = await agent.post(sent);
      expect(answer.status, answer.text).toBe(202);
      await waitFor("the hand-off", () => handler.received.length === 1);
      expect(handler.received[0]!.raw).toBe(sent);
      // A repeat is absorbed, whatever its spelling.
      expect((await agent.post(m)).status).toBe(202);
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("gives the sender's bytes to the local API's pull", async () => {
    const agent = await runAgent({ self: bob, natsUrl: nats.url, tls, spec: { peers: [peerOf(pete)] } });
    try {
      const m = signed(pete, "bob-agent", {}, "café");
      const sent = oddlySpelled(m);
      expect((await agent.post(sent)).status).toBe(202);
      const res = await fetch(`${agent.localApiUrl}/messages?limit=1&wait=5`);
      const text = await res.text();
      expect(text, text).toContain(`"message":${sent}`);
      await new LocalApiClient(agent.localApiUrl).ack(m.headers.message_id);
    } finally {
      await agent.close();
    }
  });
});
