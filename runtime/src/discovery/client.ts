// DiscoveryClient: endpoint discovery (spec 4.3), a peer's identity and capability documents
// fetched, validated and cached by their ETag and max-age, for the runtime and `ifp discover`.
import type { z } from "zod";
import { connectFailure } from "../net/connect-error.ts";
import { CapabilityDocument, IdentityDocument } from "../protocol/documents.ts";
import { describeIssues } from "../contract/issues.ts";
import type { HttpClient } from "../net/http-client.ts";
import { targetRefusedMessage } from "../net/targets.ts";

export const WELL_KNOWN_PATHS = ["/.well-known/agent", "/.well-known/iface"] as const;

interface CacheEntry<T> {
  doc: T;
  etag: string | undefined;
  freshUntil: number;
}

export class DiscoveryError extends Error {}

export interface DiscoveryLimits {
  /** Largest document accepted; a longer answer is cut off and refused. */
  maxDocumentBytes?: number;
  /** Time allowed for one document fetch, connection included. */
  timeoutMs?: number;
  /** Documents kept at most; the least recently stored is forgotten first. */
  maxEntries?: number;
  /** Longest a document is used without asking again, whatever its max-age says. */
  maxFreshMs?: number;
  /** How long a stale document is kept to revalidate with its ETag; then it is forgotten. */
  keepStaleMs?: number;
}

export const DISCOVERY_DEFAULTS = {
  maxDocumentBytes: 64 * 1024,
  timeoutMs: 5_000,
  maxEntries: 10_000,
  maxFreshMs: 24 * 3600_000,
  keepStaleMs: 3600_000,
} as const;

/**
 * Endpoint discovery (spec 4.3): fetches a peer's identity and capability documents, validates
 * them, and caches them honouring ETag and Cache-Control max-age (60 s without one, at most
 * maxFreshMs), revalidating with If-None-Match once stale. A stale entry is kept keepStaleMs
 * for that revalidation, then expires.
 */
export class DiscoveryClient {
  private readonly http: HttpClient;
  private readonly cache = new Map<string, CacheEntry<unknown>>();
  private readonly now: () => number;
  private readonly limits: Required<DiscoveryLimits>;

  constructor(http: HttpClient, now: () => number = Date.now, limits: DiscoveryLimits = {}) {
    this.http = http;
    this.now = now;
    this.limits = { ...DISCOVERY_DEFAULTS, ...limits };
  }

  /** Where a peer's well-known documents live, from its base URL or an agent id that is a URL. */
  static wellKnownBase(urlOrAgentId: string): string {
    let u: URL;
    try {
      u = new URL(urlOrAgentId);
    } catch {
      throw new DiscoveryError(`${urlOrAgentId} is not a URL; give the peer's https base URL`);
    }
    if (u.protocol !== "https:") throw new DiscoveryError(`${urlOrAgentId}: only https is allowed (spec 5.2)`);
    const path = u.pathname.replace(/\/+$/, "");
    if (WELL_KNOWN_PATHS.some((p) => path.endsWith(p))) return `${u.origin}${path}`;
    return `${u.origin}${path}${WELL_KNOWN_PATHS[0]}`;
  }

  identity(base: string): Promise<z.infer<typeof IdentityDocument>> {
    return this.get(`${DiscoveryClient.wellKnownBase(base)}/identity`, IdentityDocument);
  }

  capabilities(base: string): Promise<z.infer<typeof CapabilityDocument>> {
    return this.get(`${DiscoveryClient.wellKnownBase(base)}/capabilities`, CapabilityDocument);
  }

  /** Documents held, expired ones not yet swept included. */
  get size(): number {
    return this.cache.size;
  }

  /** Forget a cached document, e.g. when a conversation suggests the capabilities changed. */
  invalidate(base: string): void {
    const wk = DiscoveryClient.wellKnownBase(base);
    this.cache.delete(`${wk}/identity`);
    this.cache.delete(`${wk}/capabilities`);
  }

  private async get<S extends z.ZodType>(url: string, schema: S): Promise<z.output<S>> {
    let cached = this.cache.get(url) as CacheEntry<z.output<S>> | undefined;
    if (cached && cached.freshUntil + this.limits.keepStaleMs <= this.now()) {
      this.cache.delete(url);
      cached = undefined;
    }
    if (cached && cached.freshUntil > this.now()) return cached.doc;
    let res: Awaited<ReturnType<HttpClient["request"]>>;
    try {
      res = await this.http.request(url, {
        headers: { accept: "application/json", ...(cached?.etag ? { "if-none-match": cached.etag } : {}) },
        timeoutMs: this.limits.timeoutMs,
        maxBytes: this.limits.maxDocumentBytes,
      });
    } catch (err) {
      const refused = targetRefusedMessage(err);
      throw new DiscoveryError(
        refused
          ? `${url} refused as a target: ${refused}`
          : `cannot reach ${url}: ${connectFailure(err, url) ?? (err as Error).message}`,
        { cause: err },
      );
    }
    if (res.status === 304 && cached) {
      cached.freshUntil = this.now() + Math.min(this.limits.maxFreshMs, maxAgeMs(res.headers.get("cache-control")));
      return cached.doc;
    }
    if (res.status !== 200) throw new DiscoveryError(`${url} answered ${res.status}`);
    let json: unknown;
    try {
      json = JSON.parse(res.text);
    } catch {
      throw new DiscoveryError(`${url} did not return JSON`);
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success)
      throw new DiscoveryError(`${url} returned an invalid document: ${describeIssues(parsed.error)}`);
    const cacheControl = res.headers.get("cache-control");
    // no-store: nothing is kept, not even an ETag to revalidate with (RFC 9111 section 5.2.2.5).
    if (/(^|[\s,])no-store($|[\s,])/i.test(cacheControl ?? "")) this.cache.delete(url);
    else
      this.remember(url, {
        doc: parsed.data,
        etag: res.headers.get("etag") ?? undefined,
        freshUntil: this.now() + Math.min(this.limits.maxFreshMs, maxAgeMs(cacheControl)),
      });
    return parsed.data;
  }

  private remember(url: string, entry: CacheEntry<unknown>): void {
    this.cache.delete(url);
    // Expired entries at the old end go first (a bounded sweep), then the least recently stored.
    for (let i = 0; i < 100; i++) {
      const [key, oldest] = this.cache.entries().next().value ?? [];
      if (!key || !oldest || oldest.freshUntil + this.limits.keepStaleMs > this.now()) break;
      this.cache.delete(key);
    }
    while (this.cache.size >= this.limits.maxEntries) {
      const [oldest] = this.cache.keys();
      if (oldest === undefined) break;
      this.cache.delete(oldest);
    }
    this.cache.set(url, entry);
  }
}

function maxAgeMs(cacheControl: string | null): number {
  const m = /max-age=(\d+)/.exec(cacheControl ?? "");
  if (/no-store|no-cache/.test(cacheControl ?? "")) return 0;
  return m ? Number(m[1]) * 1000 : 60_000;
}
