import type { KeyObject } from "node:crypto";
import { isHttpsUrl, type KeyLookup, didKeyRaw } from "../discovery/keys.ts";
import { canonicalAgentId, canonicalHost, hostMatches } from "../net/host-name.ts";
import { isDidKey } from "../protocol/did-key.ts";
import { insufficientAuthLevel, notFound, rateLimited, unknownSender } from "../protocol/errors.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { AuthLevel, type Verifier } from "../protocol/verify.ts";
import { parseDuration } from "../resources/common.ts";
import type { RelaySpec } from "../resources/relay.ts";
import { RateLimiter } from "../server/ratelimit.ts";

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

  constructor(deps: {
    spec: Pick<RelaySpec, "publishers" | "retention">;
    verifier: Pick<Verifier, "knows" | "key">;
    lookup?: KeyLookup;
    now?: () => number;
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
   * for each of `recipients` — or none (429 with the Retry-After of the quota refused). Returns
   * how to give back what was taken: all of it when the message could not be stored, the stored
   * copies' count for those that were already there (a retry).
   */
  checkMessage(
    sender: string,
    topics: readonly string[],
    recipients: readonly string[],
    bytes: number,
  ): { undo(): void; duplicates(n: number): void } {
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
    return {
      undo: () => {
        for (const undo of taken) undo();
      },
      // A copy already stored (the sender's retry) takes no room again.
      duplicates: (n: number) => {
        if (n > 0) this.senderStored.give(sender, n);
      },
    };
  }
}
