// An agent card's signatures (section 8.4): the cards this runtime signs, checked by the official
// A2A SDK's verifier and by jose over the specification's canonical form made with another JCS
// library; cards jose signs with other algorithms; and signatures whose algorithm does not suit
// their key, refused.
import { createHmac, generateKeyPairSync } from "node:crypto";
import { verifyAgentCardSignature } from "@a2a-js/sdk";
import canonicalize from "canonicalize";
import { createLocalJWKSet, FlattenedSign, flattenedVerify } from "jose";
import { canonicalize as independentJcs } from "json-canonicalize";
import { describe, expect, it } from "vitest";
import { identity } from "../../test/support/fixtures.ts";
import { ownBaseUrl } from "../net/own-base.ts";
import { Agent } from "../resources/agent.ts";
import {
  agentCard,
  CardCache,
  CardSignatureError,
  cardPayload,
  jwks,
  keyOfJwks,
  signCard,
  verifyCardSignatures,
} from "./card.ts";

const card = {
  name: "weather",
  supportedInterfaces: [{ url: "https://w.example/a2a/v1", protocolBinding: "JSONRPC", protocolVersion: "1.0" }],
  skills: [{ id: "forecast", name: "Forecast", description: "Tells the weather", tags: ["weather"] }],
};

const self = identity("https://w.example");
const agent = Agent.parse({
  apiVersion: "ifp.dev/v1alpha1",
  kind: "Agent",
  metadata: { name: "weather", namespace: "sky" },
  spec: {
    agentId: self.agentId,
    capabilities: [{ name: "weather.forecast", description: "Tells the weather" }],
    a2a: { enabled: true, skills: [{ id: "smalltalk", name: "Small talk", description: "Talks", examples: ["hi"] }] },
  },
});

/** A detached JWS over the card's canonical form, made by jose. */
async function joseSigned(alg: string, key: import("node:crypto").KeyObject, header = {}) {
  const jws = await new FlattenedSign(new TextEncoder().encode(canonicalize(card)!))
    .setProtectedHeader({ alg, kid: "k1", jku: "https://w.example/jwks.json", ...header })
    .sign(key);
  return { ...card, signatures: [{ protected: jws.protected!, signature: jws.signature }] };
}

/**
 * Section 8.4.1 written out independently: empty repeated fields (and unset ones) left out,
 * then RFC 8785 by json-canonicalize.
 */
function specPayload(value: Record<string, unknown>): string {
  const { signatures: _, ...unsigned } = value;
  const clean = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(clean)
      : v && typeof v === "object"
        ? Object.fromEntries(
            Object.entries(v)
              .filter(([, x]) => x !== null && x !== undefined && !(Array.isArray(x) && x.length === 0))
              .map(([k, x]) => [k, clean(x)]),
          )
        : v;
  return independentJcs(clean(unsigned));
}

describe("the cards this runtime signs", () => {
  it("verify with the official SDK's verifier and with jose over the specification's canonical form", async () => {
    const text = await new CardCache({ agent, signing: self.signing, bearer: true }).get("https://weather.sky.svc");
    const signed = JSON.parse(text);
    const keys = jwks(self.signing);
    const jwkSet = createLocalJWKSet(keys as never);
    // The SDK cleans the card (AgentCard.fromJSON/toJSON, empty fields dropped) before checking.
    const seen: [string, string | undefined][] = [];
    await expect(
      verifyAgentCardSignature(async (kid, jku) => {
        seen.push([kid, jku]);
        return keys.keys.find((k) => k.kid === kid)!;
      })(signed),
    ).resolves.toBeUndefined();
    expect(seen).toEqual([[`${self.agentId}#key-1`, "https://weather.sky.svc/.well-known/a2a/jwks.json"]]);
    // jose over the canonical form made by another JCS implementation.
    const [sig] = signed.signatures;
    const payload = Buffer.from(specPayload(signed)).toString("base64url");
    await expect(flattenedVerify({ ...sig, payload }, jwkSet)).resolves.toBeDefined();
    // The card holds no empty field, so every cleaning rule gives the same payload.
    expect(specPayload(signed)).toBe(cardPayload(signed, "sdk"));
    expect(cardPayload(signed)).toBe(canonicalize(withoutSignatures(signed)));
    // A changed card fails in both.
    const changed = { ...signed, name: "not weather" };
    await expect(verifyAgentCardSignature(async () => keys.keys[0]!)(changed)).rejects.toThrow(/No valid signatures/);
    await expect(
      flattenedVerify({ ...sig, payload: Buffer.from(specPayload(changed)).toString("base64url") }, jwkSet),
    ).rejects.toThrow();
  });

  it("in 0.3's form (a request without A2A-Version) carry url, preferredTransport and protocolVersion, signed as served", async () => {
    const cards = new CardCache({ agent, signing: self.signing, bearer: true });
    const v03 = JSON.parse(await cards.get("https://weather.sky.svc", "0.3"));
    const v10 = JSON.parse(await cards.get("https://weather.sky.svc"));
    expect(v03).toMatchObject({
      url: "https://weather.sky.svc/a2a/v1",
      preferredTransport: "JSONRPC",
      protocolVersion: "0.3.0",
      supportedInterfaces: v10.supportedInterfaces,
    });
    expect(v10).not.toHaveProperty("url");
    expect(v10).not.toHaveProperty("protocolVersion");
    expect(v10.supportedInterfaces).toContainEqual({
      url: "https://weather.sky.svc/a2a/v1",
      protocolBinding: "JSONRPC",
      protocolVersion: "0.3",
    });
    const keys = jwks(self.signing);
    await expect(verifyCardSignatures(v03, (h) => keyOfJwks(keys, h))).resolves.toMatchObject({ signed: true });
    const payload = Buffer.from(specPayload(v03)).toString("base64url");
    await expect(
      flattenedVerify({ ...v03.signatures[0], payload }, createLocalJWKSet(keys as never)),
    ).resolves.toBeDefined();
    // Each form's signature is its own: the 1.0 card's does not cover the 0.3 fields.
    await expect(
      verifyCardSignatures({ ...v03, signatures: v10.signatures }, (h) => keyOfJwks(keys, h)),
    ).rejects.toThrow(/does not verify/);
  });

  it("are signed without their empty repeated fields, as section 8.4.1 and the SDK's verifier read them", async () => {
    const withEmpty = { ...card, skills: [{ ...card.skills[0]!, examples: [] }], signatures: [] as unknown[] };
    const signed = {
      ...withEmpty,
      signatures: [await signCard(withEmpty, self.signing, "https://w.example/jwks.json")],
    };
    const keys = jwks(self.signing);
    await expect(verifyAgentCardSignature(async () => keys.keys[0]!)(signed as never)).resolves.toBeUndefined();
    const payload = Buffer.from(specPayload(signed)).toString("base64url");
    await expect(
      flattenedVerify({ ...signed.signatures[0], payload } as never, createLocalJWKSet(keys as never)),
    ).resolves.toBeDefined();
  });

  it("are checked by verifyCardSignatures with the key of the JWKS, in any key order, and refused when changed", async () => {
    const signed = { ...card, signatures: [await signCard(card, self.signing, "https://w.example/jwks.json")] };
    const keys = jwks(self.signing);
    const seen: unknown[] = [];
    const result = await verifyCardSignatures(signed, async (h) => {
      seen.push(h);
      return keyOfJwks(keys, h);
    });
    expect(result).toEqual({ signed: true, kids: ["https://w.example#key-1"] });
    expect(seen).toEqual([
      { alg: "EdDSA", typ: "JOSE", kid: "https://w.example#key-1", jku: "https://w.example/jwks.json" },
    ]);
    const reordered = Object.fromEntries(Object.entries(signed).reverse());
    await expect(verifyCardSignatures(reordered, (h) => keyOfJwks(keys, h))).resolves.toMatchObject({
      signed: true,
    });
    await expect(verifyCardSignatures({ ...signed, name: "not weather" }, (h) => keyOfJwks(keys, h))).rejects.toThrow(
      /signature 1 \(kid https:\/\/w\.example#key-1\) does not verify over the card/,
    );
  });

  it("name only the agent's own hosts: a forged Host gets the agent's Service URL", () => {
    expect(ownBaseUrl(agent, "localhost:8443")).toBe("https://localhost:8443");
    expect(ownBaseUrl(agent, "weather.sky.svc:443")).toBe("https://weather.sky.svc:443");
    expect(ownBaseUrl(agent, "weather.sky.svc.cluster.local")).toBe("https://weather.sky.svc.cluster.local");
    expect(ownBaseUrl(agent, "attacker.example")).toBe("https://weather.sky.svc");
    expect(ownBaseUrl(agent, "weather.sky.svc.attacker.example")).toBe("https://weather.sky.svc");
    expect(ownBaseUrl(agent, "localhost@attacker.example")).toBe("https://weather.sky.svc");
    expect(ownBaseUrl(agent, undefined)).toBe("https://weather.sky.svc");
    const fixed = Agent.parse({ ...agent, spec: { ...agent.spec, baseUrl: "https://weather.example/" } });
    expect(ownBaseUrl(fixed, "attacker.example")).toBe("https://weather.example");
    expect(
      JSON.stringify(
        agentCard({ agent: fixed, signing: self.signing, bearer: false }, ownBaseUrl(fixed, "attacker.example")),
      ),
    ).not.toContain("attacker");
  });
});

describe("verifyCardSignatures", () => {
  it("verifies ES256 and RS256 signatures another JOSE library made, and cards the SDK's form covers", async () => {
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
    // A card with an empty string signed the way the SDK signs (empty fields dropped first).
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const withEmpty = { ...card, documentationUrl: "", capabilities: {} };
    const jws = await new FlattenedSign(new TextEncoder().encode(cardPayload(withEmpty, "sdk")))
      .setProtectedHeader({ alg: "ES256", typ: "JOSE", kid: "k1" })
      .sign(pair.privateKey);
    await expect(
      verifyCardSignatures(
        { ...withEmpty, signatures: [{ protected: jws.protected, signature: jws.signature }] },
        async () => pair.publicKey,
      ),
    ).resolves.toEqual({ signed: true, kids: ["k1"] });
  });

  it("refuses a signature whose algorithm does not suit its key: none, HS256 with the public key as secret, ES256 on an Ed25519 key", async () => {
    const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const keys = jwks(self.signing);
    const jwk = keys.keys[0]!;
    const payload = Buffer.from(cardPayload(card)).toString("base64url");
    const forged = (header: Record<string, unknown>, sign: (input: string) => string) => {
      const protectedHeader = b64({ typ: "JOSE", kid: jwk.kid, ...header });
      return {
        ...card,
        signatures: [{ protected: protectedHeader, signature: sign(`${protectedHeader}.${payload}`) }],
      };
    };
    const byJwks = (h: Parameters<typeof keyOfJwks>[1]) => keyOfJwks(keys, h);
    await expect(
      verifyCardSignatures(
        forged({ alg: "none" }, () => ""),
        byJwks,
      ),
    ).rejects.toThrow(/algorithm "none" is not accepted/);
    // The agent's public key (as its JWKS gives it) used as an HMAC secret.
    for (const secret of [JSON.stringify(jwk), jwk.x!, Buffer.from(jwk.x!, "base64url")]) {
      const hs = forged({ alg: "HS256" }, (input) => createHmac("sha256", secret).update(input).digest("base64url"));
      await expect(verifyCardSignatures(hs, byJwks)).rejects.toThrow(/algorithm "HS256" is not accepted/);
    }
    // A JWKS that holds a symmetric key (anyone can read it, so anyone could sign with it).
    const octSecret = Buffer.from("a shared secret that is public anyway").toString("base64url");
    const oct = forged({ alg: "HS256", kid: "oct" }, (input) =>
      createHmac("sha256", Buffer.from(octSecret, "base64url")).update(input).digest("base64url"),
    );
    await expect(
      verifyCardSignatures(oct, (h) => keyOfJwks({ keys: [{ kty: "oct", k: octSecret, kid: "oct" }] }, h)),
    ).rejects.toThrow(CardSignatureError);
    // An EC signature presented as the agent's Ed25519 key.
    const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const es = await joseSigned("ES256", ec.privateKey, { kid: jwk.kid });
    await expect(verifyCardSignatures(es, byJwks)).rejects.toThrow(/has no ES256 key/);
    await expect(verifyCardSignatures(es, async () => generateKeyPairSync("ed25519").publicKey)).rejects.toThrow(
      /cannot be checked with its key/,
    );
  });

  it("refuses critical headers and malformed signatures", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const key = async () => pair.publicKey;
    const withSig = (sig: unknown) => ({ ...card, signatures: [sig] });
    await expect(
      verifyCardSignatures(await joseSigned("ES256", pair.privateKey, { crit: ["b64"], b64: true }), key),
    ).rejects.toThrow(/critical header/);
    await expect(verifyCardSignatures(withSig({ protected: "%%%", signature: "x" }), key)).rejects.toThrow(
      /not base64url JSON/,
    );
    await expect(verifyCardSignatures(withSig({ signature: "x" }), key)).rejects.toThrow(/no protected header/);
    await expect(verifyCardSignatures({ ...card, signatures: "x" }, key)).rejects.toThrow(/not a list/);
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
  it("finds the key by kid, or the only one, and refuses what is not a key", async () => {
    const a = identity("https://a.example");
    const keys = jwks(a.signing);
    const h = (kid?: string) => ({ alg: "EdDSA", ...(kid ? { kid } : {}) });
    await expect(keyOfJwks(keys, h("https://a.example#key-1"))).resolves.toBeDefined();
    await expect(keyOfJwks(keys, h())).resolves.toBeDefined();
    await expect(keyOfJwks(keys, h("other"))).rejects.toThrow(/has no EdDSA key other/);
    await expect(keyOfJwks({ keys: [...keys.keys, ...keys.keys] }, h())).rejects.toThrow(/more than one/);
    await expect(keyOfJwks({}, h("k"))).rejects.toThrow(/has no keys/);
    await expect(keyOfJwks({ keys: [{ kid: "k", kty: "OKP", crv: "Ed25519", x: "!!" }] }, h("k"))).rejects.toThrow(
      CardSignatureError,
    );
  });
});

function withoutSignatures(c: Record<string, unknown>) {
  const { signatures: _, ...rest } = c;
  return rest;
}
