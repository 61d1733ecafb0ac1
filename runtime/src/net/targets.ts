// TargetPolicy: which addresses outbound requests to untrusted targets may reach (every public
// address, special ones only inside allowed blocks, IPv4 carried in IPv6 judged as IPv4), and the
// refusal of a push URL it rules out.
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import ipaddr from "ipaddr.js";

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/**
 * An IP address as the connection would use it. IPv6 text goes through the URL parser first:
 * it writes every form in hexadecimal (`::127.0.0.1` is `::7f00:1`, IPv4-compatible, not the
 * IPv4-mapped address the address library would read). A zone (`fe80::1%eth0`) is dropped:
 * the address without it is what is checked. Undefined when the text is no IP address.
 */
export function parseAddress(text: string): Address | undefined {
  const bare = text.replace(/^\[|\]$/g, "").split("%")[0]!;
  const family = isIP(bare);
  if (family === 4) return ipaddr.IPv4.isValidFourPartDecimal(bare) ? ipaddr.IPv4.parse(bare) : undefined;
  if (family !== 6) return undefined;
  try {
    return ipaddr.IPv6.parse(new URL(`https://[${bare}]/`).hostname.slice(1, -1));
  } catch {
    return undefined;
  }
}

const v4 = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 255, lo >> 8, lo & 255]);

/**
 * The IPv4 addresses an IPv6 address stands for or carries, each with the name of its form:
 * IPv4-mapped ::ffff:a.b.c.d and IPv4-translated ::ffff:0:a.b.c.d (RFC 6145), IPv4-compatible
 * ::a.b.c.d, NAT64 in the well-known 64:ff9b::/96 and in the local-use 64:ff9b:1::/48 (RFC 8215;
 * the IPv4 address in the last 32 bits, the /96 layout), 6to4 2002:a.b.c.d::/48 (RFC 3056) and
 * Teredo 2001:0::/32 (RFC 4380: its server, and its client stored with every bit inverted).
 */
function embedded(a: ipaddr.IPv6): { form: string; address: ipaddr.IPv4 }[] {
  const p = a.parts;
  switch (a.range()) {
    case "ipv4Mapped":
      return [{ form: "IPv4-mapped", address: v4(p[6]!, p[7]!) }];
    case "rfc6145":
      return [{ form: "IPv4-translated", address: v4(p[6]!, p[7]!) }];
    case "rfc6052":
      return [{ form: p[2] === 0 ? "NAT64" : "local-use NAT64", address: v4(p[6]!, p[7]!) }];
    case "6to4":
      return [{ form: "6to4", address: v4(p[1]!, p[2]!) }];
    case "teredo":
      return [
        { form: "Teredo server", address: v4(p[2]!, p[3]!) },
        { form: "Teredo client", address: v4(~p[6]! & 0xffff, ~p[7]! & 0xffff) },
      ];
  }
  if (p.slice(0, 6).every((x) => x === 0) && (p[6] !== 0 || p[7]! > 1))
    return [{ form: "IPv4-compatible", address: v4(p[6]!, p[7]!) }];
  return [];
}

/**
 * Whether an IPv6 address is only another way of writing the IPv4 address it carries: a
 * connection to it reaches that IPv4 address (through the host's own stack or a translator), so
 * the IPv4 address alone decides. Local-use NAT64, 6to4, Teredo and IPv4-compatible addresses
 * are special in their own right and must also be allowed themselves.
 */
function isTranslation(a: ipaddr.IPv6): boolean {
  const range = a.range();
  return range === "ipv4Mapped" || range === "rfc6145" || (range === "rfc6052" && a.parts[2] === 0);
}

/** Why an outbound request was not made: the target is not one this runtime may reach. */
export class TargetRefused extends Error {
  readonly code = "ETARGETREFUSED";
}

/**
 * Which addresses outbound requests to untrusted targets may reach: every public address, and
 * of the special ones only those inside an allowed block.
 *
 * Special is every address that the ipaddr.js library does not name plain `unicast`: loopback,
 * "this network", private (RFC 1918, IPv6 unique local), shared (carrier-grade NAT), link-local
 * (cloud metadata services live at 169.254.169.254), documentation, benchmarking, IETF protocol
 * assignments, multicast, broadcast and reserved, and the IPv6 forms that carry an IPv4 address.
 * An IPv6 address that carries IPv4 addresses (see `embedded`) is refused when any of them is
 * special and not allowed, whatever the IPv6 address itself is allowed by: a NAT64, translated or
 * 6to4 form of 127.0.0.1 or 169.254.169.254 is refused unless that IPv4 address is allowed.
 */
export class TargetPolicy {
  private readonly allowed: [Address, number][] = [];
  readonly allowedBlocks: readonly string[];

  /** `allow`: IP addresses or CIDR blocks ("127.0.0.0/8", "10.96.0.0/12", "fd00::/8"). */
  constructor(allow: readonly string[] = []) {
    this.allowedBlocks = [...allow];
    for (const block of allow) {
      const [addr, bits, ...rest] = block.split("/") as [string, string | undefined];
      const a = parseAddress(addr);
      const max = a?.kind() === "ipv4" ? 32 : 128;
      const n = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
      if (!a || rest.length || !(n >= 0 && n <= max)) throw new Error(`${block} is not an IP address or a CIDR block`);
      // An IPv4-mapped block is the IPv4 block it maps.
      if (a.kind() === "ipv6" && (a as ipaddr.IPv6).isIPv4MappedAddress() && n >= 96)
        this.allowed.push([(a as ipaddr.IPv6).toIPv4Address(), n - 96]);
      else this.allowed.push([a, n]);
    }
  }

  private isAllowed(a: Address): boolean {
    return this.allowed.some(([block, bits]) => block.kind() === a.kind() && a.match(block as never, bits));
  }

  /** Undefined when the address may be reached, else why not. */
  refusal(address: string): string | undefined {
    const a = parseAddress(address);
    if (!a) return `${address} is not an IP address`;
    const why = "not allowed by spec.network.allowPrivateTargets";
    if (a.kind() === "ipv6") {
      const v6 = a as ipaddr.IPv6;
      for (const e of embedded(v6)) {
        const range = e.address.range();
        if (range !== "unicast" && !this.isAllowed(e.address)) {
          return `${address} is the ${e.form} form of ${e.address.toString()}, a loopback, private, link-local or otherwise special address, ${why} (${range})`;
        }
      }
      if (isTranslation(v6)) return undefined;
    }
    const range = a.range();
    if (range === "unicast" && !(a.kind() === "ipv6" && embedded(a as ipaddr.IPv6).length)) return undefined;
    if (this.isAllowed(a)) return undefined;
    return `${address} is a loopback, private, link-local or otherwise special address, ${why} (${range === "unicast" ? "IPv4-compatible" : range})`;
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
    const addrs = await new Promise<LookupAddress[]>((resolve, reject) =>
      dnsLookup(host, { all: true }, (err, a) => (err ? reject(err) : resolve(a))),
    );
    const ok = addrs.filter((a) => !this.refusal(a.address));
    if (!ok.length)
      throw new TargetRefused(
        `${host} resolves to ${addrs.map((a) => a.address).join(", ")}: ${this.refusal(addrs[0]!.address) ?? "refused"}`,
      );
    return ok.map((a) => a.address);
  }

  /**
   * A `lookup` for net/tls.connect: the connection is made to an address this function checked,
   * so a name that resolves differently a moment later (DNS rebinding) cannot switch it to a
   * refused one. Addresses that are refused are dropped; none left is an error.
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    const opts = (typeof options === "number" ? { family: options } : (options ?? {})) as {
      all?: boolean;
      family?: number | string;
    };
    const family = opts.family === "IPv4" ? 4 : opts.family === "IPv6" ? 6 : Number(opts.family ?? 0);
    dnsLookup(hostname, { all: true, family: family as 0 | 4 | 6 }, (err, addrs) => {
      if (err) return callback(err, "");
      const ok = addrs.filter((a) => !this.refusal(a.address));
      if (!ok.length) {
        const e = new TargetRefused(
          `${hostname} resolves to ${addrs.map((a) => a.address).join(", ")}: ${this.refusal(addrs[0]?.address ?? "") ?? "refused"}`,
        ) as TargetRefused & NodeJS.ErrnoException;
        return callback(e, "");
      }
      if (opts.all) callback(null, ok);
      else callback(null, ok[0]!.address, ok[0]!.family);
    });
  };
}

/**
 * Why a URL a client registers for later pushes (a relay's webhook, an A2A push notification
 * URL) may not be used, or undefined: not https, an address the policy refuses, or a host name
 * that does not resolve now to an address it allows. Each push checks again, on the address it
 * connects to (DNS rebinding).
 */
export async function pushUrlRefusal(targets: TargetPolicy, url: string): Promise<string | undefined> {
  try {
    targets.checkUrl(url);
    await targets.resolve(new URL(url).hostname);
    return undefined;
  } catch (err) {
    if (isTargetRefused(err)) return `refused: ${(err as Error).message}`;
    return `host ${new URL(url).hostname} does not resolve: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
  }
}

/** Whether an error (or its cause, as fetch wraps it) is a refused target. */
export function isTargetRefused(err: unknown): err is TargetRefused {
  for (let e = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++)
    if (e instanceof TargetRefused) return true;
  return false;
}

/** The refused target's reason, from an error or its cause. */
export function targetRefusedMessage(err: unknown): string | undefined {
  for (let e = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++)
    if (e instanceof TargetRefused) return e.message;
  return undefined;
}
