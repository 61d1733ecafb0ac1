import type { z } from "zod";
import { CapabilityDocument, IdentityDocument } from "../protocol/documents.ts";
import { describeIssues } from "../contract/issues.ts";
import type { HttpClient } from "../net/http-client.ts";

export const WELL_KNOWN_PATHS = ["/.well-known/agent", "/.well-known/iface"] as const;

interface CacheEntry<T> {
  doc: T;
  etag: string | undefined;
  freshUntil: number;
}

export class DiscoveryError extends Error {}

/**
 * Endpoint discovery (spec 4.3): fetches a peer's identity and capability documents, validates
 * them, and caches them honouring ETag and Cache-Control max-age, revalidating with
 * If-None-Match once stale.
 */
export class DiscoveryClient {
  private readonly http: HttpClient;
  private readonly cache = new Map<string, CacheEntry<unknown>>();
  private readonly now: () => number;

  constructor(http: HttpClient, now: () => number = Date.now) {
    this.http = http;
    this.now = now;
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

  /** Forget a cached document, e.g. when a conversation suggests the capabilities changed. */
  invalidate(base: string): void {
    const wk = DiscoveryClient.wellKnownBase(base);
    this.cache.delete(`${wk}/identity`);
    this.cache.delete(`${wk}/capabilities`);
  }

  private async get<S extends z.ZodType>(url: string, schema: S): Promise<z.output<S>> {
    const cached = this.cache.get(url) as CacheEntry<z.output<S>> | undefined;
    if (cached && cached.freshUntil > this.now()) return cached.doc;
    let res;
    try {
      res = await this.http.request(url, {
        headers: { accept: "application/json", ...(cached?.etag ? { "if-none-match": cached.etag } : {}) },
      });
    } catch (err) {
      throw new DiscoveryError(`cannot reach ${url}: ${(err as Error).message}`);
    }
    if (res.status === 304 && cached) {
      cached.freshUntil = this.now() + maxAgeMs(res.headers.get("cache-control"));
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
    if (!parsed.success) throw new DiscoveryError(`${url} returned an invalid document: ${describeIssues(parsed.error)}`);
    const cacheControl = res.headers.get("cache-control");
    // no-store: nothing is kept, not even an ETag to revalidate with (RFC 9111 section 5.2.2.5).
    if (/(^|[\s,])no-store($|[\s,])/i.test(cacheControl ?? "")) this.cache.delete(url);
    else this.cache.set(url, { doc: parsed.data, etag: res.headers.get("etag") ?? undefined, freshUntil: this.now() + maxAgeMs(cacheControl) });
    return parsed.data;
  }
}

function maxAgeMs(cacheControl: string | null): number {
  const m = /max-age=(\d+)/.exec(cacheControl ?? "");
  if (/no-store|no-cache/.test(cacheControl ?? "")) return 0;
  return m ? Number(m[1]) * 1000 : 60_000;
}
