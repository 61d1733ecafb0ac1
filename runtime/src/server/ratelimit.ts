// RateLimiter: in-memory token buckets per sender or client address, bounded without forgetting a
// key still limited; and the client address of a request through trusted proxies, and its network.
import type { IncomingHttpHeaders } from "node:http";
import ipaddr from "ipaddr.js";
import { parseAddress } from "../net/targets.ts";

/**
 * Token buckets keyed by sender (or client address): `perMinute` tokens, refilled evenly.
 * In memory, per process: each replica enforces the limit on what it receives.
 *
 * The table is bounded (`maxKeys`) without ever forgetting a key that is still limited: only
 * buckets that have refilled completely — which behave exactly like new ones — are dropped.
 * The map is kept in order of last use, so those are found at its front at a constant cost
 * per new key (any bucket idle for a minute is full). When the table is full of buckets still
 * refilling, a new key is refused like an exhausted one, with the time until the longest-idle
 * bucket is full: under a flood of more than `maxKeys` keys a minute newcomers wait, rather
 * than the flood wiping out the limits of the keys already known.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly capacity: number;
  private readonly perMs: number;
  private readonly maxKeys: number;
  private readonly now: () => number;

  /**
   * `perMinute` tokens per minute; with `windowMs`, that many tokens per window instead (a
   * byte quota per hour: `new RateLimiter(bytes, { windowMs: 3_600_000 })`).
   */
  constructor(perMinute: number, opts: { maxKeys?: number; now?: () => number; windowMs?: number } = {}) {
    this.capacity = perMinute;
    this.perMs = perMinute / (opts.windowMs ?? 60_000);
    this.maxKeys = opts.maxKeys ?? 100_000;
    this.now = opts.now ?? Date.now;
  }

  /**
   * Take `cost` tokens (one by default; a cost above the capacity takes a full bucket). When
   * not enough are left, none are taken, and the answer is the whole seconds until they are.
   */
  take(key: string, cost = 1): { ok: true } | { ok: false; retryAfterSeconds: number } {
    cost = Math.min(cost, this.capacity);
    const now = this.now();
    let b = this.buckets.get(key);
    if (b) {
      b.tokens = this.level(b, now);
      b.at = now;
      // Most recently used last: the front of the map is where full buckets gather.
      this.buckets.delete(key);
      this.buckets.set(key, b);
    } else {
      this.forgetFull(now);
      if (this.buckets.size >= this.maxKeys) {
        const [oldest] = this.buckets.values();
        return { ok: false, retryAfterSeconds: this.seconds(this.capacity - this.level(oldest!, now)) };
      }
      b = { tokens: this.capacity, at: now };
      this.buckets.set(key, b);
    }
    if (b.tokens >= cost) {
      b.tokens -= cost;
      return { ok: true };
    }
    return { ok: false, retryAfterSeconds: this.seconds(cost - b.tokens) };
  }

  /** Give back `cost` tokens taken (a request refused by a later limit after this one let it through). */
  give(key: string, cost = 1): void {
    const b = this.buckets.get(key);
    if (!b) return;
    const now = this.now();
    b.tokens = Math.min(this.capacity, this.level(b, now) + Math.min(cost, this.capacity));
    b.at = now;
  }

  private level(b: { tokens: number; at: number }, now: number): number {
    return Math.min(this.capacity, b.tokens + (now - b.at) * this.perMs);
  }

  /** Whole seconds (at least one) until `tokens` more have been refilled. */
  private seconds(tokens: number): number {
    return Math.max(1, Math.ceil(tokens / this.perMs / 1000));
  }

  /** Drop the least recently used buckets for as long as they have refilled completely. */
  private forgetFull(now: number): void {
    for (const [k, b] of this.buckets) {
      if (this.level(b, now) < this.capacity) return;
      this.buckets.delete(k);
    }
  }
}

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** An IP address, IPv4-mapped IPv6 read as IPv4; undefined when the text is none. */
function parseIp(text: string | undefined): Address | undefined {
  if (!text) return undefined;
  const a = parseAddress(text);
  return a?.kind() === "ipv6" && (a as ipaddr.IPv6).isIPv4MappedAddress() ? (a as ipaddr.IPv6).toIPv4Address() : a;
}

/** One spelling per address, the key of its bucket: IPv4 dotted, IPv6 as RFC 5952 writes it. */
function spell(a: Address): string {
  return a.kind() === "ipv4" ? a.toString() : (a as ipaddr.IPv6).toRFC5952String();
}

/**
 * The client network of an address as clientAddress spells it, the key of a budget that one
 * holder of many addresses must not multiply: an IPv4 address is its own, an IPv6 address
 * counts as its /64 (what one subscriber or host is given), spelled `<prefix>::/64`. Anything
 * that is no address is its own key.
 */
export function clientNetwork(address: string): string {
  const a = parseIp(address);
  if (!a) return address;
  if (a.kind() === "ipv4") return a.toString();
  const parts = (a as ipaddr.IPv6).parts;
  return `${new ipaddr.IPv6([...parts.slice(0, 4), 0, 0, 0, 0]).toRFC5952String()}/64`;
}

/**
 * The proxies in front of a runtime (--trusted-proxies: IP addresses or CIDR blocks) and the one
 * rule that finds a request's client address, used for every per-address limit: HTTP requests
 * and the relay's WebSocket upgrade alike.
 *
 * X-Forwarded-For is read only from a peer that is a trusted proxy, and from the right: each
 * proxy appends the address it received the request from, so the entries nearest the right were
 * written by proxies of ours and the leftmost by whoever sent the request first. The walk skips
 * only addresses that are themselves trusted proxies and stops at the first one that is not: that
 * is the client. What lies to its left was written by the client and is never believed. When the
 * entry reached is no address at all (a malformed value a proxy passed on), the peer's own address
 * is used, so that made-up values cannot open fresh buckets.
 *
 * A trusted block is trusted as a whole: every host inside it can say what it likes in
 * X-Forwarded-For. Name the proxies (the ingress controller's pods or its Service's addresses),
 * not the whole pod network.
 */
export class TrustedProxies {
  private readonly blocks: [Address, number][] = [];
  /** Peer address as received → its spelling, when no proxy is trusted (at most 4,096). */
  private readonly peers = new Map<string, string>();

  constructor(list: readonly string[] = []) {
    for (const entry of list) {
      const [addr, bits, ...rest] = entry.split("/") as [string, string | undefined];
      const a = parseAddress(addr);
      const max = a?.kind() === "ipv4" ? 32 : 128;
      const n = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
      if (!a || rest.length || !(n >= 0 && n <= max)) throw new Error(`${entry} is not an IP address or a CIDR block`);
      if (a.kind() === "ipv6" && (a as ipaddr.IPv6).isIPv4MappedAddress() && n >= 96)
        this.blocks.push([(a as ipaddr.IPv6).toIPv4Address(), n - 96]);
      else this.blocks.push([a, n]);
    }
  }

  get empty(): boolean {
    return this.blocks.length === 0;
  }

  /** Whether an address (text, or parsed) is a trusted proxy's. */
  trusts(address: string | Address | undefined): boolean {
    const a = typeof address === "string" || address === undefined ? parseIp(address) : address;
    return !!a && this.blocks.some(([block, bits]) => block.kind() === a.kind() && a.match(block as never, bits));
  }

  /** The client address of a request (see the class): the key of its per-address limit, "unknown" without a peer address. */
  clientAddress(req: { headers: IncomingHttpHeaders; socket: { remoteAddress?: string } }): string {
    const remote = req.socket.remoteAddress;
    // Without proxies the answer is the peer's own spelling, remembered: every request asks for
    // it once or twice, and its peers are few next to its requests.
    if (this.blocks.length === 0 && remote !== undefined) {
      const known = this.peers.get(remote);
      if (known !== undefined) return known;
    }
    const peer = parseIp(remote);
    if (!peer) return "unknown";
    if (this.blocks.length === 0) {
      const spelled = spell(peer);
      if (this.peers.size >= 4096) this.peers.clear();
      this.peers.set(remote!, spelled);
      return spelled;
    }
    if (!this.trusts(peer)) return spell(peer);
    const header = req.headers["x-forwarded-for"];
    // The nearest 64 entries at most: a chain of proxies is never that long.
    const hops = (Array.isArray(header) ? header.join(",") : (header ?? "")).split(",").slice(-64);
    let client = peer;
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i]!.trim();
      if (!hop) continue;
      const a = parseIp(hop);
      if (!a) return spell(peer);
      client = a;
      if (!this.trusts(a)) break;
    }
    return spell(client);
  }
}
