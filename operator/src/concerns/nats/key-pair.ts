// NKey pairs that sign with Node's own Ed25519 (node:crypto, OpenSSL). They are the KeyPair of
// @nats-io/nkeys, so @nats-io/jwt signs account and user JWTs with them as with its own; but that
// one derives the public key again from the seed, in JavaScript, at every call (a JWT takes four
// or five), where these derive it once and sign natively: what bounds how fast the operator
// makes accounts when thousands of Agents are applied at once (docs/scale.md). And the claims of a
// NATS JWT verified with Node's Ed25519 too: @nats-io/jwt's decode verifies in JavaScript
// (tweetnacl), tens of times slower, and every reconcile of an Agent reads its credential's claims.
import { createPrivateKey, createPublicKey, type KeyObject, randomBytes, sign, verify } from "node:crypto";
import type { ClaimsData } from "@nats-io/jwt";
import { type KeyPair, Prefix, Prefixes } from "@nats-io/nkeys";
import { Codec } from "@nats-io/nkeys/lib/codec.js";

/** The DER of a PKCS#8 Ed25519 private key up to its 32-byte seed (RFC 8410). */
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

const text = (b: Uint8Array) => new TextDecoder().decode(b);

class NodeKeyPair implements KeyPair {
  private readonly prefix: Prefix;
  private readonly raw: Uint8Array;
  private readonly key: KeyObject;
  private readonly publicRaw: Uint8Array;
  private readonly publicKey: string;
  private cleared = false;

  constructor(prefix: Prefix, rawSeed: Uint8Array) {
    if (rawSeed.length !== 32) throw new Error("an NKey seed holds 32 bytes");
    this.prefix = prefix;
    this.raw = Uint8Array.from(rawSeed);
    this.key = createPrivateKey({
      key: Buffer.concat([PKCS8_ED25519_PREFIX, this.raw]),
      format: "der",
      type: "pkcs8",
    });
    const jwk = this.key.export({ format: "jwk" });
    this.publicRaw = Buffer.from(jwk.x!, "base64url");
    this.publicKey = text(Codec.encode(prefix, this.publicRaw));
  }

  private live(): void {
    if (this.cleared) throw new Error("the key pair was cleared");
  }

  getPublicKey(): string {
    this.live();
    return this.publicKey;
  }

  getPrivateKey(): Uint8Array {
    this.live();
    const secret = new Uint8Array(64);
    secret.set(this.raw);
    secret.set(this.publicRaw, 32);
    return Codec.encode(Prefix.Private, secret);
  }

  getSeed(): Uint8Array {
    this.live();
    return Codec.encodeSeed(this.prefix, this.raw);
  }

  sign(input: Uint8Array): Uint8Array {
    this.live();
    return new Uint8Array(sign(null, input, this.key));
  }

  verify(input: Uint8Array, sig: Uint8Array): boolean {
    this.live();
    return verify(null, input, this.key, sig);
  }

  clear(): void {
    this.raw.fill(0);
    this.cleared = true;
  }

  seal(): Uint8Array {
    throw new Error("only curve keys seal");
  }

  open(): Uint8Array | null {
    throw new Error("only curve keys open");
  }
}

/** The key pair of an encoded NKey seed (`S…`); throws on one that is not a signing key's seed. */
export function keyPairOfSeed(seed: string): KeyPair {
  const { prefix, buf } = Codec.decodeSeed(new TextEncoder().encode(seed.trim()));
  if (prefix === Prefix.Curve) throw new Error("a curve seed does not sign");
  return new NodeKeyPair(prefix, buf);
}

/** The key pair of a 32-byte seed with this role (an account key derived from a label, say). */
export function keyPairOfRawSeed(prefix: Prefix, rawSeed: Uint8Array): KeyPair {
  return new NodeKeyPair(prefix, rawSeed);
}

/** A fresh key pair with this role. */
export function newKeyPair(prefix: Prefix): KeyPair {
  return new NodeKeyPair(prefix, randomBytes(32));
}

/** Public NKeys as Node key objects, made once each: a handful of signing keys issue every JWT read. */
const publicKeys = new Map<string, KeyObject>();
const PUBLIC_KEYS_HELD = 256;

function publicKeyObject(nkey: string): KeyObject {
  let key = publicKeys.get(nkey);
  if (key) return key;
  const raw = Codec._decode(new TextEncoder().encode(nkey));
  if (raw.length !== 33 || !Prefixes.isValidPublicPrefix(raw[0]!)) throw new Error(`not a public NKey: ${nkey}`);
  key = createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(raw.subarray(1)).toString("base64url") },
    format: "jwk",
  });
  if (publicKeys.size >= PUBLIC_KEYS_HELD) publicKeys.clear();
  publicKeys.set(nkey, key);
  return key;
}

/**
 * The claims of a NATS JWT, once its signature is verified with the key of its `iss`: what
 * @nats-io/jwt's decode returns and refuses (three parts, typ JWT, alg ed25519-nkey or the
 * first version's ed25519), verified natively. Throws on a JWT that is not one or does not verify.
 */
export function decodeVerified<T = unknown>(jwt: string): ClaimsData<T> {
  const chunks = jwt.split(".");
  if (chunks.length !== 3) throw new Error(`invalid jwt - ${chunks.length} chunks`);
  const [head, body, signature] = chunks as [string, string, string];
  const h = JSON.parse(Buffer.from(head, "base64url").toString("utf8")) as { typ?: string; alg?: string };
  if (h.typ !== "jwt" && h.typ !== "JWT") throw new Error(`not a nats jwt - typ ${h.typ}`);
  if (h.alg !== "ed25519-nkey" && h.alg !== "ed25519") throw new Error(`not a nats jwt - alg ${h.alg}`);
  const claims = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as ClaimsData<T>;
  if (typeof claims?.iss !== "string") throw new Error("a nats jwt names its issuer (iss)");
  const signed = Buffer.from(h.alg === "ed25519-nkey" ? `${head}.${body}` : body);
  if (!verify(null, signed, publicKeyObject(claims.iss), Buffer.from(signature, "base64url")))
    throw new Error("sig verification failed");
  return claims;
}
