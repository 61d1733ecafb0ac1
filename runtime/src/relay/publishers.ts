// Publishers: who may publish to the agents a relay serves (spec.publishers) — the agents of
// spec.agents, and strangers whose keys it looks up — with the strangers' quotas and their share
// of the stream.
import type { KeyObject } from "node:crypto";
import { isHttpsUrl, type KeyLookup, didKeyRaw } from "../discovery/keys.ts";
import { canonicalAgentId, canonicalHost, hostMatches } from "../net/host-name.ts";
import { isDidKey } from "../protocol/did-key.ts";
import { insufficientAuthLevel, notFound, rateLimited, unavailable, unknownSender } from "../protocol/errors.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { AuthLevel, type Verifier } from "../protocol/verify.ts";
import { parseDuration } from "../resources/common.ts";
import type { RelaySpec } from "../resources/relay.ts";
import { clientNetwork, RateLimiter } from "../server/ratelimit.ts";

/** How full the relay's stream is, as JetStream counts it. */
export interface StreamFill {
  bytes: number;
  messages: number;
}

/** Seconds a stranger waits before retrying a refusal for the strangers' share of the stream. */
export const STRANGERS_SHARE_RETRY_AFTER_S = 30;
/** How long one reading of the stream's fill serves every stranger's publish. */
const FILL_READ_MS = 1_000;

type SenderSet = RelaySpec["publishers"]["deny"];

/**
 * Does `agentId` belong to the set: named exactly, or an https agent id on one of its hosts? Host
 * names are compared in their canonical form (case, trailing dot, IDNA: net/host-name.ts).
 */
export function inSenderSet(set: SenderSet, agentId: string): boolean {
  const id = canonicalAgentId(agentId);
  if (set.agentIds.some((a) => canonicalAgentId(a) === id)) return true;
  if (!set.domains.length || !isHttpsUrl(agentId)) return false;
  const host = canonicalHost(new URL(agentId).hostname);
  return set.domains.some((d) => hostMatches(host, canonicalHost(d)));
}

/**
 * Who may publish to the agents a relay serves (spec.publishers): the agents in spec.agents with
 * the keys written there, and, as the policy says, senders whose key the relay looks up as an
 * agent does (IFP-5 4.3): a did:key is its key (level 1), an https agent id's identity document
 * is fetched over verified TLS through the runtime's outbound checks (level 2). Anyone else is
 * refused before any lookup. Strangers only ever publish: reading, acknowledging and subscribing
 * stay the served agents' own. Their quotas (per sender, per recipient) are kept here, per replica.
 */
export class Publishers {
  private readonly policy: RelaySpec["publishers"];
  private readonly verifier: Pick<Verifier, "knows" | "key">;
  private readonly lookup: KeyLookup | undefined;
  private readonly perSender: RateLimiter;
  private readonly senderBytes: RateLimiter;
  private readonly senderStored: RateLimiter;
  private readonly recipientMessages: RateLimiter;
  private readonly recipientBytes: RateLimiter;
  private readonly perNetwork: RateLimiter;
  private readonly total: RateLimiter;
  private readonly share: StrangersShare | undefined;

  constructor(deps: {
    spec: Pick<RelaySpec, "publishers" | "retention">;
    verifier: Pick<Verifier, "knows" | "key">;
    lookup?: KeyLookup;
    now?: () => number;
    /** The relay stream's fill (none: the strangers' share is not kept, as in tests of the policy alone). */
    fill?: () => Promise<StreamFill>;
  }) {
    this.policy = deps.spec.publishers;
    this.verifier = deps.verifier;
    this.lookup = deps.lookup;
    const now = deps.now ?? Date.now;
    const l = this.policy.limits;
    this.perSender = new RateLimiter(l.perSenderPerMinute, { now });
    this.senderBytes = new RateLimiter(l.perSenderBytesPerHour, { now, windowMs: 3_600_000 });
    // A copy lives at most retention.maxAge: n copies per maxAge is never more than n waiting.
    this.senderStored = new RateLimiter(l.perSenderStored, {
      now,
      windowMs: parseDuration(deps.spec.retention.maxAge),
    });
    this.recipientMessages = new RateLimiter(l.perRecipientPerMinute, { now });
    this.recipientBytes = new RateLimiter(l.perRecipientBytesPerHour, { now, windowMs: 3_600_000 });
    this.perNetwork = new RateLimiter(l.perNetworkPerMinute, { now });
    this.total = new RateLimiter(l.totalPerMinute, { now });
    const r = deps.spec.retention;
    this.share = deps.fill
      ? new StrangersShare(deps.fill, shareOf(r.maxBytes, l.streamShare), shareOf(r.maxMessages, l.streamShare), now)
      : undefined;
  }

  /** An agent in spec.agents: it has a mailbox here. */
  serves(agentId: string): boolean {
    return this.verifier.knows(agentId);
  }

  /**
   * The key of a request signature. An agent in spec.agents: the key written there. Anyone else
   * only on an endpoint open to strangers (`open`: publishing) and only as the policy allows,
   * then looked up; 401 otherwise, without any lookup.
   */
  key(agentId: string, keyId: string, ctx: { address: string; open: boolean }): KeyObject | Promise<KeyObject> {
    if (this.serves(agentId)) return this.verifier.key(agentId, keyId);
    if (!ctx.open)
      throw unknownSender(
        `${agentId} is not an agent this relay serves: only they read, acknowledge and subscribe here; others may only publish to them`,
      );
    this.admit(agentId);
    if (isDidKey(agentId)) {
      // The fragment is not interpreted: a did:key is its one key.
      const key = publicKeyFromRaw(didKeyRaw(agentId));
      if (this.policy.minAuthLevel > AuthLevel.signed) {
        throw insufficientAuthLevel(
          `this relay takes messages from senders at authentication level ${this.policy.minAuthLevel} or above; yours is at level 1 (did:key). Publish your identity document at your https agent id, or ask the relay's operators to serve you (spec.agents).`,
        );
      }
      return key;
    }
    if (isHttpsUrl(agentId) && this.lookup) return this.lookup.documentKey(agentId, agentId, keyId, ctx.address);
    throw unknownSender(
      `${agentId} is not an agent this relay serves, and its key cannot be looked up: its id is neither an https URL (with an identity document) nor a did:key`,
    );
  }

  /** The policy's verdict on a sender not in spec.agents, from its id alone (401 unknown_sender). */
  private admit(agentId: string): void {
    if (inSenderSet(this.policy.deny, agentId))
      throw unknownSender(`${agentId} may not publish here (spec.publishers.deny)`);
    if (this.policy.policy === "registered")
      throw unknownSender(
        `${agentId} is not an agent this relay serves, and it takes messages only from those (spec.publishers.policy: registered)`,
      );
    if (this.policy.policy === "selector" && !inSenderSet(this.policy.allow, agentId)) {
      throw unknownSender(
        `${agentId} is not an agent this relay serves, nor among the senders spec.publishers.allow names`,
      );
    }
  }

  /** `cost` more requests of a sender not in spec.agents (429 past spec.publishers.limits.perSenderPerMinute). */
  limitRequests(agentId: string, cost: number): void {
    const taken = this.perSender.take(agentId, cost);
    if (!taken.ok)
      throw rateLimited(
        taken.retryAfterSeconds,
        `rate limit of ${this.policy.limits.perSenderPerMinute} requests per minute exceeded for ${agentId}, which this relay does not serve`,
      );
  }

  /**
   * A stranger's message about to be stored: no topic unless spec.publishers.topics (404, as for
   * any recipient the relay does not take), then every quota at once — one copy of `bytes` bytes
   * for each of `recipients`: the sender's, its client network's and all strangers' together,
   * each recipient's, and the strangers' share of the stream — or none (429 with the Retry-After
   * of the quota refused). Returns how to give back what was taken: all of it when the message
   * could not be stored, the stored copies' count for those that were already there (a retry).
   */
  async checkMessage(
    sender: string,
    topics: readonly string[],
    recipients: readonly string[],
    bytes: number,
    address = "",
  ): Promise<{ undo(): void; duplicates(n: number): void }> {
    if (topics.length && !this.policy.topics)
      throw notFound(
        `topic:${topics[0]} takes messages only from the agents this relay serves (spec.publishers.topics); nothing was stored`,
      );
    const copies = recipients.length;
    const nothing = { undo() {}, duplicates() {} };
    if (!copies) return nothing;
    const l = this.policy.limits;
    const taken: (() => void)[] = [];
    const take = (limiter: RateLimiter, key: string, cost: number, what: string) => {
      const r = limiter.take(key, cost);
      if (!r.ok) {
        for (const undo of taken) undo();
        throw rateLimited(r.retryAfterSeconds, what);
      }
      taken.push(() => limiter.give(key, cost));
    };
    const network = clientNetwork(address);
    take(
      this.perNetwork,
      network,
      1,
      `${l.perNetworkPerMinute} messages per minute from senders this relay does not serve at ${network} together exceeded (spec.publishers.limits.perNetworkPerMinute)`,
    );
    take(
      this.total,
      "",
      1,
      `${l.totalPerMinute} messages per minute from senders this relay does not serve together exceeded (spec.publishers.limits.totalPerMinute)`,
    );
    take(
      this.senderStored,
      sender,
      copies,
      `${sender} has had ${l.perSenderStored} copies stored here within the relay's retention (spec.publishers.limits.perSenderStored)`,
    );
    take(
      this.senderBytes,
      sender,
      bytes * copies,
      `byte quota of ${l.perSenderBytesPerHour} bytes per hour exceeded for ${sender} (spec.publishers.limits.perSenderBytesPerHour)`,
    );
    for (const r of recipients) {
      take(
        this.recipientMessages,
        r,
        1,
        `${r} takes at most ${l.perRecipientPerMinute} messages per minute from senders this relay does not serve (spec.publishers.limits.perRecipientPerMinute)`,
      );
      take(
        this.recipientBytes,
        r,
        bytes,
        `${r} takes at most ${l.perRecipientBytesPerHour} bytes per hour from senders this relay does not serve (spec.publishers.limits.perRecipientBytesPerHour)`,
      );
    }
    let giveRoom: (n?: number) => void = () => {};
    if (this.share) {
      try {
        giveRoom = await this.share.take(bytes * copies, copies);
      } catch (err) {
        for (const undo of taken) undo();
        throw err;
      }
      taken.push(() => giveRoom());
    }
    return {
      undo: () => {
        for (const undo of taken) undo();
      },
      // A copy already stored (the sender's retry) takes no room again.
      duplicates: (n: number) => {
        if (n > 0) {
          this.senderStored.give(sender, n);
          giveRoom(n);
        }
      },
    };
  }
}

/** `percent` of a stream limit (-1: none, so no share either; 100: the whole stream, which JetStream bounds). */
function shareOf(limit: number, percent: number): number {
  return limit < 0 || percent >= 100 ? Number.POSITIVE_INFINITY : Math.floor((limit * percent) / 100);
}

/**
 * The strangers' share of the relay stream (spec.publishers.limits.streamShare): a stranger's
 * copies are stored only while the stream, as JetStream counts it, holds less than the share of
 * its bytes and messages, so whoever sends them and however many keys they hold, the rest of the
 * stream stays for the agents the relay serves. The fill is read at most once a second for every
 * replica's strangers alike (it is the stream's, not the replica's); what this replica admitted
 * since the last reading is added to it, so a burst between two readings cannot overshoot.
 */
class StrangersShare {
  private fill: StreamFill = { bytes: 0, messages: 0 };
  private readAt = Number.NEGATIVE_INFINITY;
  private reading: Promise<void> | undefined;
  /** Admitted since the reading began that `fill` holds. */
  private since: StreamFill = { bytes: 0, messages: 0 };

  private readonly read: () => Promise<StreamFill>;
  private readonly maxBytes: number;
  private readonly maxMessages: number;
  private readonly now: () => number;

  constructor(read: () => Promise<StreamFill>, maxBytes: number, maxMessages: number, now: () => number) {
    this.read = read;
    this.maxBytes = maxBytes;
    this.maxMessages = maxMessages;
    this.now = now;
  }

  private refresh(): Promise<void> {
    if (this.now() - this.readAt < FILL_READ_MS) return Promise.resolve();
    this.reading ??= (async () => {
      const before = { ...this.since };
      try {
        this.fill = await this.read().catch(() => {
          throw unavailable("the relay's store (NATS JetStream) is not reachable");
        });
        this.readAt = this.now();
        this.since = { bytes: this.since.bytes - before.bytes, messages: this.since.messages - before.messages };
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  /** Room for `copies` copies of `bytes` bytes together, or 429; returns how to give back some or all. */
  async take(bytes: number, copies: number): Promise<(n?: number) => void> {
    await this.refresh();
    const b = this.fill.bytes + this.since.bytes + bytes;
    const m = this.fill.messages + this.since.messages + copies;
    if (b > this.maxBytes || m > this.maxMessages)
      throw rateLimited(
        STRANGERS_SHARE_RETRY_AFTER_S,
        "senders this relay does not serve may fill only part of it (spec.publishers.limits.streamShare), and that part is full; the rest is kept for the agents it serves",
      );
    this.since.bytes += bytes;
    this.since.messages += copies;
    const perCopy = bytes / copies;
    /** Give back `n` of the copies: not stored, or already there. */
    return (n = copies) => {
      this.since.bytes = Math.max(0, this.since.bytes - perCopy * n);
      this.since.messages = Math.max(0, this.since.messages - n);
    };
  }
}
