// Checking an agent card's signatures (section 8.4): the cards this runtime signs, and cards
// another JOSE implementation (jose) signs with other algorithms.
import { generateKeyPairSync } from "node:crypto";
import canonicalize from "canonicalize";
import { FlattenedSign } from "jose";
import { describe, expect, it } from "vitest";
import { identity } from "../../test/support/fixtures.ts";
import { CardSignatureError, jwks, keyOfJwks, signCard, verifyCardSignatures } from "./card.ts";

const card = {
  name: "weather",
  supportedInterfaces: [{ url: "https://w.example/a2a/v1", protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
  skills: [{ id: "forecast", name: "Forecast", description: "Tells the weather", tags: ["weather"] }],
};

/** A detached JWS over the card's canonical form, made by jose. */
async function joseSigned(alg: string, key: import("node:crypto").KeyObject, header = {}) {
  const jws = await new FlattenedSign(new TextEncoder().encode(canonicalize(card)!))
    .setProtectedHeader({ alg, kid: "k1", jku: "https://w.example/jwks.json", ...header })
    .sign(key);
  return { ...card, signatures: [{ protected: jws.protected!, signature: jws.signature }] };
}

describe("verifyCardSignatures", () => {
  it("verifies the cards this runtime signs, with the key of its JWKS", async () => {
    const self = identity("https://w.example");
    const signed = { ...card, signatures: [signCard(card, self.signing, "https://w.example/jwks.json")] };
    const keys = jwks(self.signing);
    const seen: unknown[] = [];
    const result = await verifyCardSignatures(signed, async (h) => {
      seen.push(h);
      return keyOfJwks(keys, h.kid);
    });
    expect(result).toEqual({ signed: true, kids: ["https://w.example#key-1"] });
    expect(seen).toEqual([
      { alg: "EdDSA", typ: "JOSE", kid: "https://w.example#key-1", jku: "https://w.example/jwks.json" },
    ]);
    // Key order and white space do not matter (RFC 8785); a changed value does.
    const reordered = Object.fromEntries(Object.entries(signed).reverse());
    await expect(verifyCardSignatures(reordered, async (h) => keyOfJwks(keys, h.kid))).resolves.toMatchObject({
      signed: true,
    });
    await expect(
      verifyCardSignatures({ ...signed, name: "not weather" }, async (h) => keyOfJwks(keys, h.kid)),
    ).rejects.toThrow(/signature 1 \(kid https:\/\/w\.example#key-1\) does not verify over the card/);
  });

  it("verifies ES256 and RS256 signatures another JOSE library made", async () => {
    for (const [alg, pair] of [
      ["ES256", generateKeyPairSync("ec", { namedCurve: "P-256" })],
      ["RS256", generateKeyPairSync("rsa", { modulusLength: 2048 })],
    ] as const) {
      const signed = await joseSigned(alg, pair.privateKey);
      await expect(verifyCardSignatures(signed, async () => pair.publicKey)).resolves.toEqual({
        signed: true,
        kids: ["k1"],
      });
      const other = generateKeyPairSync("ec", { namedCurve: "P-256" });
      if (alg === "ES256")
        await expect(verifyCardSignatures(signed, async () => other.publicKey)).rejects.toThrow(CardSignatureError);
    }
  });

  it("refuses algorithms it does not take, critical headers, and malformed signatures", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const key = async () => pair.publicKey;
    const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const withSig = (sig: unknown) => ({ ...card, signatures: [sig] });
    await expect(
      verifyCardSignatures(withSig({ protected: b64({ alg: "none" }), signature: "" }), key),
    ).rejects.toThrow(/algorithm "none" is not accepted/);
    await expect(
      verifyCardSignatures(withSig({ protected: b64({ alg: "HS256" }), signature: "x" }), key),
    ).rejects.toThrow(/algorithm "HS256" is not accepted/);
    await expect(
      verifyCardSignatures(await joseSigned("ES256", pair.privateKey, { crit: ["b64"], b64: true }), key),
    ).rejects.toThrow(/critical header/);
    await expect(verifyCardSignatures(withSig({ protected: "%%%", signature: "x" }), key)).rejects.toThrow(
      /not base64url JSON/,
    );
    await expect(verifyCardSignatures(withSig({ signature: "x" }), key)).rejects.toThrow(/no protected header/);
    await expect(verifyCardSignatures({ ...card, signatures: "x" }, key)).rejects.toThrow(/not a list/);
    // A key of the wrong type for the algorithm is a refusal, not a crash.
    const ed = generateKeyPairSync("ed25519");
    await expect(
      verifyCardSignatures(await joseSigned("ES256", pair.privateKey), async () => ed.publicKey),
    ).rejects.toThrow(CardSignatureError);
  });

  it("takes a card without signatures as unsigned", async () => {
    const never = async () => {
      throw new Error("no key is looked for");
    };
    await expect(verifyCardSignatures(card, never)).resolves.toEqual({ signed: false, kids: [] });
    await expect(verifyCardSignatures({ ...card, signatures: [] }, never)).resolves.toEqual({
      signed: false,
      kids: [],
    });
  });
});

describe("keyOfJwks", () => {
  it("finds the key by kid, or the only one, and refuses what is not a key", () => {
    const a = identity("https://a.example");
    const keys = jwks(a.signing);
    expect(keyOfJwks(keys, "https://a.example#key-1").asymmetricKeyType).toBe("ed25519");
    expect(keyOfJwks(keys, undefined).asymmetricKeyType).toBe("ed25519");
    expect(() => keyOfJwks(keys, "other")).toThrow(/has no key other/);
    expect(() => keyOfJwks({ keys: [...keys.keys, ...keys.keys] }, undefined)).toThrow(/more than one/);
    expect(() => keyOfJwks({}, "k")).toThrow(/has no keys/);
    expect(() => keyOfJwks({ keys: [{ kid: "k", kty: "OKP", crv: "Ed25519", x: "!!" }] }, "k")).toThrow(
      /not a usable public key/,
    );
  });
});
