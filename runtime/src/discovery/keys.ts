// IFP-5 key lookup (section 4.3) shared by the agent's inbox and the relay: a did:key resolved
// locally, an identity document fetched over verified TLS through the runtime's HTTP client (and
// so through its outbound address checks), with the bounds on what a sender can make the runtime
// fetch. Which level a key establishes is the caller's to decide.
import type { KeyObject } from "node:crypto";
import type { Logger } from "pino";
import { DidKeyError, didKeyPublicKey } from "../protocol/did-key.ts";
import type { IdentityDocument } from "../protocol/documents.ts";
import { invalidSignature, type ProtocolError, rateLimited, unavailable, unknownSender } from "../protocol/errors.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { RateLimiter } from "../server/ratelimit.ts";
import type { Limiter } from "../server/shared-ratelimit.ts";
import { DiscoveryClient, DiscoveryError } from "./client.ts";

/** Bounds on what a sender can make the runtime do to look its key up (docs/identity.md). */
export interface LookupLimits {
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
  /** Lookups of senders never seen before in this process per minute, whatever their address (none: unbounded). */
  totalPerMinute?: number;
}

export const LOOKUP_DEFAULTS: LookupLimits = {
  negativeTtlMs: 60_000,
  maxNegative: 10_000,
  perAddressPerMinute: 30,
  perAddressConcurrent: 2,
  concurrent: 16,
};

/**
 * The buckets the lookups of new senders are taken from: per address, and in all. Given when
 * more than one event loop serves the port (SharedRateLimiters, docs/scale.md#more-than-one-core),
 * so that the budget is the pod's, whichever loop looks a sender up; else this process's own.
 */
export interface LookupBudgets {
  perAddress: Limiter;
  total?: Limiter;
}

/** Senders whose lookup succeeded, remembered so they never spend the newcomers' budget. */
const MAX_KNOWN = 10_000;

export interface FoundDocument {
  doc: IdentityDocument;
  /** Where the document was fetched from. */
  url: string;
}

export function isHttpsUrl(id: string): boolean {
  try {
    return new URL(id).protocol === "https:";
  } catch {
    return false;
  }
}

/** The raw public key (base64url) a did:key is; 401 unknown_sender when it cannot be resolved. */
export function didKeyRaw(sender: string): string {
  try {
    return didKeyPublicKey(sender);
  } catch (err) {
    if (err instanceof DidKeyError) throw unknownSender(`${sender} cannot be resolved: ${err.message}`);
    throw err;
  }
}

/** The budgets of `limits`, each a bucket `make` gives (this process's, or one every event loop shares). */
export function lookupBudgets(limits: Partial<LookupLimits>, make: (perMinute: number) => Limiter): LookupBudgets {
  const { perAddressPerMinute, totalPerMinute } = { ...LOOKUP_DEFAULTS, ...limits };
  return { perAddress: make(perAddressPerMinute), ...(totalPerMinute ? { total: make(totalPerMinute) } : {}) };
}

/**
 * Identity documents of senders, looked up under bounds: each failure is remembered for
 * negativeTtlMs and answered from memory; lookups of senders never seen before are limited per
 * address (and in total, when asked), in flight per address and per process; many requests for
 * the same sender share one fetch. Documents themselves are cached by the discovery client
 * (ETag, max-age). A failed fetch is answered without describing what it met: the runtime is not
 * a probe of the networks only it can reach (the details go to the log).
 */
export class KeyLookup {
  private readonly discovery: DiscoveryClient;
  private readonly limits: LookupLimits;
  private readonly log: Logger | undefined;
  private readonly now: () => number;
  private readonly negative = new Map<string, { reason: string; until: number }>();
  private readonly known = new Map<string, number>();
  private readonly inFlight = new Map<string, Promise<FoundDocument>>();
  private readonly perAddress = new Map<string, number>();
  private readonly newcomers: Limiter;
  private readonly allNewcomers: Limiter | undefined;
  private running = 0;

  constructor(deps: {
    discovery: DiscoveryClient;
    limits?: Partial<LookupLimits>;
    /** The buckets of lookupBudgets(limits) shared by every event loop; without them, this process's own. */
    budgets?: LookupBudgets;
    log?: Logger;
    now?: () => number;
  }) {
    this.discovery = deps.discovery;
    this.limits = { ...LOOKUP_DEFAULTS, ...deps.limits };
    this.log = deps.log;
    this.now = deps.now ?? Date.now;
    const budgets =
      deps.budgets ?? lookupBudgets(this.limits, (perMinute) => new RateLimiter(perMinute, { now: this.now }));
    this.newcomers = budgets.perAddress;
    this.allNewcomers = budgets.total;
  }

  /**
   * The Ed25519 key `keyId` of `sender` from its identity document at `url` (the `keys[]` entry
   * whose key_id is the key name or `<agent_id>#<key>`); `active` and `retired` keys are
   * accepted, `revoked` ones refused. Throws 401 with the reason, 429/503 when throttled.
   */
  async documentKey(sender: string, url: string, keyId: string, address: string): Promise<KeyObject> {
    const found = await this.document(sender, url, address);
    const entry = found.doc.keys.find((k) => k.key_id === keyId || k.key_id === `${sender}#${keyId}`);
    if (!entry) throw unknownSender(`the identity document of ${sender} (${found.url}) lists no key ${keyId}`);
    if (entry.type.toLowerCase() !== "ed25519")
      throw invalidSignature(`key ${sender}#${keyId} is of type ${entry.type}; only ed25519 is accepted`);
    if (entry.status === "revoked")
      throw invalidSignature(`key ${sender}#${keyId} has been revoked (identity document ${found.url})`);
    try {
      return publicKeyFromRaw(entry.public_key);
    } catch (err) {
      throw unknownSender(
        `key ${keyId} in the identity document of ${sender} is not usable: ${(err as Error).message}`,
      );
    }
  }

  /** The identity document of `sender`, fetched from `url` (its well-known identity path), under the bounds above. */
  async document(sender: string, url: string, address: string): Promise<FoundDocument> {
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
      if (!budget.ok)
        throw rateLimited(budget.retryAfterSeconds, `too many identity lookups of new senders from ${address}`);
      const total = this.allNewcomers?.take("all");
      if (total && !total.ok)
        throw rateLimited(total.retryAfterSeconds, "too many identity lookups of new senders; try again later");
    }
    if ((this.perAddress.get(address) ?? 0) >= this.limits.perAddressConcurrent) {
      throw rateLimited(1, `too many identity lookups in progress for ${address}`);
    }
    if (this.running >= this.limits.concurrent)
      throw unavailable("too many identity lookups in progress; try again shortly", 1);

    this.running++;
    this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + 1);
    const p = this.fetchDocument(sender, url, docUrl, key).finally(() => {
      this.running--;
      const n = (this.perAddress.get(address) ?? 1) - 1;
      if (n > 0) this.perAddress.set(address, n);
      else this.perAddress.delete(address);
      this.inFlight.delete(key);
    });
    this.inFlight.set(key, p);
    return p;
  }

  private async fetchDocument(sender: string, url: string, docUrl: string, key: string): Promise<FoundDocument> {
    let doc: IdentityDocument;
    try {
      doc = await this.discovery.identity(url);
    } catch (err) {
      if (!(err instanceof DiscoveryError)) throw err;
      // The reason in detail goes to the log only: the answer must not turn the runtime into a
      // probe of networks only it can reach.
      this.log?.warn({ sender, url: docUrl, err: err.message }, "identity lookup failed");
      throw this.fail(
        key,
        `the identity document of ${sender} could not be obtained from ${docUrl}; not looked up again for ${Math.round(this.limits.negativeTtlMs / 1000)} s`,
      );
    }
    if (doc.agent_id !== sender) {
      throw this.fail(key, `the identity document at ${docUrl} is for ${doc.agent_id}, not for ${sender}`);
    }
    this.known.delete(key);
    this.known.set(key, this.now());
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
    return { doc, url: docUrl };
  }

  private fail(key: string, reason: string): ProtocolError {
    this.negative.delete(key);
    while (this.negative.size >= this.limits.maxNegative) this.negative.delete(this.negative.keys().next().value!);
    this.negative.set(key, { reason, until: this.now() + this.limits.negativeTtlMs });
    this.known.delete(key);
    return unknownSender(reason);
  }
}
