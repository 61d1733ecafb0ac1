// IdentityResolver: the verification of inbound messages with IFP-5 key lookup (spec.peers,
// did:key, the sender's identity document) and the authentication level each key source gives;
// and the reading of the introduction tokens (level 0) from their mounted file.
import type { KeyObject } from "node:crypto";
import type { Logger } from "pino";
import { tokenFile } from "../../util/token-file.ts";
import type { DiscoveryClient } from "../../discovery/client.ts";
import {
  didKeyRaw,
  isHttpsUrl,
  KeyLookup,
  LOOKUP_DEFAULTS,
  type LookupBudgets,
  type LookupLimits,
} from "../../discovery/keys.ts";
import { isDidKey } from "../../protocol/did-key.ts";
import { insufficientAuthLevel, invalidSignature, ProtocolError, unknownSender } from "../../protocol/errors.ts";
import { publicKeyFromRaw } from "../../protocol/keys.ts";
import type { Message, Signature } from "../../protocol/message.ts";
import { verifyIntroduction, verifySignature } from "../../protocol/signing.ts";
import {
  AuthLevel,
  checkProfile,
  HIGHEST_GRANTED_LEVEL,
  signatureCandidates,
  type KeySource,
  type MessageVerifier,
  type Verified,
} from "../../protocol/verify.ts";
import type { AgentSpec } from "../../resources/agent.ts";

/** Bounds on what a sender can make the agent do to look its key up (docs/identity.md); shared with the relay. */
export type IdentityLimits = LookupLimits;

export const IDENTITY_DEFAULTS: IdentityLimits = LOOKUP_DEFAULTS;

interface FoundKey {
  key: KeyObject;
  level: number;
  source: KeySource;
}

/**
 * Message verification with IFP-5 key lookup (section 4.3) and authentication levels
 * (section 2), in this order for an Ed25519 signature:
 *
 *  1. spec.peers — keys the humans exchanged out of band: level 2 (a revoked key there is refused
 *     whatever else says);
 *  2. did:key — the key is the identifier, resolved locally: level 1, since anyone can make one
 *     and nobody but the sender vouches for it; level 2 (source peers) when spec.peers names it;
 *  3. the sender's identity document, over verified TLS: from the agent id itself when it is an
 *     https URL (level 2: TLS binds the key to the id), else from its spec.peers url (level 1:
 *     a key found by lookup). Documents are cached by the discovery client (ETag, max-age), which
 *     is the "cached keys" step.
 *
 * No self-asserted key outranks one the humans or a verified https identity vouch for; no key
 * source gives level 3 (docs/identity.md#authentication-levels).
 *
 * An hmac-sha256 signature made with an introduction token is level 0. An unsigned message (only
 * with requireSignature: false) is unauthenticated (-1). A lookup that fails answers 401
 * unknown_sender with the reason, never a silent drop; failures are remembered for
 * negativeTtlMs, and lookups of new senders are bounded per address and in total.
 */
export class IdentityResolver implements MessageVerifier {
  private readonly spec: AgentSpec;
  private readonly tokens: () => readonly string[];
  private readonly keys: KeyLookup;

  constructor(deps: {
    spec: AgentSpec;
    discovery: DiscoveryClient;
    /** The introduction tokens currently accepted (none: level 0 is never given). */
    introductionTokens?: () => readonly string[];
    limits?: Partial<IdentityLimits>;
    /** The lookup budgets every event loop of the pod shares (spec.runtime.workers). */
    budgets?: LookupBudgets;
    log?: Logger;
    now?: () => number;
  }) {
    this.spec = deps.spec;
    this.tokens = deps.introductionTokens ?? (() => []);
    const { discovery, limits, budgets, log, now } = deps;
    this.keys = new KeyLookup({ discovery, limits, budgets, log, now });
  }

  async verify(
    message: Message,
    requireSignature: boolean,
    context: { address: string } = { address: "unknown" },
  ): Promise<Verified> {
    const signatures = message.security?.signatures ?? [];
    if (signatures.length === 0) {
      if (requireSignature) throw invalidSignature("the message is not signed (security.signatures[] is empty)");
      return { signer: undefined, keyId: undefined, authLevel: AuthLevel.unauthenticated, source: "none" };
    }
    const sender = message.headers.from.agent;
    let best: Verified | undefined;
    const picked = signatureCandidates(message);
    let failure = picked.failure;
    for (const { signature: s, keyId } of picked.candidates) {
      try {
        const v = await this.verifyOne(message, s, sender, keyId, context.address);
        if (!best || v.authLevel > best.authLevel) best = v;
      } catch (err) {
        // Throttling is not a verdict on the message: say so rather than "invalid".
        if (err instanceof ProtocolError && err.statusCode !== 401) throw err;
        // A concrete reason about the sender's own signature beats a generic one.
        failure = err as Error;
      }
    }
    if (!best) {
      // Where unsigned messages are accepted, a signature by a sender nobody can look up does
      // not make the message worse than unsigned: it is accepted like one. A signature that
      // does not verify against a key that is known stays refused.
      if (!requireSignature && failure instanceof ProtocolError && failure.code === "unknown_sender") {
        return { signer: undefined, keyId: undefined, authLevel: AuthLevel.unauthenticated, source: "none" };
      }
      throw failure ?? invalidSignature("no acceptable signature");
    }
    const min = minAuthLevel(this.spec);
    if (best.authLevel < min) {
      throw insufficientAuthLevel(
        `this agent accepts messages at authentication level ${min} or above; yours is at level ${best.authLevel} (${best.source}). ` +
          (best.authLevel >= HIGHEST_GRANTED_LEVEL
            ? "No key source of this runtime establishes a higher level."
            : best.authLevel === AuthLevel.signed
              ? "Publish your identity document at your https agent id, or ask this agent's humans to add your key to its peers."
              : "Sign with an Ed25519 key this agent can find (its peers, your identity document, or a did:key identifier)."),
      );
    }
    return best;
  }

  private async verifyOne(
    message: Message,
    s: Signature,
    sender: string,
    keyId: string,
    address: string,
  ): Promise<Verified> {
    if (s.alg === "hmac-sha256") {
      const tokens = this.tokens();
      if (!tokens.length) throw invalidSignature("introduction tokens (hmac-sha256) are not accepted by this agent");
      checkProfile(s, "hmac-sha256", message.headers);
      if (!verifyIntroduction(message, s, tokens))
        throw invalidSignature(`the introduction token signature ${s.key_id} does not verify`);
      return { signer: sender, keyId, authLevel: AuthLevel.introduction, source: "introduction" };
    }
    checkProfile(s, "ed25519", message.headers);
    const found = await this.lookup(sender, keyId, address);
    if (!verifySignature(message, s, found.key))
      throw invalidSignature(`signature verification failed for key_id ${s.key_id}`);
    return { signer: sender, keyId, authLevel: found.level, source: found.source };
  }

  /** The key `keyId` of `sender`, and the level it establishes; throws 401 with the reason. */
  async lookup(sender: string, keyId: string, address: string): Promise<FoundKey> {
    const peer = this.spec.peers.find((p) => p.agentId === sender);
    const trusted = peer?.keys.find((k) => k.keyId === keyId);
    if (trusted?.status === "revoked") throw invalidSignature(`key ${sender}#${keyId} has been revoked`);
    if (isDidKey(sender)) return didKeyLookup(sender, peer);
    if (trusted) return { key: publicKeyFromRaw(trusted.publicKey), level: AuthLevel.verified, source: "peers" };
    let url: string;
    let level: number;
    if (isHttpsUrl(sender)) [url, level] = [sender, AuthLevel.verified];
    else if (peer && "url" in peer && typeof peer.url === "string") [url, level] = [peer.url, AuthLevel.signed];
    else {
      throw unknownSender(
        peer
          ? `key ${keyId} of ${sender} is not among the keys this agent's humans gave it, and no url is known to look it up at`
          : `${sender} is not known here: it is not among this agent's peers, and its id is neither an https URL (with an identity document) nor a did:key`,
      );
    }
    const key = await this.keys.documentKey(sender, url, keyId, address);
    return { key, level, source: "identity-document" };
  }
}

/**
 * The key of a did:key sender: always the identifier's own key (a did:key is its key, so no
 * other key may sign for it). Anyone can make a did:key, so on its own it proves only that the
 * message is signed (level 1, source did:key); named in spec.peers by the humans it has the
 * peers' level (2, source peers), unless they marked its key revoked there.
 */
function didKeyLookup(sender: string, peer: AgentSpec["peers"][number] | undefined): FoundKey {
  const raw = didKeyRaw(sender);
  const key = publicKeyFromRaw(raw);
  if (!peer) return { key, level: AuthLevel.signed, source: "did:key" };
  const revoked = peer.keys.find((k) => k.publicKey === raw && k.status === "revoked");
  if (revoked) throw invalidSignature(`key ${sender}#${revoked.keyId} has been revoked`);
  return { key, level: AuthLevel.verified, source: "peers" };
}

/** spec.inbox.minAuthLevel, or its default: 1, and 0 when introduction tokens are configured. */
export function minAuthLevel(spec: AgentSpec): number {
  return spec.inbox.minAuthLevel ?? (spec.inbox.introductionTokens ? AuthLevel.introduction : AuthLevel.signed);
}

/**
 * Introduction tokens from a file (the mounted Secret key): one per line, blank lines ignored;
 * a token shorter than 16 characters is refused. Read again when the file changes, at most every
 * few seconds, so a rotated Secret takes effect without a restart.
 */
export function introductionTokenFile(
  path: string,
  log?: Logger,
  now: () => number = Date.now,
): () => readonly string[] {
  return tokenFile(path, "introduction tokens", log, now);
}
