import { describe, expect, it } from "vitest";
import { identity, message, peerOf, signed } from "../../test/support/fixtures.ts";
import type { ProtocolError } from "./errors.ts";
import { signMessage } from "./signing.ts";
import { Verifier } from "./verify.ts";

const pete = identity("pete-agent");
const alice = identity("alice-agent");
const mallory = identity("mallory-agent");

function reason(fn: () => unknown): { status: number; code: string; message: string } {
  try {
    fn();
  } catch (err) {
    const e = err as ProtocolError;
    return { status: e.statusCode, code: e.code, message: e.message };
  }
  throw new Error("expected a refusal");
}

describe("Verifier", () => {
  const verifier = new Verifier([peerOf(pete), peerOf(mallory)]);

  it("accepts a message signed by the sender's trusted key at level 2", () => {
    expect(verifier.verify(signed(pete, "alice-agent"), true)).toEqual({
      signer: "pete-agent",
      keyId: "key-1",
      authLevel: 2,
      source: "peers",
    });
  });

  it("refuses an unsigned message when signatures are required, accepts it at level 0 otherwise", () => {
    expect(reason(() => verifier.verify(message("pete-agent", "alice-agent"), true))).toMatchObject({
      status: 401,
      code: "invalid_signature",
    });
    expect(verifier.verify(message("pete-agent", "alice-agent"), false)).toEqual({
      signer: undefined,
      keyId: undefined,
      authLevel: -1,
      source: "none",
    });
  });

  it("refuses a tampered message", () => {
    const m = signed(pete, "alice-agent");
    m.body.text = "changed";
    expect(reason(() => verifier.verify(m, true))).toMatchObject({
      code: "invalid_signature",
      message: expect.stringMatching(/verification failed/),
    });
  });

  it("refuses a sender nobody trusts with unknown_sender", () => {
    expect(reason(() => verifier.verify(signed(alice, "pete-agent"), true))).toMatchObject({
      status: 401,
      code: "unknown_sender",
    });
  });

  it("refuses a signer that is not headers.from.agent", () => {
    const forged = signMessage(message("pete-agent", "alice-agent"), mallory.signing);
    expect(reason(() => verifier.verify(forged, true))).toMatchObject({
      code: "invalid_signature",
      message: expect.stringMatching(/by mallory-agent/),
    });
  });

  it("refuses an unknown key id and a revoked key", () => {
    const other = signMessage(message("pete-agent", "alice-agent"), { ...pete.signing, keyId: "key-9" });
    expect(reason(() => verifier.verify(other, true)).message).toMatch(/not a trusted key/);
    const revoked = new Verifier([
      { agentId: "pete-agent", keys: [{ keyId: "key-1", publicKey: pete.publicKey, status: "revoked" }] },
    ]);
    expect(reason(() => revoked.verify(signed(pete, "alice-agent"), true)).message).toMatch(/revoked/);
  });

  it("requires the signature to cover message_id, date, from, to and the body", () => {
    const partial = signMessage(message("pete-agent", "alice-agent"), pete.signing, {
      signedHeaders: ["message_id", "date", "from"],
    });
    expect(reason(() => verifier.verify(partial, true)).message).toMatch(/must cover to/);
    const m = signed(pete, "alice-agent");
    m.security!.signatures![0]!.signed_body = false;
    expect(reason(() => verifier.verify(m, true)).message).toMatch(/must cover the body \(signed_body: true\)/);
  });

  it("a signature that is present must verify even when signatures are optional", () => {
    const m = signed(pete, "alice-agent");
    m.headers.sequence = 7;
    expect(reason(() => verifier.verify(m, false))).toMatchObject({ code: "invalid_signature" });
  });
});
