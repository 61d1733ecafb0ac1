// The signing key set the operator keeps in an Agent's signing Secret and the runtime reads.
//
// Secret data (other keys, such as encryption.key, are left as they are):
//   signing.key        PKCS#8 PEM of the active Ed25519 key (the runtime signs with it)
//   keys.json          the key set below: every key the agent has had, with status and dates
//   retired-<n>.key    PKCS#8 PEM of a retired key, kept only for its transition period: the
//                      runtime signs with it too, so that peers who know only the old key still
//                      verify; removed when the key is revoked
//   encryption.key     PKCS#8 PEM of the active X25519 encryption key
//   retired-encryption-<n>.key
//                      a retired encryption key, kept for its transition period so that
//                      messages still encrypted for it are decrypted; removed when revoked
// A rotation (spec.signing.rotate) replaces both keys; each retired key is revoked with the
// signing key retired beside it.
import { z } from "zod";

export const SIGNING_KEY_FILE = "signing.key";
export const SIGNING_KEYS_FILE = "keys.json";
/** Secret data keys of retired keys' private halves. */
export const RETIRED_KEY_RE = /^retired-[0-9]{1,4}\.key$/;
export const ENCRYPTION_KEY_FILE = "encryption.key";
export const RETIRED_ENCRYPTION_KEY_RE = /^retired-encryption-[0-9]{1,4}\.key$/;

const Iso = z.iso.datetime({ offset: true });

export const SigningKeyRecord = z.object({
  keyId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[^#\s]+$/),
  publicKey: z.string().min(1),
  status: z.enum(["active", "retired", "revoked"]),
  created: Iso.optional(),
  retired: Iso.optional(),
  /** When a retired key becomes revoked. */
  revokeAt: Iso.optional(),
  revoked: Iso.optional(),
  /** Secret data key (and file next to signing.key) of a retired key's private half. */
  file: z.string().regex(RETIRED_KEY_RE).optional(),
});
export type SigningKeyRecord = z.infer<typeof SigningKeyRecord>;

/** An encryption key's record: the same life as a signing key's. */
export const EncryptionKeyRecord = SigningKeyRecord.extend({
  file: z.string().regex(RETIRED_ENCRYPTION_KEY_RE).optional(),
});
export type EncryptionKeyRecord = z.infer<typeof EncryptionKeyRecord>;

export const SigningKeySet = z.object({
  keys: z.array(SigningKeyRecord).min(1).max(64),
  /** The last spec.signing.rotate value acted upon. */
  rotation: z.string().optional(),
  /** How many keys were generated; names the next one. */
  generation: z.number().int().min(1).default(1),
  /** The encryption keys, once a rotation replaced the first (before that: encryption.key alone, active). */
  encryption: z.array(EncryptionKeyRecord).max(64).optional(),
});
export type SigningKeySet = z.infer<typeof SigningKeySet>;

export function parseSigningKeySet(text: string): SigningKeySet {
  return SigningKeySet.parse(JSON.parse(text));
}

/** An encryption key as the identity document publishes it (docs/encryption.md). */
export interface PublishedEncryptionKey {
  key_id: string;
  type: "x25519";
  use: "encryption";
  public_key: string;
  created?: string;
  status: "active" | "retired" | "revoked";
  retired_date?: string;
  revoked_date?: string;
}

export function publishedEncryptionKeys(records: readonly EncryptionKeyRecord[]): PublishedEncryptionKey[] {
  return records.map((k) => ({
    key_id: k.keyId,
    type: "x25519",
    use: "encryption",
    public_key: k.publicKey,
    ...(k.created ? { created: k.created } : {}),
    status: k.status,
    ...(k.retired ? { retired_date: k.retired } : {}),
    ...(k.revoked ? { revoked_date: k.revoked } : {}),
  }));
}

/** A key as the identity document publishes it (IFP-5 1.2, 5.1). */
export interface PublishedKey {
  key_id: string;
  type: "ed25519";
  public_key: string;
  created?: string;
  status: "active" | "retired" | "revoked";
  retired_date?: string;
  revoked_date?: string;
}

export function publishedKeys(set: SigningKeySet): PublishedKey[] {
  return set.keys.map((k) => ({
    key_id: k.keyId,
    type: "ed25519",
    public_key: k.publicKey,
    ...(k.created ? { created: k.created } : {}),
    status: k.status,
    ...(k.retired ? { retired_date: k.retired } : {}),
    ...(k.revoked ? { revoked_date: k.revoked } : {}),
  }));
}
