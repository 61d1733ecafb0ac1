import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP, type LookupFunction } from "node:net";

/**
 * Addresses that are not the public Internet: loopback, "this network", private (RFC 1918, IPv6
 * unique local), shared (carrier-grade NAT), link-local (cloud metadata services live at
 * 169.254.169.254), documentation, benchmarking, IETF protocol assignments, 6to4 relays,
 * multicast and reserved. An outbound request to a peer, a peer's relay or a registered webhook
 * never goes there unless the resource allows the block (`spec.network.allowPrivateTargets`).
 */
const SPECIAL_V4 = [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const;

const SPECIAL_V6 = [
  ["::", 128],
  ["::1", 128],
  ["100::", 64],
  ["2001::", 23],
  ["2001:db8::", 32],
  ["2002::", 16],
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
] as const;

const special = new BlockList();
for (const [a, bits] of SPECIAL_V4) special.addSubnet(a, bits, "ipv4");
for (const [a, bits] of SPECIAL_V6) special.addSubnet(a, bits, "ipv6");

/** The eight 16-bit groups of an IPv6 address (no zone). */
function groups(v6: string): number[] {
  let text = v6.toLowerCase().split("%")[0]!;
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail) {
    const [a, b, c, d] = tail[1]!.split(".").map(Number) as [number, number, number, number];
    text = text.slice(0, -tail[1]!.length) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split("::") as [string, string | undefined];
  const h = head ? head.split(":") : [];
  const t = rest !== undefined && rest ? rest.split(":") : [];
  const fill = rest !== undefined ? new Array(8 - h.length - t.length).fill("0") : [];
  return [...h, ...fill, ...t].map((g) => parseInt(g, 16));
}

/** The IPv4 address an IPv6 one carries (IPv4-mapped ::ffff:0:0/96, IPv4-compatible, NAT64 64:ff9b::/96), if any. */
function embeddedV4(v6: string): string | undefined {
  const g = groups(v6);
  if (g.length !== 8 || g.some((x) => Number.isNaN(x))) return undefined;
  const zeros = (n: number) => g.slice(0, n).every((x) => x === 0);
  const mapped = zeros(5) && g[5] === 0xffff;
  const nat64 = g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0);
  const compatible = zeros(6) && (g[6]! !== 0 || g[7]! > 1);
  if (!mapped && !nat64 && !compatible) return undefined;
  return `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
}

/** Why an outbound request was not made: the target is not one this runtime may reach. */
export class TargetRefused extends Error {
  readonly code = "ETARGETREFUSED";
}

/**
 * Which addresses outbound requests to untrusted targets may reach: every public address, and
 * of the special ones only those inside an allowed block.
 */
export class TargetPolicy {
  private readonly allowed = new BlockList();
  readonly allowedBlocks: readonly string[];

  /** `allow`: IP addresses or CIDR blocks ("127.0.0.0/8", "10.96.0.0/12", "fd00::/8"). */
  constructor(allow: readonly string[] = []) {
    this.allowedBlocks = [...allow];
    for (const block of allow) {
      const [addr, bits] = block.split("/") as [string, string | undefined];
      const family = isIP(addr);
      if (!family) throw new Error(`${block} is not an IP address or a CIDR block`);
      const type = family === 4 ? "ipv4" : "ipv6";
      if (bits === undefined) this.allowed.addAddress(addr, type);
      else this.allowed.addSubnet(addr, Number(bits), type);
    }
  }

  /** Undefined when the address may be reached, else why not. */
  refusal(address: string): string | undefined {
    const family = isIP(address);
    if (!family) return `${address} is not an IP address`;
    const v4 = family === 6 ? embeddedV4(address) : address;
    const candidates: [string, "ipv4" | "ipv6"][] = family === 4 ? [[address, "ipv4"]] : [[address, "ipv6"], ...(v4 ? [[v4, "ipv4"] as [string, "ipv4"]] : [])];
    if (candidates.some(([a, t]) => this.allowed.check(a, t))) return undefined;
    if (candidates.some(([a, t]) => special.check(a, t))) {
      return `${address} is a loopback, private, link-local or otherwise special address, not allowed by spec.network.allowPrivateTargets`;
    }
    return undefined;
  }

  /** Throws TargetRefused when a URL may not be reached: not https, or an IP literal that is refused. */
  checkUrl(url: string): void {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new TargetRefused(`${url} is not a URL`);
    }
    if (u.protocol !== "https:") throw new TargetRefused(`${u.origin}: only https is allowed (spec 5.2)`);
    const host = u.hostname.replace(/^\[|\]$/g, "");
    if (isIP(host)) {
      const why = this.refusal(host);
      if (why) throw new TargetRefused(why);
    }
  }

  /** Resolve a host name and keep only the addresses that may be reached; TargetRefused when none. */
  async resolve(hostname: string): Promise<string[]> {
    const host = hostname.replace(/^\[|\]$/g, "");
    if (isIP(host)) {
      const why = this.refusal(host);
      if (why) throw new TargetRefused(why);
      return [host];
    }
    const addrs = await new Promise<LookupAddress[]>((resolve, reject) => dnsLookup(host, { all: true }, (err, a) => (err ? reject(err) : resolve(a))));
    const ok = addrs.filter((a) => !this.refusal(a.address));
    if (!ok.length) throw new TargetRefused(`${host} resolves to ${addrs.map((a) => a.address).join(", ")}: ${this.refusal(addrs[0]!.address) ?? "refused"}`);
    return ok.map((a) => a.address);
  }

  /**
   * A `lookup` for net/tls.connect: the connection is made to an address this function checked,
   * so a name that resolves differently a moment later (DNS rebinding) cannot switch it to a
   * refused one. Addresses that are refused are dropped; none left is an error.
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    const opts = (typeof options === "number" ? { family: options } : (options ?? {})) as { all?: boolean; family?: number | string };
    const family = opts.family === "IPv4" ? 4 : opts.family === "IPv6" ? 6 : Number(opts.family ?? 0);
    dnsLookup(hostname, { all: true, family: family as 0 | 4 | 6 }, (err, addrs) => {
      if (err) return callback(err, "");
      const ok = addrs.filter((a) => !this.refusal(a.address));
      if (!ok.length) {
        const e = new TargetRefused(`${hostname} resolves to ${addrs.map((a) => a.address).join(", ")}: ${this.refusal(addrs[0]?.address ?? "") ?? "refused"}`) as TargetRefused & NodeJS.ErrnoException;
        return callback(e, "");
      }
      if (opts.all) callback(null, ok);
      else callback(null, ok[0]!.address, ok[0]!.family);
    });
  };
}

/** Whether an error (or its cause, as fetch wraps it) is a refused target. */
export function isTargetRefused(err: unknown): err is TargetRefused {
  for (let e = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++) if (e instanceof TargetRefused) return true;
  return false;
}

/** The refused target's reason, from an error or its cause. */
export function targetRefusedMessage(err: unknown): string | undefined {
  for (let e = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++) if (e instanceof TargetRefused) return e.message;
  return undefined;
}
