import { describe, expect, it } from "vitest";
import { TargetPolicy, TargetRefused } from "./targets.ts";

/**
 * Every IPv6 form that carries an IPv4 address, written for loopback (127.0.0.1), a private
 * address (10.1.2.3) and the cloud metadata service (169.254.169.254).
 */
const EMBEDDED: [form: string, write: (hex: string, dotted: string) => string][] = [
  ["IPv4-mapped", (_h, d) => `::ffff:${d}`],
  ["IPv4-translated", (_h, d) => `::ffff:0:${d}`],
  ["IPv4-compatible", (h) => `::${h}`],
  ["NAT64", (h) => `64:ff9b::${h}`],
  ["NAT64, dotted", (_h, d) => `64:ff9b::${d}`],
  ["local-use NAT64", (h) => `64:ff9b:1::${h}`],
  ["6to4", (h) => `2002:${h}::1`],
  ["Teredo server", (h) => `2001:0:${h}:0:0:f7f7:f7f7`],
  [
    "Teredo client",
    (h) =>
      `2001:0:4136:e378:8000:63bf:${h
        .split(":")
        .map((g) => (~parseInt(g, 16) & 0xffff).toString(16))
        .join(":")}`,
  ],
];
const SPECIAL: [name: string, hex: string, dotted: string][] = [
  ["loopback", "7f00:1", "127.0.0.1"],
  ["private", "a01:203", "10.1.2.3"],
  ["metadata", "a9fe:a9fe", "169.254.169.254"],
];
const cases = EMBEDDED.flatMap(([form, write]) =>
  SPECIAL.map(([name, hex, dotted]) => [form, name, write(hex, dotted), dotted] as const),
);

describe("TargetPolicy: IPv6 forms of special IPv4 addresses", () => {
  it.each(cases)("refuses the %s form of %s (%s)", (_form, _name, address) => {
    expect(new TargetPolicy().refusal(address)).toMatch(
      /special address, not allowed by spec\.network\.allowPrivateTargets/,
    );
    expect(() => new TargetPolicy().checkUrl(`https://[${address}]/`)).toThrow(/special address/);
  });

  it.each(cases)(
    "refuses the %s form of %s (%s) even when the IPv6 block itself is allowed",
    (_form, _name, address) => {
      const wide = new TargetPolicy(["::/0"]);
      expect(wide.refusal(address)).toMatch(/form of .*special address/);
    },
  );

  it.each(cases)(
    "reaches the %s form of %s (%s) when the IPv4 address and the IPv6 block are allowed",
    (_form, _name, address, dotted) => {
      expect(new TargetPolicy([`${dotted}/32`, "::/0"]).refusal(address)).toBeUndefined();
    },
  );

  it("lets IPv4-mapped, translated and well-known NAT64 forms of an allowed IPv4 address through on the IPv4 block alone", () => {
    const policy = new TargetPolicy(["127.0.0.0/8", "10.0.0.0/8"]);
    for (const a of ["::ffff:127.0.0.1", "::ffff:0:7f00:1", "64:ff9b::a01:203", "::ffff:10.9.9.9"])
      expect(policy.refusal(a), a).toBeUndefined();
    // Local-use NAT64, 6to4, Teredo and IPv4-compatible addresses are special themselves.
    // Written in hexadecimal or dotted: `::127.0.0.1` is the IPv4-compatible ::7f00:1, not IPv4-mapped.
    for (const a of ["64:ff9b:1::7f00:1", "2002:7f00:1::1", "::7f00:1", "::127.0.0.1", "::10.9.9.9"])
      expect(policy.refusal(a), a).toMatch(/special address/);
  });

  it.each(cases)(
    "the connection's lookup drops the %s form of %s (%s), also where the IPv6 block is allowed",
    async (_form, _name, address) => {
      // A name that resolves to the form: the lookup is given the address itself, which the
      // resolver hands back as it is.
      for (const policy of [new TargetPolicy(), new TargetPolicy(["::/0"])]) {
        const err = await new Promise<unknown>((resolve) =>
          policy.lookup(address, { all: true }, (e, addrs) => resolve(e ?? addrs)),
        );
        expect(err, address).toBeInstanceOf(TargetRefused);
        expect((err as Error).message, address).toMatch(/special address/);
      }
    },
  );

  it("lets the forms of public IPv4 addresses through where the form itself is public", () => {
    const policy = new TargetPolicy();
    for (const a of ["::ffff:8.8.8.8", "::ffff:0:808:808", "64:ff9b::808:808", "2606:4700::1111", "8.8.8.8"])
      expect(policy.refusal(a), a).toBeUndefined();
    for (const a of ["2002:808:808::1", "64:ff9b:1::808:808", "2001:0:808:808::1"])
      expect(policy.refusal(a), a).toMatch(/special address/);
  });

  it("refuses the special ranges the address library names", () => {
    const policy = new TargetPolicy();
    const special = [
      "0.0.0.0",
      "127.0.0.1",
      "10.0.0.1",
      "100.64.0.1",
      "169.254.169.254",
      "172.16.0.1",
      "192.0.0.8",
      "192.0.2.1",
      "192.168.1.1",
      "198.18.0.1",
      "224.0.0.1",
      "255.255.255.255",
    ];
    const special6 = [
      "::",
      "::1",
      "fe80::1",
      "fe80::1%eth0",
      "fc00::1",
      "fd00::1",
      "ff02::1",
      "2001:db8::1",
      "100::1",
      "fec0::1",
    ];
    for (const a of [...special, ...special6]) expect(policy.refusal(a), a).toMatch(/special address/);
    expect(policy.refusal("not-an-ip")).toMatch(/not an IP address/);
  });

  it("keeps the allow-list of addresses and CIDR blocks, IPv4-mapped blocks read as IPv4", () => {
    const policy = new TargetPolicy(["10.96.0.0/12", "fd00::/8", "192.168.1.7", "::ffff:172.16.0.0/108"]);
    for (const a of ["10.96.0.1", "10.111.255.255", "fd00::5", "192.168.1.7", "172.16.0.9", "::ffff:10.100.0.1"])
      expect(policy.refusal(a), a).toBeUndefined();
    for (const a of ["10.95.255.255", "10.112.0.0", "fc00::1", "192.168.1.8", "10.1.0.1"])
      expect(policy.refusal(a), a).toMatch(/special address/);
    for (const bad of ["10.0.0.0/33", "example.com", "::1/129", "10.0.0.0/8/8", "10.0.0.0/x"])
      expect(() => new TargetPolicy([bad]), bad).toThrow(/not an IP address or a CIDR block/);
  });
});
