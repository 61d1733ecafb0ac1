// Signing keys: Ed25519 public keys from and to their raw base64url form (remembered once made),
// private keys (Ed25519, or X25519 for encryption) from PKCS#8 PEM, and new signing key pairs.
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";

/** Public keys made from their raw form, at most this many remembered (the oldest forgotten first). */
const PUBLIC_KEY_CACHE_SIZE = 4096;
const publicKeys = new Map<string, KeyObject>();

/**
 * A public key from base64url (no padding) of its raw 32 bytes. Making a KeyObject costs more
 * than the signature check it serves, so keys are remembered by their encoding (immutable: the
 * same text is always the same key).
 */
export function publicKeyFromRaw(base64url: string): KeyObject {
  const cached = publicKeys.get(base64url);
  if (cached) return cached;
  const raw = Buffer.from(base64url, "base64url");
  if (raw.length !== 32 || raw.toString("base64url") !== base64url) {
    throw new Error("an Ed25519 public key is the base64url encoding (no padding) of exactly 32 bytes");
  }
  const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: base64url }, format: "jwk" });
  if (publicKeys.size >= PUBLIC_KEY_CACHE_SIZE) publicKeys.delete(publicKeys.keys().next().value!);
  publicKeys.set(base64url, key);
  return key;
}

/** base64url (no padding) of a key's raw 32-byte public half. */
export function rawPublicKey(key: KeyObject): string {
  const pub = key.type === "private" ? createPublicKey(key) : key;
  const jwk = pub.export({ format: "jwk" });
  if (jwk.crv !== "Ed25519" || typeof jwk.x !== "string") throw new Error("not an Ed25519 key");
  return jwk.x;
}

/**
 * A private key of the given type from PKCS#8 PEM, the one parser of the runtime's private keys
 * (signing and encryption). `what` names the key in the errors, which never quote the text.
 */
export function privateKeyOfType(pem: string | Buffer, type: "ed25519" | "x25519", what: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: "pem" });
  } catch (err) {
    throw new Error(`${what} is not a PKCS#8 PEM private key: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== type) {
    throw new Error(
      `${what} is ${key.asymmetricKeyType ?? "unknown"}; an ${type === "ed25519" ? "Ed25519" : "X25519"} key is required`,
    );
  }
  return key;
}

/** An Ed25519 private key from PKCS#8 PEM. */
export function privateKeyFromPem(pem: string | Buffer): KeyObject {
  return privateKeyOfType(pem, "ed25519", "the signing key");
}

/** A new Ed25519 key pair, the private half as PKCS#8 PEM. */
export function generateSigningKey(): { privateKeyPem: string; publicKey: string } {
  const { privateKey } = generateKeyPairSync("ed25519");
  return {
    privateKeyPem: privateKey.export({ format: "pem", type: "pkcs8" }).toString(),
    publicKey: rawPublicKey(privateKey),
  };
}
