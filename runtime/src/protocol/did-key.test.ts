import { describe, expect, it } from "vitest";
import { base58btcDecode, base58btcEncode, didKeyFromPublicKey, didKeyPublicKey } from "./did-key.ts";
import { generateSigningKey } from "./keys.ts";
import { message } from "../../test/support/fixtures.ts";
import { signIntroduction, verifyIntroduction } from "./signing.ts";

describe("did:key (Ed25519)", () => {
  it("resolves the did:key method's own test vector", () => {
    // did:key specification, Ed25519 example; publicKeyBase58 4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS
    const raw = Buffer.from(didKeyPublicKey("did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"), "base64url");
    expect(raw.toString("hex")).toBe("3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29");
    expect(base58btcEncode(raw)).toBe("4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS");
  });

  it("round-trips keys and keeps leading zero bytes", () => {
    for (let i = 0; i < 20; i++) {
      const { publicKey } = generateSigningKey();
      expect(didKeyPublicKey(didKeyFromPublicKey(publicKey))).toBe(publicKey);
    }
    expect(Buffer.from(base58btcDecode(base58btcEncode(Buffer.from("0000ff01", "hex")))).toString("hex")).toBe(
      "0000ff01",
    );
    expect(base58btcEncode(Buffer.alloc(0))).toBe("");
  });

  it("refuses what is not an Ed25519 did:key", () => {
    const bad = [
      "did:web:example.com",
      "did:key:6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp", // no multibase prefix
      "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme", // secp256k1 (0xe7)
      "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooW0", // '0' is not base58
      "did:key:z6Mk", // too short
      `did:key:z${"1".repeat(200)}`, // too long
    ];
    for (const did of bad) expect(() => didKeyPublicKey(did), did).toThrow();
  });
});

describe("introduction tokens (hmac-sha256)", () => {
  it("verify with the token used, and with no other, nor after tampering", () => {
    const m = signIntroduction(message("newcomer", "alice-agent"), "a-token-of-at-least-16", "newcomer#intro");
    const s = m.security!.signatures![0]!;
    expect(s.alg).toBe("hmac-sha256");
    expect(verifyIntroduction(m, s, ["other-token-0123456789", "a-token-of-at-least-16"])).toBe(true);
    expect(verifyIntroduction(m, s, ["other-token-0123456789"])).toBe(false);
    expect(verifyIntroduction({ ...m, body: { text: "changed" } }, s, ["a-token-of-at-least-16"])).toBe(false);
    expect(verifyIntroduction(m, { ...s, alg: "ed25519" }, ["a-token-of-at-least-16"])).toBe(false);
    expect(verifyIntroduction(m, { ...s, sig: "AAAA" }, ["a-token-of-at-least-16"])).toBe(false);
  });
});
