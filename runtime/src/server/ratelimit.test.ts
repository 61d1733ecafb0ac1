import { describe, expect, it } from "vitest";
import { clientNetwork, RateLimiter, TrustedProxies } from "./ratelimit.ts";

const size = (rl: RateLimiter) => (rl as unknown as { buckets: Map<string, unknown> }).buckets.size;

describe("RateLimiter", () => {
  it("allows perMinute requests, then says when to retry, and refills evenly", () => {
    let now = 0;
    const rl = new RateLimiter(60, { now: () => now });
    for (let i = 0; i < 60; i++) expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(rl.take("b").ok).toBe(true);
    now += 1000;
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(false);
  });

  it("rounds Retry-After up to whole seconds for slow limits", () => {
    let now = 0;
    const rl = new RateLimiter(2, { now: () => now });
    rl.take("a");
    rl.take("a");
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 30 });
    now += 29_000;
    expect(rl.take("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
  });

  it("never forgets an exhausted key to make room: rotating other keys does not reset a limit", () => {
    let now = 0;
    const rl = new RateLimiter(1, { now: () => now, maxKeys: 3 });
    expect(rl.take("busy").ok).toBe(true);
    for (let i = 0; i < 10; i++) {
      now += 1;
      rl.take(`k${i}`);
    }
    expect(rl.take("busy").ok).toBe(false);
    expect(size(rl)).toBeLessThanOrEqual(3);
  });

  it("stays bounded: at the bound a new key waits until the longest-idle bucket has refilled", () => {
    let now = 0;
    const rl = new RateLimiter(2, { now: () => now, maxKeys: 2 });
    expect(rl.take("a").ok).toBe(true);
    now += 10_000;
    expect(rl.take("b").ok).toBe(true);
    // "a" needs 30 s to refill its one token, 20 s of which are still to come.
    expect(rl.take("c")).toEqual({ ok: false, retryAfterSeconds: 20 });
    expect(size(rl)).toBe(2);
    now += 20_000;
    expect(rl.take("c").ok).toBe(true);
    expect(size(rl)).toBe(2);
    // "a" was forgotten only once full: it starts again with a whole allowance.
    now += 30_000;
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(true);
    expect(rl.take("a").ok).toBe(false);
  });

  it("forgets idle keys even behind a busy one that came first", () => {
    let now = 0;
    const rl = new RateLimiter(1, { now: () => now, maxKeys: 2 });
    rl.take("busy");
    now += 1;
    rl.take("idle");
    now = 60_001;
    expect(rl.take("busy").ok).toBe(true);
    now += 1;
    // "idle" has refilled and makes room; "busy" has not, and stays limited.
    expect(rl.take("new").ok).toBe(true);
    expect(rl.take("busy").ok).toBe(false);
  });
});

describe("TrustedProxies.clientAddress", () => {
  const req = (peer: string, xff?: string | string[]) => ({
    socket: { remoteAddress: peer },
    headers: xff === undefined ? {} : { "x-forwarded-for": xff },
  });
  const proxies = new TrustedProxies(["10.0.0.0/8", "::ffff:192.168.0.0/112", "fd00::/8"]);

  it("walks X-Forwarded-For from the right past trusted proxies only, to the first untrusted address", () => {
    expect(proxies.clientAddress(req("10.0.0.1", "203.0.113.1"))).toBe("203.0.113.1");
    expect(proxies.clientAddress(req("::ffff:10.0.0.1", "1.1.1.1, 203.0.113.9, 10.2.2.2, 192.168.5.5"))).toBe(
      "203.0.113.9",
    );
    expect(proxies.clientAddress(req("10.0.0.1", ["1.1.1.1, 203.0.113.9", "10.2.2.2"]))).toBe("203.0.113.9");
    // Every hop a trusted proxy: the farthest of them.
    expect(proxies.clientAddress(req("10.0.0.1", "10.3.3.3, 10.2.2.2"))).toBe("10.3.3.3");
    expect(proxies.clientAddress(req("fd00::1", "2001:DB8:0:0::1"))).toBe("2001:db8::1");
    expect(proxies.clientAddress(req("10.0.0.1", "::ffff:203.0.113.1"))).toBe("203.0.113.1");
  });

  it("believes no X-Forwarded-For from a peer that is not a trusted proxy, nor with no proxies", () => {
    expect(proxies.clientAddress(req("203.0.113.7", "198.51.100.1"))).toBe("203.0.113.7");
    expect(new TrustedProxies().clientAddress(req("::ffff:10.0.0.1", "198.51.100.1"))).toBe("10.0.0.1");
    // Asked again and again (the spelling is remembered per peer), the answer stays the peer's own.
    const none = new TrustedProxies();
    for (let i = 0; i < 3; i++) {
      expect(none.clientAddress(req("::ffff:10.0.0.1", "198.51.100.1"))).toBe("10.0.0.1");
      expect(none.clientAddress(req("2001:DB8:0:0::1"))).toBe("2001:db8::1");
      expect(none.clientAddress(req("not-an-ip"))).toBe("unknown");
    }
    for (let i = 0; i < 5000; i++) none.clientAddress(req(`10.1.${i >> 8}.${i & 255}`));
    expect(none.clientAddress(req("10.1.19.135"))).toBe("10.1.19.135");
  });

  it("uses the peer's own address when the entry reached is no address, and says unknown without a peer", () => {
    for (const junk of ["not-an-ip", "203.0.113.1:5555", "203.0.113.1, <script>", "999.1.1.1"])
      expect(proxies.clientAddress(req("10.0.0.1", junk)), junk).toBe("10.0.0.1");
    for (const empty of ["", " , ,"]) expect(proxies.clientAddress(req("10.0.0.1", empty))).toBe("10.0.0.1");
    expect(proxies.clientAddress({ socket: {}, headers: {} })).toBe("unknown");
  });

  it("refuses what is not an address or a block", () => {
    for (const bad of ["10.0.0.0/33", "example.com", "::1/129", "10.0.0.0/x"])
      expect(() => new TrustedProxies([bad]), bad).toThrow(/not an IP address or a CIDR block/);
  });
});

describe("clientNetwork", () => {
  it("counts an IPv6 /64 as one network and each IPv4 address as its own", () => {
    const net = "2001:db8:1:2::/64";
    for (const a of ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:0db8:0001:0002:0:0:0:9"])
      expect(clientNetwork(a), a).toBe(net);
    expect(clientNetwork("2001:db8:1:3::1")).toBe("2001:db8:1:3::/64");
    expect(clientNetwork("::1")).toBe("::/64");
    expect(clientNetwork("203.0.113.7")).toBe("203.0.113.7");
    expect(clientNetwork("203.0.113.8")).toBe("203.0.113.8");
    // An IPv4-mapped address is its IPv4 address.
    expect(clientNetwork("::ffff:203.0.113.7")).toBe("203.0.113.7");
    expect(clientNetwork("unknown")).toBe("unknown");
  });
});
