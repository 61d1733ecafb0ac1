import { describe, expect, it } from "vitest";
import { identity, peerOf } from "../../test/fixtures.ts";
import type { ProtocolError } from "../protocol/errors.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { Verifier } from "../protocol/verify.ts";
import { absoluteUrl, relayAuthenticator } from "./auth.ts";

const bob = identity("bob-agent");
const verifier = new Verifier([peerOf(bob)]);

async function request(path: string, ip = "10.0.0.1") {
  const headers = await signRequest({ method: "GET", url: `https://relay.example${path}` }, bob.signing);
  return { clientAddress: ip, method: "GET", url: path, host: "relay.example", headers };
}

const outcome = (p: Promise<string>) =>
  p.then(
    (agent) => agent,
    (e: ProtocolError) => `${e.statusCode} ${e.code}`,
  );

describe("relay request authentication", () => {
  it("names the signing agent", async () => {
    const auth = relayAuthenticator({ verifier, publicUrl: "https://relay.example", perAddressPerMinute: 100, perAgentPerMinute: 100 });
    expect(await auth(await request("/relay/messages?limit=5"))).toBe("bob-agent");
  });

  it("limits per address before verifying, and per verified agent after", async () => {
    const auth = relayAuthenticator({ verifier, publicUrl: "https://relay.example", perAddressPerMinute: 2, perAgentPerMinute: 3 });
    const unsigned = { clientAddress: "10.0.0.9", method: "GET", url: "/relay/messages", host: "relay.example", headers: {} };
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

  it("builds the URL whose path and query are signed, whatever the Host header", () => {
    expect(absoluteUrl("/relay/messages?limit=5", "relay.example:8443")).toBe("https://relay.example:8443/relay/messages?limit=5");
    expect(absoluteUrl("/relay/messages", "bad host/")).toBe("https://relay.invalid/relay/messages");
    expect(absoluteUrl("/relay/messages", undefined)).toBe("https://relay.invalid/relay/messages");
  });
});
