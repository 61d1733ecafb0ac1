import { sign as edSign } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import type { Message } from "../../src/protocol/message.ts";
import {
  DEFAULT_SIGNED_HEADERS,
  headersToSign,
  REQUIRED_SIGNED_HEADERS,
  signingInput,
  signMessage,
} from "../../src/protocol/signing.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { metricValue } from "../support/probes.ts";
import { identity, message, peerOf, signed, type TestIdentity } from "../support/fixtures.ts";

/**
 * A message signed, correctly, over its headers alone (signed_body: false, the body left out of
 * the signing input): the signature verifies, but anyone on the way may change the body.
 */
function signedHeadersOnly(id: TestIdentity, to: string, text: string): Message {
  const m = message(id.agentId, to, {}, text);
  const signedHeaders = headersToSign(m.headers);
  const sig = edSign(null, signingInput(m, signedHeaders, false), id.signing.privateKey).toString("base64url");
  return {
    ...m,
    security: {
      signatures: [
        {
          alg: "ed25519",
          key_id: `${id.agentId}#${id.signing.keyId}`,
          created: m.headers.date,
          signed_headers: signedHeaders,
          signed_body: false,
          sig,
        },
      ],
    },
  };
}

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

describe("the body at a real inbox", () => {
  it("refuses a signature that does not cover the body (401 invalid_signature), however the body was changed, and stores nothing", async () => {
    const self = identity("body-inbox");
    const peer = identity("body-peer");
    const agent = await runAgent({ self, natsUrl: nats.url, tls, spec: { peers: [peerOf(peer)] } });
    try {
      const m = signedHeadersOnly(peer, self.agentId, "pay 10");
      // The body replaced on the way: the headers-only signature still verifies.
      const changed = { ...m, body: { ...m.body, text: "pay 10000" } };
      for (const sent of [m, changed]) {
        const res = await agent.post(sent);
        expect(res.status).toBe(401);
        expect(JSON.parse(res.text)).toEqual({
          status: "error",
          code: "invalid_signature",
          message: expect.stringMatching(/must cover the body \(signed_body: true\)/),
        });
      }
      // The same message signed over its body too is taken: nothing else was wrong with it.
      const whole = signMessage(
        message(peer.agentId, self.agentId, { message_id: m.headers.message_id }),
        peer.signing,
      );
      expect((await agent.post(whole)).status).toBe(202);
      // Stored once, as new: neither refused copy was kept.
      const metrics = await agent.scrape();
      expect(metricValue(metrics, "ifp_inbox_requests_total", { result: "accepted" })).toBe(1);
      expect(metricValue(metrics, "ifp_inbox_requests_total", { result: "duplicate" })).toBe(0);
    } finally {
      await agent.close();
    }
  });
});
