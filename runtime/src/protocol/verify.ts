// Message verification: the IFP-5 authentication levels and key sources, the MessageVerifier that
// the inbox and the relay intake use, and Verifier, which checks against keys trusted out of band.
import type { KeyObject } from "node:crypto";
import type { TrustedKey } from "../resources/common.ts";
import { invalidSignature, unknownSender } from "./errors.ts";
import { publicKeyFromRaw } from "./keys.ts";
import type { Message, Signature } from "./message.ts";
import { parseKeyId, REQUIRED_SIGNED_HEADERS, unsignedHeaders, verifySignature } from "./signing.ts";

/**
 * IFP-5 authentication levels, and `unauthenticated` (-1) for an unsigned message an inbox with
 * requireSignature: false lets in: below every level, so no min_auth_level is ever met by it.
 */
export const AuthLevel = { unauthenticated: -1, introduction: 0, signed: 1, verified: 2, bound: 3 } as const;

/**
 * The highest level a runtime grants: a key the Agent's spec trusts, or one fetched over TLS from
 * the sender's own URL. No verifier grants `bound`. A message at this level is never a downgrade
 * in a conversation (Conversations.mayRefuse); granting a higher one means raising this too.
 */
export const HIGHEST_GRANTED_LEVEL: number = AuthLevel.verified;

/** Where the key that established the level came from. */
export type KeySource = "none" | "introduction" | "identity-document" | "peers" | "did:key";

export interface Verified {
  /** The verified signer (= headers.from.agent), or undefined for an accepted unsigned message. */
  signer: string | undefined;
  keyId: string | undefined;
  authLevel: number;
  source?: KeySource;
}

/** What the inbox and the relay intake verify messages with. */
export interface MessageVerifier {
  /** `address` is where the message came from (client IP, or relay URL), for per-address bounds. */
  verify(message: Message, requireSignature: boolean, context?: { address: string }): Verified | Promise<Verified>;
}

interface KeyEntry {
  key: KeyObject;
  status: TrustedKey["status"];
}

/** How many signatures claiming the sender are tried before giving up, to bound the work per request. */
const MAX_CANDIDATES = 2;

/** Verifies messages against keys trusted out of band (an Agent's peers, a Relay's agents). */
export class Verifier implements MessageVerifier {
  private readonly agents = new Map<string, Map<string, KeyEntry>>();

  constructor(
    known: ReadonlyArray<{
      agentId: string;
      keys: ReadonlyArray<Omit<TrustedKey, "status"> & { status?: TrustedKey["status"] }>;
    }>,
  ) {
    for (const a of known) {
      const keys = this.agents.get(a.agentId) ?? new Map<string, KeyEntry>();
      for (const k of a.keys) keys.set(k.keyId, { key: publicKeyFromRaw(k.publicKey), status: k.status ?? "active" });
      this.agents.set(a.agentId, keys);
    }
  }

  knows(agentId: string): boolean {
    return this.agents.has(agentId);
  }

  /** The public key an agent signs with, for request signatures (relay endpoints). */
  key(agentId: string, keyId: string): KeyObject {
    const keys = this.agents.get(agentId);
    if (!keys) throw unknownSender(`agent ${agentId} is not known here`);
    const entry = keys.get(keyId);
    if (!entry) throw invalidSignature(`key ${agentId}#${keyId} is not a trusted key of ${agentId}`);
    if (entry.status === "revoked") throw invalidSignature(`key ${agentId}#${keyId} has been revoked`);
    return entry.key;
  }

  /**
   * Checks the message's signatures; throws a 401 ProtocolError when none is acceptable.
   * With requireSignature false an unsigned message passes at level 0, but a present
   * signature must still be valid.
   */
  verify(message: Message, requireSignature: boolean): Verified {
    const signatures = message.security?.signatures ?? [];
    if (signatures.length === 0) {
      if (requireSignature) throw invalidSignature("the message is not signed (security.signatures[] is empty)");
      return { signer: undefined, keyId: undefined, authLevel: AuthLevel.unauthenticated, source: "none" };
    }
    const sender = message.headers.from.agent;
    const picked = signatureCandidates(message);
    let failure = picked.failure;
    for (const { signature: s, keyId } of picked.candidates) {
      try {
        checkProfile(s, "ed25519", message.headers);
        const key = this.key(sender, keyId);
        if (!verifySignature(message, s, key)) {
          throw invalidSignature(`signature verification failed for key_id ${s.key_id}`);
        }
        return { signer: sender, keyId, authLevel: AuthLevel.verified, source: "peers" };
      } catch (err) {
        // A concrete reason about the sender's own signature beats a generic one.
        failure = err as Error;
      }
    }
    throw failure ?? invalidSignature("no acceptable signature");
  }
}

/**
 * The signatures of a message worth checking: by its sender (`<agent_id>#<key>` naming
 * headers.from.agent), at most MAX_CANDIDATES of them; `failure` is why the first one passed
 * over was, for the answer when none verifies.
 */
export function signatureCandidates(message: Message): {
  candidates: { signature: Signature; keyId: string }[];
  failure?: Error;
} {
  const sender = message.headers.from.agent;
  const candidates: { signature: Signature; keyId: string }[] = [];
  let failure: Error | undefined;
  for (const signature of message.security?.signatures ?? []) {
    const ref = parseKeyId(signature.key_id);
    if (!ref) {
      failure ??= invalidSignature(`key_id ${JSON.stringify(signature.key_id)} is not of the form <agent_id>#<key>`);
      continue;
    }
    if (ref.agentId !== sender) {
      failure ??= invalidSignature(`the signature is by ${ref.agentId} but the message is from ${sender}`);
      continue;
    }
    if (candidates.length >= MAX_CANDIDATES) break;
    candidates.push({ signature, keyId: ref.keyId });
  }
  return { candidates, failure };
}

/** What every accepted signature must cover (docs/agent.md, signing profile). */
export function checkProfile(
  s: { alg: string; signed_headers: string[]; signed_body: boolean; key_id: string },
  alg = "ed25519",
  headers?: object,
): void {
  if (s.alg !== alg) throw invalidSignature(`algorithm ${JSON.stringify(s.alg)} is not accepted; use ${alg}`);
  const missing = REQUIRED_SIGNED_HEADERS.filter((h) => !s.signed_headers.includes(h));
  if (missing.length) throw invalidSignature(`the signature must cover ${missing.join(", ")} (signed_headers)`);
  const unsigned = headers ? unsignedHeaders(headers, s.signed_headers) : [];
  if (unsigned.length)
    throw invalidSignature(
      `the signature must cover every header present; not signed: ${unsigned.join(", ")} (signed_headers)`,
    );
  if (!s.signed_body) throw invalidSignature("the signature must cover the body (signed_body: true)");
}
