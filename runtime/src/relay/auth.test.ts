import { describe, expect, it } from "vitest";
import { identity, peerOf } from "../../test/support/fixtures.ts";
import type { ProtocolError } from "../protocol/errors.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { didKeyFromPublicKey } from "../protocol/did-key.ts";
import { Verifier } from "../protocol/verify.ts";
import { RelaySpec, type RelaySpecInput } from "../resources/relay.ts";
import { absoluteUrl, relayAuthenticator } from "./auth.ts";
import { inSenderSet, Publishers } from "./publishers.ts";

const bob = identity("bob-agent");
const verifier = new Verifier([peerOf(bob)]);
const publishersOf = (publishers: RelaySpecInput["publishers"] = {}) =>
  new Publishers({
    spec: RelaySpec.parse({ url: "https://relay.example", agents: [peerOf(bob)], publishers }),
    verifier,
  });
const publishers = publishersOf();

/** A fresh did:key sender: its key is its id, found without any request. */
const didSender = () => {
  const id = identity("placeholder");
  const did = didKeyFromPublicKey(id.publicKey);
  return { ...id, agentId: did, signing: { ...id.signing, agentId: did } };
};

async function request(path: string, ip = "10.0.0.1", who = bob, open = false) {
  const headers = await signRequest({ method: "GET", url: `https://relay.example${path}` }, who.signing);
  return { clientAddress: ip, method: "GET", url: path, host: "relay.example", headers, open };
}

const outcome = (p: Promise<string>) =>
  p.then(
    (agent) => agent,
    (e: ProtocolError) => `${e.statusCode} ${e.code}`,
  );

describe("relay request authentication", () => {
  it("names the signing agent", async () => {
    const auth = relayAuthenticator({
      publishers,
      publicUrl: "https://relay.example",
      perAddressPerMinute: 100,
      perAgentPerMinute: 100,
    });
    expect(await auth(await request("/relay/messages?limit=5"))).toBe("bob-agent");
  });

  it("limits per address before verifying, and per verified agent after", async () => {
    const auth = relayAuthenticator({
      publishers,
      publicUrl: "https://relay.example",
      perAddressPerMinute: 2,
      perAgentPerMinute: 3,
    });
    const unsigned = {
      clientAddress: "10.0.0.9",
      method: "GET",
      url: "/relay/messages",
      host: "relay.example",
      headers: {},
    };
    expect(await outcome(auth(unsigned))).toBe("401 invalid_signature");
    expect(await outcome(auth(unsigned))).toBe("401 invalid_signature");
    // The address has spent its budget on bad signatures: refused before any verification.
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.9")))).toBe("429 rate_limited");
    // The agent's own budget counts verified requests from any address.
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.1")))).toBe("bob-agent");
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.2")))).toBe("bob-agent");
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.3")))).toBe("bob-agent");
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.4")))).toBe("429 rate_limited");
  });

  it("lets a stranger's did:key sign only where strangers are let in, as spec.publishers says", async () => {
    const stranger = didSender();
    const auth = relayAuthenticator({
      publishers,
      publicUrl: "https://relay.example",
      perAddressPerMinute: 100,
      perAgentPerMinute: 100,
    });
    // Publishing (an open endpoint) under the default policy, verified: found by its id alone.
    expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", stranger, true)))).toBe(stranger.agentId);
    // Reading, acknowledging, subscribing: the served agents' alone.
    expect(await outcome(auth(await request("/relay/messages", "10.0.0.1", stranger, false)))).toBe(
      "401 unknown_sender",
    );
    // A name nobody can look up.
    expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", identity("nobody-agent"), true)))).toBe(
      "401 unknown_sender",
    );
    // Another key signing for the did:key does not verify.
    const impostor = { ...identity("x"), signing: { ...identity("x").signing, agentId: stranger.agentId } };
    expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", impostor, true)))).toBe(
      "401 invalid_signature",
    );

    const policies: [RelaySpecInput["publishers"], string][] = [
      [{ policy: "registered" }, "401 unknown_sender"],
      [{ deny: { agentIds: [stranger.agentId] } }, "401 unknown_sender"],
      [{ policy: "selector", allow: { domains: ["example.com"] } }, "401 unknown_sender"],
      [{ policy: "selector", allow: { agentIds: [stranger.agentId] } }, stranger.agentId],
      [{ minAuthLevel: 2 }, "401 insufficient_auth_level"],
    ];
    for (const [policy, expected] of policies) {
      const a = relayAuthenticator({
        publishers: publishersOf(policy),
        publicUrl: "https://relay.example",
        perAddressPerMinute: 100,
        perAgentPerMinute: 100,
      });
      expect(
        await outcome(a(await request("/relay/publish", "10.0.0.1", stranger, true))),
        JSON.stringify(policy),
      ).toBe(expected);
      // A served agent is let in whatever the policy.
      expect(await outcome(a(await request("/relay/publish", "10.0.0.1", bob, true)))).toBe("bob-agent");
    }
  });

  it("holds a stranger to spec.publishers.limits.perSenderPerMinute, a served agent to perAgentPerMinute", async () => {
    const stranger = didSender();
    const auth = relayAuthenticator({
      publishers: publishersOf({ limits: { perSenderPerMinute: 2 } }),
      publicUrl: "https://relay.example",
      perAddressPerMinute: 100,
      perAgentPerMinute: 5,
    });
    for (let i = 0; i < 2; i++)
      expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", stranger, true)))).toBe(stranger.agentId);
    expect(await outcome(auth(await request("/relay/publish", "10.0.0.2", stranger, true)))).toBe("429 rate_limited");
    for (let i = 0; i < 5; i++)
      expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", bob, true)))).toBe("bob-agent");
    expect(await outcome(auth(await request("/relay/publish", "10.0.0.1", bob, true)))).toBe("429 rate_limited");
  });

  it("matches senders by exact id or by the host of an https agent id", () => {
    const set = { agentIds: ["did:key:z6MkExact"], domains: ["partner.example", "*.example.org"] };
    expect(inSenderSet(set, "did:key:z6MkExact")).toBe(true);
    expect(inSenderSet(set, "did:key:z6MkOther")).toBe(false);
    expect(inSenderSet(set, "https://partner.example")).toBe(true);
    expect(inSenderSet(set, "https://partner.example:8443/agents/a")).toBe(true);
    expect(inSenderSet(set, "https://a.b.example.org/x")).toBe(true);
    expect(inSenderSet(set, "https://example.org")).toBe(false);
    expect(inSenderSet(set, "https://evilexample.org")).toBe(false);
    expect(inSenderSet(set, "https://evil.test/partner.example")).toBe(false);
    expect(inSenderSet(set, "https://partner.example.evil.test")).toBe(false);
    expect(inSenderSet(set, "https://partner.example@evil.test")).toBe(false);
    expect(inSenderSet(set, "http://partner.example")).toBe(false);
  });

  it("denies a host however it is written: a trailing dot, upper case, an IDN in Unicode or as its A-label", () => {
    const deny = {
      agentIds: ["https://bad.example/agents/a"],
      domains: ["evil.example", "*.spam.example", "xn--vil-9la.example"],
    };
    for (const id of [
      "https://evil.example./a",
      "https://x.spam.example./a",
      "https://EVIL.EXAMPLE./a",
      "https://X.Spam.Example/a",
      "https://ÉVIL.example./a",
      "https://xn--vil-9la.example./a",
      "https://BAD.example./agents/a",
    ])
      expect(inSenderSet(deny, id), id).toBe(true);
    expect(inSenderSet(deny, "https://spam.example./a")).toBe(false);
    expect(inSenderSet(deny, "https://evil.example.net./a")).toBe(false);
  });

  it("builds the URL whose path and query are signed, whatever the Host header", () => {
    expect(absoluteUrl("/relay/messages?limit=5", "relay.example:8443")).toBe(
      "https://relay.example:8443/relay/messages?limit=5",
    );
    expect(absoluteUrl("/relay/messages", "bad host/")).toBe("https://relay.invalid/relay/messages");
    expect(absoluteUrl("/relay/messages", undefined)).toBe("https://relay.invalid/relay/messages");
  });
});
