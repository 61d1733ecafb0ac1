// The agent's signing keys as mounted from its Secret: signing.key, and beside it (after a
// rotation) keys.json with every key's status and the retired keys still in transition.
import { existsSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { ANNOTATIONS } from "../contract/annotations.ts";
import {
  parseSigningKeySet,
  publishedEncryptionKeys,
  publishedKeys,
  SIGNING_KEYS_FILE,
  type PublishedEncryptionKey,
  type PublishedKey,
} from "../contract/signing-keys.ts";
import { encryptionKeyFromPem, type EncryptionKey } from "../protocol/encryption.ts";
import { privateKeyFromPem, rawPublicKey } from "../protocol/keys.ts";
import type { SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { isoSeconds } from "../util/time.ts";
import type { OneEncryptionKey } from "./documents.ts";

export interface Keyring {
  signing: SigningKey;
  /** Every key for the identity document; undefined without keys.json (one active key). */
  published?: PublishedKey[];
  publicKey: string;
  /**
   * After a rotation: every encryption key for the identity document, the retired ones still in
   * their transition (they decrypt, nobody encrypts for them), and the ids of revoked ones.
   */
  encryption?: { published: PublishedEncryptionKey[]; retired: EncryptionKey[]; revoked: string[] };
}

/**
 * Read the key set. Without keys.json the key id is spec.signing.keyId. With it, the active key
 * must be signing.key (a mismatch is a start-up error, never a silent downgrade), and the newest
 * retired key whose private half is present signs beside it (verifiers check at most two
 * signatures of a sender).
 */
export async function loadKeyring(signingKeyFile: string, agentId: string, defaultKeyId: string): Promise<Keyring> {
  const privateKey = privateKeyFromPem(await readFile(signingKeyFile));
  const publicKey = rawPublicKey(privateKey);
  const setFile = join(dirname(signingKeyFile), SIGNING_KEYS_FILE);
  if (!existsSync(setFile)) return { signing: { agentId, keyId: defaultKeyId, privateKey }, publicKey };
  let set: ReturnType<typeof parseSigningKeySet>;
  try {
    set = parseSigningKeySet(await readFile(setFile, "utf8"));
  } catch (err) {
    throw new Error(`${setFile} is not a signing key set: ${(err as Error).message.slice(0, 300)}`);
  }
  const active = set.keys.find((k) => k.status === "active");
  if (!active || active.publicKey !== publicKey)
    throw new Error(`${setFile} does not name ${signingKeyFile} as its active key`);
  const retired = set.keys
    .filter((k) => k.status === "retired" && k.file && existsSync(join(dirname(signingKeyFile), k.file)))
    .at(-1);
  const transition = [];
  if (retired) {
    const key = privateKeyFromPem(await readFile(join(dirname(signingKeyFile), retired.file!)));
    if (rawPublicKey(key) !== retired.publicKey)
      throw new Error(`${retired.file} is not the private half of retired key ${retired.keyId}`);
    transition.push({ keyId: retired.keyId, privateKey: key });
  }
  let encryption: Keyring["encryption"];
  if (set.encryption) {
    const retired: EncryptionKey[] = [];
    for (const k of set.encryption.filter(
      (r) => r.status === "retired" && r.file && existsSync(join(dirname(signingKeyFile), r.file)),
    )) {
      const key = encryptionKeyFromPem(await readFile(join(dirname(signingKeyFile), k.file!)));
      if (key.publicKey !== k.publicKey)
        throw new Error(`${k.file} is not the private half of retired encryption key ${k.keyId}`);
      retired.push(key);
    }
    encryption = {
      published: publishedEncryptionKeys(set.encryption),
      retired,
      revoked: set.encryption.filter((k) => k.status === "revoked").map((k) => k.keyId),
    };
  }
  return {
    signing: { agentId, keyId: active.keyId, privateKey, ...(transition.length ? { transition } : {}) },
    published: publishedKeys(set),
    publicKey,
    ...(encryption ? { encryption } : {}),
  };
}

/**
 * When the active signing key was created, for the identity document of an agent without a key
 * set: the operator's annotation, else the Agent's creation, else the key file's modification time.
 */
export function signingKeyCreated(agent: Agent, signingKeyFile: string): string {
  return (
    agent.metadata.annotations?.[ANNOTATIONS.signingKeyCreated] ??
    agent.metadata.creationTimestamp ??
    isoSeconds(statSync(signingKeyFile).mtime)
  );
}

/** The agent's own encryption keys: --encryption-key, with what the key set says of the others. */
export interface OwnEncryptionKeys {
  /** The active key, then the retired ones still in their transition (they decrypt only); none without --encryption-key. */
  keys: EncryptionKey[];
  /** What the identity document lists: after a rotation every key of the set with its status; before, the one key. */
  published?: OneEncryptionKey | PublishedEncryptionKey[];
  /** Ids of revoked keys (a message still encrypted for one is refused saying so). */
  revoked?: string[];
}

/** Read --encryption-key (`file`); without it the agent publishes no encryption key, and says so. */
export async function loadEncryptionKeys(
  file: string | undefined,
  keyring: Keyring,
  log: Logger,
): Promise<OwnEncryptionKeys> {
  const revoked = keyring.encryption?.revoked;
  if (!file) {
    log.warn(
      "no --encryption-key: this agent publishes no encryption key and cannot receive encrypted messages (docs/encryption.md)",
    );
    return { keys: [], revoked };
  }
  const key = encryptionKeyFromPem(await readFile(file));
  return {
    keys: [key, ...(keyring.encryption?.retired ?? [])],
    published: keyring.encryption?.published ?? {
      keyId: key.keyId,
      publicKey: key.publicKey,
      created: isoSeconds(statSync(file).mtime),
    },
    revoked,
  };
}
