import type { KeyObject } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import type { Logger } from "pino";
import { DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import { DidKeyError, didKeyPublicKey, isDidKey } from "../protocol/did-key.ts";
import type { IdentityDocument } from "../protocol/documents.ts";
import { insufficientAuthLevel, invalidSignature, ProtocolError, rateLimited, unavailable, unknownSender } from "../protocol/errors.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import type { Message, Signature } from "../protocol/message.ts";
import { verifyIntroduction, verifySignature } from "../protocol/signing.ts";
import { AuthLevel, checkProfile, signatureCandidates, type KeySource, type MessageVerifier, type Verified } from "../protocol/verify.ts";
import type { AgentSpec } from "../resources/agent.ts";
import { RateLimiter } from "../server/ratelimit.ts";

/** Bounds on what a sender can make the agent do to look its key up (docs/identity.md). */
export interface IdentityLimits {
  /** How long a failed lookup is remembered and answered from memory. */
  negativeTtlMs: number;
  /** Failed lookups remembered at most (the oldest is forgotten first). */
  maxNegative: number;
  /** Lookups of senders never seen before, per client address (or relay) per minute. */
  perAddressPerMinute: number;
  /** Lookups in flight at once per client address (or relay). */
  perAddressConcurrent: number;
  /** Lookups in flight at once in this process. */
  concurrent: number;
}

export const IDENTITY_DEFAULTS: IdentityLimits = {
  negativeTtlMs: 60_000,
  maxNegative: 10_000,
  perAddressPerMinute: 30,
  perAddressConcurrent: 2,
  concurrent: 16,
};

/** Senders whose lookup succeeded, remembered so they never spend the newcomers' budget. */
const MAX_KNOWN = 10_000;

interface FoundKey {
  key: KeyObject;
  level: number;
  source: KeySource;
}

interface DocumentKeys {
  doc: IdentityDocument;
  level: number;
  url: string;
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
  private readonly discovery: DiscoveryClient;
  private readonly tokens: () => readonly string[];
  private readonly limits: IdentityLimits;
  private readonly log: Logger | undefined;
  private readonly now: () => number;
  private readonly negative = new Map<string, { reason: string; until: number }>();
  private readonly known = new Map<string, number>();
  private readonly inFlight = new Map<string, Promise<DocumentKeys>>();
  private readonly perAddress = new Map<string, number>();
  private readonly newcomers: RateLimiter;
  private running = 0;

  constructor(deps: {
    spec: AgentSpec;
    discovery: DiscoveryClient;
    /** The introduction tokens currently accepted (none: level 0 is never given). */
    introductionTokens?: () => readonly string[];
    limits?: Partial<IdentityLimits>;
    log?: Logger;
    now?: () => number;
  }) {
    this.spec = deps.spec;
    this.discovery = deps.discovery;
    this.tokens = deps.introductionTokens ?? (() => []);
    this.limits = { ...IDENTITY_DEFAULTS, ...deps.limits };
    this.log = deps.log;
    this.now = deps.now ?? Date.now;
    this.newcomers = new RateLimiter(this.limits.perAddressPerMinute, { now: this.now });
  }

  async verify(message: Message, requireSignature: boolean, context: { address: string } = { address: "unknown" }): Promise<Verified> {
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
          (best.authLevel >= AuthLevel.verified
            ? "No key source of this runtime establishes a higher level."
            : best.authLevel === AuthLevel.signed
              ? "Publish your identity document at your https agent id, or ask this agent's humans to add your key to its peers."
              : "Sign with an Ed25519 key this agent can find (its peers, your identity document, or a did:key identifier)."),
      );
    }
    return best;
  }

  private async verifyOne(message: Message, s: Signature, sender: string, keyId: string, address: string): Promise<Verified> {
    if (s.alg === "hmac-sha256") {
      const tokens = this.tokens();
      if (!tokens.length) throw invalidSignature("introduction tokens (hmac-sha256) are not accepted by this agent");
      checkProfile(s, "hmac-sha256", message.headers);
      if (!verifyIntroduction(message, s, tokens)) throw invalidSignature(`the introduction token signature ${s.key_id} does not verify`);
      return { signer: sender, keyId, authLevel: AuthLevel.introduction, source: "introduction" };
    }
    checkProfile(s, "ed25519", message.headers);
    const found = await this.lookup(sender, keyId, address);
    if (!verifySignature(message, s, found.key)) throw invalidSignature(`signature verification failed for key_id ${s.key_id}`);
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
    const docKeys = await this.document(sender, url, level, address);
    const entry = docKeys.doc.keys.find((k) => k.key_id === keyId || k.key_id === `${sender}#${keyId}`);
    if (!entry) throw unknownSender(`the identity document of ${sender} (${docKeys.url}) lists no key ${keyId}`);
    if (entry.type.toLowerCase() !== "ed25519") throw invalidSignature(`key ${sender}#${keyId} is of type ${entry.type}; only ed25519 is accepted`);
    if (entry.status === "revoked") throw invalidSignature(`key ${sender}#${keyId} has been revoked (identity document ${docKeys.url})`);
    let key: KeyObject;
    try {
      key = publicKeyFromRaw(entry.public_key);
    } catch (err) {
      throw unknownSender(`key ${keyId} in the identity document of ${sender} is not usable: ${(err as Error).message}`);
    }
    return { key, level: docKeys.level, source: "identity-document" };
  }

  private async document(sender: string, url: string, level: number, address: string): Promise<DocumentKeys> {
    let docUrl: string;
    try {
      docUrl = `${DiscoveryClient.wellKnownBase(url)}/identity`;
    } catch (err) {
      throw unknownSender(`the identity of ${sender} cannot be looked up: ${(err as Error).message}`);
    }
    const key = `${sender}\n${docUrl}`;
    const neg = this.negative.get(key);
    if (neg && neg.until > this.now()) throw unknownSender(neg.reason);
    if (neg) this.negative.delete(key);
    const pending = this.inFlight.get(key);
    if (pending) return pending;

    const isNew = !this.known.has(key);
    if (isNew) {
      const budget = this.newcomers.take(address);
      if (!budget.ok) throw rateLimited(budget.retryAfterSeconds, `too many identity lookups of new senders from ${address}`);
    }
    if ((this.perAddress.get(address) ?? 0) >= this.limits.perAddressConcurrent) {
      throw rateLimited(1, `too many identity lookups in progress for ${address}`);
    }
    if (this.running >= this.limits.concurrent) throw unavailable("too many identity lookups in progress; try again shortly", 1);

    this.running++;
    this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + 1);
    const p = this.fetchDocument(sender, url, docUrl, level, key).finally(() => {
      this.running--;
      const n = (this.perAddress.get(address) ?? 1) - 1;
      if (n > 0) this.perAddress.set(address, n);
      else this.perAddress.delete(address);
      this.inFlight.delete(key);
    });
    this.inFlight.set(key, p);
    return p;
  }

  private async fetchDocument(sender: string, url: string, docUrl: string, level: number, key: string): Promise<DocumentKeys> {
    let doc: IdentityDocument;
    try {
      doc = await this.discovery.identity(url);
    } catch (err) {
      if (!(err instanceof DiscoveryError)) throw err;
      // The reason in detail goes to the log only: the answer must not turn the agent into a
      // probe of networks only it can reach.
      this.log?.warn({ sender, url: docUrl, err: err.message }, "identity lookup failed");
      throw this.fail(key, `the identity document of ${sender} could not be obtained from ${docUrl}; not looked up again for ${Math.round(this.limits.negativeTtlMs / 1000)} s`);
    }
    if (doc.agent_id !== sender) {
      throw this.fail(key, `the identity document at ${docUrl} is for ${doc.agent_id}, not for ${sender}`);
    }
    this.known.delete(key);
    this.known.set(key, this.now());
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
    return { doc, level, url: docUrl };
  }

  private fail(key: string, reason: string): ProtocolError {
    this.negative.delete(key);
    while (this.negative.size >= this.limits.maxNegative) this.negative.delete(this.negative.keys().next().value!);
    this.negative.set(key, { reason, until: this.now() + this.limits.negativeTtlMs });
    this.known.delete(key);
    return unknownSender(reason);
  }
}

/**
 * The key of a did:key sender: always the identifier's own key (a did:key is its key, so no
 * other key may sign for it). Anyone can make a did:key, so on its own it proves only that the
 * message is signed (level 1, source did:key); named in spec.peers by the humans it has the
 * peers' level (2, source peers), unless they marked its key revoked there.
 */
function didKeyLookup(sender: string, peer: AgentSpec["peers"][number] | undefined): FoundKey {
  let raw: string;
  try {
    raw = didKeyPublicKey(sender);
  } catch (err) {
    if (err instanceof DidKeyError) throw unknownSender(`${sender} cannot be resolved: ${err.message}`);
    throw err;
  }
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
export function introductionTokenFile(path: string, log?: Logger, now: () => number = Date.now): () => readonly string[] {
  let tokens: readonly string[] = [];
  let mtime = -1;
  let checked = -Infinity;
  const load = () => {
    checked = now();
    let stat;
    try {
      stat = statSync(path);
    } catch (err) {
      if (mtime !== -2) log?.error({ path, err: (err as Error).message }, "cannot read the introduction tokens; none is accepted");
      tokens = [];
      mtime = -2;
      return;
    }
    if (stat.mtimeMs === mtime) return;
    mtime = stat.mtimeMs;
    const lines = readFileSync(path, "utf8").split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
    const short = lines.filter((l) => l.length < 16).length;
    if (short) log?.error({ path, refused: short }, "introduction tokens shorter than 16 characters are refused");
    tokens = lines.filter((l) => l.length >= 16);
  };
  load();
  return () => {
    if (now() - checked > 5_000) load();
    return tokens;
  };
}

function isHttpsUrl(id: string): boolean {
  try {
    return new URL(id).protocol === "https:";
  } catch {
    return false;
  }
}
