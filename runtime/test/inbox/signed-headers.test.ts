import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { DEFAULT_SIGNED_HEADERS, REQUIRED_SIGNED_HEADERS, signMessage } from "../../src/protocol/signing.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, message, peerOf, signed } from "../support/fixtures.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

describe("signed headers at a real inbox", () => {
  it("refuses a message carrying a header its signature does not cover (401 invalid_signature), accepts one that signs them all", async () => {
    const self = identity("header-inbox");
    const peer = identity("header-peer");
    const agent = await runAgent({ self, natsUrl: nats.url, tls, spec: { peers: [peerOf(peer)] } });
    try {
      const extra = {
        disclosure: "personal",
        thread: { in_reply_to: "msg:01J0000000000000000000000" },
        ttl_seconds: 3600,
        capabilities: { request: ["calendar.availability"] },
      };
      // Signed over the former default list only: the extra headers could be changed on the way.
      for (const list of [DEFAULT_SIGNED_HEADERS, REQUIRED_SIGNED_HEADERS]) {
        const m = signMessage(message(peer.agentId, self.agentId, extra), peer.signing, { signedHeaders: list });
        const res = await agent.post(m);
        expect(res.status, list.join(",")).toBe(401);
        expect(JSON.parse(res.text)).toMatchObject({
          code: "invalid_signature",
          message: expect.stringMatching(/not signed: .*disclosure/),
        });
      }
      // A header added to a fully signed message (as a relay could) is refused too.
      const good = signed(peer, self.agentId, extra);
      const tampered = { ...good, headers: { ...good.headers, priority: "urgent" } };
      expect((await agent.post(tampered)).status).toBe(401);
      expect((await agent.post(good)).status).toBe(202);
    } finally {
      await agent.close();
    }
  });
});
