// End-to-end encryption of message bodies, scheme x25519-hkdf-sha256-xchacha20poly1305
// (docs/encryption.md): encrypt and decrypt a message, its wire schemas, and X25519 keys and ids.
import { createHash, generateKeyPairSync, randomBytes as nodeRandomBytes } from "node:crypto";
import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import canonicalize from "canonicalize";
import { z } from "zod";
import { privateKeyOfType } from "./keys.ts";
import { MessageBody, type Message } from "./message.ts";

/**
 * End-to-end encryption of message bodies (IFP-5 section 6), scheme
 * `x25519-hkdf-sha256-xchacha20poly1305` — defined in docs/encryption.md, test vectors in
 * runtime/vectors/encryption.json. Every primitive is from @noble/curves, @noble/hashes and
 * @noble/ciphers.
 *
 *   cek   = 32 random bytes (the content key), n = 24 random bytes
 *   for each recipient (agent, key_id, public key R):
 *     e, E  = a fresh X25519 key pair;  Z = X25519(e, R)  (all-zero Z refused)
 *     okm   = HKDF-SHA256(ikm Z, salt E || R, info "ifp-e2ee-v1 wrap " || message_id, 56 bytes)
 *     wrapped_key = XChaCha20-Poly1305(key okm[0..32], nonce okm[32..56], no AAD).encrypt(cek)
 *   recipients = [{agent, key_id, epk: b64u(E), wrapped_key: b64u(...)}, ...]
 *   aad   = UTF-8 of JCS {scheme, message_id, from: headers.from.agent, recipients}
 *   body  = {ciphertext: b64u(n || XChaCha20-Poly1305(cek, n, aad).encrypt(UTF-8 of JCS(body)))}
 *   security.encryption = {scheme, recipients}
 *
 * The sender signs afterwards, so the signature covers the ciphertext; the AAD binds the
 * ciphertext to the message id, the sender and every wrapped key, so changing any of them
 * (or the ciphertext) makes decryption fail for every recipient.
 */
export const SCHEME = "x25519-hkdf-sha256-xchacha20poly1305";
const WRAP_INFO = "ifp-e2ee-v1 wrap ";
/** Recipients of one message at most (headers.to allows 100). */
export const MAX_RECIPIENTS = 100;

/** Entries for this agent tried at most when decrypting (one per key it may hold during a rotation). */
const MAX_ENTRIES_TRIED = 4;

const b64u = (b: Uint8Array) => Buffer.from(b).toString("base64url");

/** base64url (no padding) of exactly `n` bytes, or undefined. */
function fromB64u(s: unknown, n?: number): Uint8Array | undefined {
  if (typeof s !== "string" || !/^[A-Za-z0-9_-]*$/.test(s)) return undefined;
  const b = Buffer.from(s, "base64url");
  if (b.toString("base64url") !== s) return undefined;
  if (n !== undefined && b.length !== n) return undefined;
  return new Uint8Array(b);
}

export const EncryptionRecipient = z.looseObject({
  agent: z.string().min(1).max(512),
  key_id: z.string().min(1).max(256),
  epk: z.string().length(43),
  wrapped_key: z.string().length(64),
});
export type EncryptionRecipient = z.infer<typeof EncryptionRecipient>;

/** security.encryption of this scheme. */
export const Encryption = z.looseObject({
  scheme: z.literal(SCHEME),
  recipients: z.array(EncryptionRecipient).min(1).max(MAX_RECIPIENTS),
});
export type Encryption = z.infer<typeof Encryption>;

/** The ciphertext form of body. */
export const EncryptedBody = z.strictObject({ ciphertext: z.string().min(1) });

/** A recipient's public encryption key. */
export interface RecipientKey {
  agent: string;
  keyId: string;
  /** base64url (no padding) of the raw 32-byte X25519 public key. */
  publicKey: string;
}

/** One of this agent's own encryption keys. */
export interface EncryptionKey {
  keyId: string;
  /** Raw 32-byte X25519 private key. */
  privateKey: Uint8Array;
  publicKey: string;
}

/** What randomness encryptMessage draws (replaced only by the test vectors). */
export interface EncryptionRandom {
  contentKey?: Uint8Array;
  nonce?: Uint8Array;
  /** One ephemeral private key per recipient, in order. */
  ephemeral?: Uint8Array[];
}

export function isEncrypted(message: { security?: { encryption?: unknown } }): boolean {
  return message.security?.encryption !== undefined;
}

function wrapKey(
  Z: Uint8Array,
  E: Uint8Array,
  R: Uint8Array,
  messageId: string,
): { key: Uint8Array; nonce: Uint8Array } {
  if (Z.every((b) => b === 0))
    throw new EncryptionError("the X25519 shared secret is all zero (a low-order public key)");
  const salt = new Uint8Array(64);
  salt.set(E, 0);
  salt.set(R, 32);
  const okm = hkdf(sha256, Z, salt, new TextEncoder().encode(WRAP_INFO + messageId), 56);
  return { key: okm.subarray(0, 32), nonce: okm.subarray(32, 56) };
}

function contentAad(scheme: string, message: Pick<Message, "headers">, recipients: unknown): Uint8Array {
  const text = canonicalize({
    scheme,
    message_id: message.headers.message_id,
    from: message.headers.from.agent,
    recipients,
  });
  return new TextEncoder().encode(text!);
}

/** A problem with encrypting or decrypting; the message says what. */
export class EncryptionError extends Error {}

/**
 * A copy of the (unsigned) message with its body encrypted for `recipients`; sign it
 * afterwards. Throws EncryptionError for an unusable key.
 */
export function encryptMessage<M extends Pick<Message, "headers" | "body" | "security">>(
  message: M,
  recipients: readonly RecipientKey[],
  random: EncryptionRandom = {},
): M {
  if (!recipients.length) throw new EncryptionError("no recipient to encrypt for");
  if (recipients.length > MAX_RECIPIENTS) throw new EncryptionError(`at most ${MAX_RECIPIENTS} recipient keys`);
  const cek = random.contentKey ?? new Uint8Array(nodeRandomBytes(32));
  const nonce = random.nonce ?? new Uint8Array(nodeRandomBytes(24));
  const entries: EncryptionRecipient[] = recipients.map((r, i) => {
    const R = fromB64u(r.publicKey, 32);
    if (!R) throw new EncryptionError(`the encryption key ${r.keyId} of ${r.agent} is not base64url of 32 bytes`);
    const e = random.ephemeral?.[i] ?? x25519.utils.randomSecretKey();
    const E = x25519.getPublicKey(e);
    const w = wrapKey(x25519.getSharedSecret(e, R), E, R, message.headers.message_id);
    return {
      agent: r.agent,
      key_id: r.keyId,
      epk: b64u(E),
      wrapped_key: b64u(xchacha20poly1305(w.key, w.nonce).encrypt(cek)),
    };
  });
  const plaintext = new TextEncoder().encode(canonicalize(message.body)!);
  const sealed = xchacha20poly1305(cek, nonce, contentAad(SCHEME, message, entries)).encrypt(plaintext);
  const ciphertext = new Uint8Array(24 + sealed.length);
  ciphertext.set(nonce, 0);
  ciphertext.set(sealed, 24);
  const encryption: Encryption = { scheme: SCHEME, recipients: entries };
  return { ...message, body: { ciphertext: b64u(ciphertext) }, security: { ...(message.security ?? {}), encryption } };
}

/**
 * The message with its body decrypted by one of `keys` (this agent's, `self`), or an
 * EncryptionError saying why not: unknown scheme, not a recipient, no matching key, or a
 * ciphertext or wrapped key that does not authenticate. security.encryption stays as it came.
 */
export function decryptMessage<M extends Pick<Message, "headers" | "body" | "security">>(
  message: M,
  self: string,
  keys: readonly EncryptionKey[],
): M {
  const raw = message.security?.encryption as { scheme?: unknown } | undefined;
  if (!raw || typeof raw !== "object") throw new EncryptionError("the message is not encrypted");
  if (raw.scheme !== SCHEME)
    throw new EncryptionError(
      `encryption scheme ${JSON.stringify(raw.scheme)} is not supported; this agent supports ${SCHEME}`,
    );
  const enc = Encryption.safeParse(raw);
  if (!enc.success)
    throw new EncryptionError(
      `security.encryption is not valid for ${SCHEME}: ${enc.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    );
  const body = EncryptedBody.safeParse(message.body);
  if (!body.success) throw new EncryptionError("an encrypted message's body must be exactly {ciphertext: <base64url>}");
  const ct = fromB64u(body.data.ciphertext);
  if (!ct || ct.length < 24 + 16)
    throw new EncryptionError("body.ciphertext is not base64url of a nonce and a sealed body");
  // At most a few entries are tried (a sender could list this agent a hundred times): each costs an X25519.
  const mine = enc.data.recipients.filter((r) => r.agent === self).slice(0, MAX_ENTRIES_TRIED);
  if (!mine.length)
    throw new EncryptionError(
      `the message is not encrypted for ${self} (recipients: ${enc.data.recipients.map((r) => r.agent).join(", ")})`,
    );
  let cek: Uint8Array | undefined;
  let tried = false;
  for (const r of mine) {
    const key = keys.find((k) => k.keyId === r.key_id);
    if (!key) continue;
    tried = true;
    const E = fromB64u(r.epk, 32);
    const wrapped = fromB64u(r.wrapped_key, 48);
    if (!E || !wrapped) continue;
    try {
      const R = fromB64u(key.publicKey, 32)!;
      const w = wrapKey(x25519.getSharedSecret(key.privateKey, E), E, R, message.headers.message_id);
      cek = xchacha20poly1305(w.key, w.nonce).decrypt(wrapped);
      break;
    } catch {
      // does not authenticate: try the next entry for this agent, if any
    }
  }
  if (!cek) {
    throw new EncryptionError(
      tried
        ? `the wrapped key for ${self} does not authenticate (altered in transit, or not made for this agent's key)`
        : `the message is encrypted for key ${mine.map((r) => r.key_id).join(", ")} of ${self}, which this agent does not hold (it holds ${keys.map((k) => k.keyId).join(", ") || "none"})`,
    );
  }
  let plaintext: Uint8Array;
  try {
    plaintext = xchacha20poly1305(cek, ct.subarray(0, 24), contentAad(SCHEME, message, enc.data.recipients)).decrypt(
      ct.subarray(24),
    );
  } catch {
    throw new EncryptionError(
      "the ciphertext does not authenticate: the body, the recipients or the message id were altered after encryption",
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(plaintext));
  } catch {
    throw new EncryptionError("the decrypted body is not JSON");
  }
  const clear = MessageBody.safeParse(parsed);
  if (!clear.success || parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    throw new EncryptionError("the decrypted body is not an IFP-4 body object");
  return { ...message, body: parsed as M["body"] };
}

/** A key id for an encryption key: derived from the public key, so a new key gets a new id. */
export function encryptionKeyId(publicKey: string): string {
  return `x25519-${createHash("sha256").update(publicKey).digest("base64url").slice(0, 12)}`;
}

/** An X25519 private key from PKCS#8 PEM (the `encryption.key` of the signing Secret). */
export function encryptionKeyFromPem(pem: string | Buffer): EncryptionKey {
  const key = privateKeyOfType(pem, "x25519", "the encryption key");
  // A private key's JWK carries its public half too (`x`, base64url unpadded), worked out by Node's own X25519.
  const jwk = key.export({ format: "jwk" });
  const privateKey = new Uint8Array(Buffer.from(jwk.d!, "base64url"));
  const publicKey = jwk.x!;
  return { keyId: encryptionKeyId(publicKey), privateKey, publicKey };
}

/** A new X25519 key pair, the private half as PKCS#8 PEM. */
export function generateEncryptionKey(): { privateKeyPem: string; publicKey: string; keyId: string } {
  const { privateKey } = generateKeyPairSync("x25519");
  const privateKeyPem = privateKey.export({ format: "pem", type: "pkcs8" }).toString();
  const k = encryptionKeyFromPem(privateKeyPem);
  return { privateKeyPem, publicKey: k.publicKey, keyId: k.keyId };
}
