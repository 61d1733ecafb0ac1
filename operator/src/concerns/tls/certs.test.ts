// Reading certificates: what every reconcile pass works out from the install CA's and each
// leaf's PEM, by Node's own X.509 parser, checked against the certificates as @peculiar/x509
// made them and against openssl's reading where it is installed.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as x509 from "@peculiar/x509";
import { describe, expect, it } from "vitest";
import { createCA, fingerprint, issuedBy, parseCaBundle, validity } from "./certs.ts";

describe("reading certificates", async () => {
  const ca = await createCA("certs test CA", 30 * 24 * 3600_000);
  const then = Date.parse("2026-06-01T12:00:00Z");
  const dated = await createCA("a CA of a given day", 30 * 24 * 3600_000, then);
  const other = await createCA("another CA");
  const leaf = await ca.issue({
    commonName: "alice.team.svc",
    dnsNames: ["alice.team.svc"],
    validityMs: 24 * 3600_000,
  });

  it("names a certificate by the SHA-256 of its DER", () => {
    const der = Buffer.from(new x509.X509Certificate(ca.cert).rawData);
    expect(fingerprint(ca.cert)).toBe(createHash("sha256").update(der).digest("hex"));
    expect(fingerprint(leaf.cert)).not.toBe(fingerprint(ca.cert));
    const openssl = spawnSync("openssl", ["x509", "-noout", "-fingerprint", "-sha256"], {
      input: ca.cert,
      encoding: "utf8",
    });
    if (openssl.status === 0)
      expect(openssl.stdout.split("=")[1]!.trim().replaceAll(":", "").toLowerCase()).toBe(fingerprint(ca.cert));
  });

  it("reads the validity the certificate was made with", () => {
    const made = new x509.X509Certificate(ca.cert);
    expect(validity(ca.cert)).toEqual({ notBefore: made.notBefore, notAfter: made.notAfter });
    expect(validity(dated.cert).notAfter.getTime()).toBe(Math.floor((then + 30 * 24 * 3600_000) / 1000) * 1000);
    const l = validity(leaf.cert);
    expect(l.notAfter.getTime() - l.notBefore.getTime()).toBeGreaterThan(24 * 3600_000 - 1000);
  });

  it("tells whether a certificate was signed by a CA", async () => {
    expect(await issuedBy(leaf.cert, ca.cert)).toBe(true);
    expect(await issuedBy(leaf.cert, other.cert)).toBe(false);
    expect(await issuedBy(ca.cert, ca.cert)).toBe(true);
  });

  it("takes a CA bundle only when every block is a certificate", () => {
    expect(parseCaBundle(`${ca.cert}\n${other.cert}`)).toHaveLength(2);
    expect(() => parseCaBundle("no certificate here")).toThrow(/holds no PEM certificate/);
    const broken = ca.cert.replace(/\n([A-Za-z0-9+/]{20})/, "\n!!!!!!!!!!!!!!!!!!!!");
    expect(() => parseCaBundle(`${other.cert}${broken}`)).toThrow(
      "certificate 2 of 2 is not a valid X.509 certificate",
    );
    const truncated = `-----BEGIN CERTIFICATE-----\n${ca.cert.split("\n").slice(1, 4).join("\n")}\n-----END CERTIFICATE-----\n`;
    expect(() => parseCaBundle(truncated)).toThrow("certificate 1 of 1 is not a valid X.509 certificate");
  });
});
