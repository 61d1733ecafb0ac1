// X.509 for the operator (ECDSA P-256): making and loading a certificate authority and issuing
// certificates from it (the install CA, trust.ts), and reading PEM certificates back — CA
// bundles, fingerprints, validity dates, who issued a leaf.
import { createHash, webcrypto, X509Certificate } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as x509 from "@peculiar/x509";
import { isoSeconds } from "../../../../runtime/src/util/time.ts";

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

const ALG = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

export interface Pem {
  cert: string;
  key: string;
}

export interface IssueOptions {
  commonName: string;
  dnsNames?: string[];
  ips?: string[];
  client?: boolean;
  /** Valid for both ends (serverAuth and clientAuth): a NATS server's, used for routes too. */
  bothEnds?: boolean;
  organization?: string;
  /** How long the certificate is valid (default a year); never past the CA's own expiry. */
  validityMs?: number;
}

export interface CertificateAuthority extends Pem {
  /** When the CA certificate stops being valid. */
  notAfter: Date;
  /** Issue a certificate for the given DNS names / IP addresses. */
  issue(opts: IssueOptions): Promise<Pem & { notAfter: Date }>;
}

async function exportKey(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey("pkcs8", key);
  const b64 = Buffer.from(der).toString("base64").replace(/.{64}/g, "$&\n");
  return `-----BEGIN PRIVATE KEY-----\n${b64}\n-----END PRIVATE KEY-----\n`;
}

async function importKey(pem: string): Promise<CryptoKey> {
  const b64 = pem.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
  return webcrypto.subtle.importKey("pkcs8", Buffer.from(b64, "base64"), ALG, true, ["sign"]);
}

function serial(): string {
  return Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
    .toString("hex")
    .replace(/^[89a-f]/, "1");
}

const YEAR_MS = 365 * 24 * 3600_000;
/** Certificates start an hour in the past, for clocks slightly behind. */
const BACKDATE_MS = 3600_000;

/** A CA from its certificate and PKCS#8 private key (PEM), for example as read back from a Secret. */
export async function loadCA(pem: Pem): Promise<CertificateAuthority> {
  const caCert = new x509.X509Certificate(pem.cert);
  const signingKey = await importKey(pem.key);
  return {
    cert: pem.cert,
    key: pem.key,
    notAfter: caCert.notAfter,
    async issue({
      commonName: cn,
      dnsNames = [],
      ips = [],
      client = false,
      bothEnds = false,
      organization,
      validityMs = YEAR_MS,
    }) {
      const now = Date.now();
      const leafKeys = (await webcrypto.subtle.generateKey(ALG, true, ["sign", "verify"])) as CryptoKeyPair;
      const names = [
        ...dnsNames.map((value) => ({ type: "dns" as const, value })),
        ...ips.map((value) => ({ type: "ip" as const, value })),
      ];
      const notAfter = new Date(Math.min(now + validityMs, caCert.notAfter.getTime()));
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: serial(),
        subject: organization ? `CN=${cn}, O=${organization}` : `CN=${cn}`,
        issuer: caCert.subject,
        notBefore: new Date(Math.max(now - BACKDATE_MS, caCert.notBefore.getTime())),
        notAfter,
        signingKey,
        publicKey: leafKeys.publicKey,
        signingAlgorithm: ALG,
        extensions: [
          new x509.BasicConstraintsExtension(false, undefined, true),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
          new x509.ExtendedKeyUsageExtension(
            bothEnds
              ? [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]
              : [client ? x509.ExtendedKeyUsage.clientAuth : x509.ExtendedKeyUsage.serverAuth],
            false,
          ),
          ...(names.length ? [new x509.SubjectAlternativeNameExtension(names)] : []),
          await x509.AuthorityKeyIdentifierExtension.create(caCert, false),
        ],
      });
      return { cert: `${cert.toString("pem")}\n`, key: await exportKey(leafKeys.privateKey), notAfter: cert.notAfter };
    },
  };
}

/** A certificate authority (ECDSA P-256): the operator's install CA, and the tests' CA. */
export async function createCA(
  commonName = "ifp-operator test CA",
  validityMs = YEAR_MS,
  now = Date.now(),
): Promise<CertificateAuthority> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ["sign", "verify"])) as CryptoKeyPair;
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${commonName}`,
    notBefore: new Date(now - BACKDATE_MS),
    notAfter: new Date(now + validityMs),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return loadCA({ cert: `${caCert.toString("pem")}\n`, key: await exportKey(keys.privateKey) });
}

/** The PEM CERTIFICATE blocks of a text, in order (anything between them is ignored). */
export function pemBlocks(text: string): string[] {
  return text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)?.map((b) => `${b}\n`) ?? [];
}

/**
 * The CA certificates of a PEM text: every block must parse as an X.509 certificate and there
 * must be at least one. Throws an Error that says what is wrong (never echoes the input).
 */
export function parseCaBundle(text: string): string[] {
  const blocks = pemBlocks(text);
  if (!blocks.length) throw new Error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  blocks.forEach((b, i) => {
    try {
      new X509Certificate(b);
    } catch {
      throw new Error(`certificate ${i + 1} of ${blocks.length} is not a valid X.509 certificate`);
    }
  });
  return blocks;
}

// Reading certificates (every reconcile pass reads the install CA's and each leaf's dates and
// fingerprint) uses Node's own X.509 parser, the OpenSSL that the runtimes' TLS uses too, which
// is native and a fraction of the cost of parsing the ASN.1 in JavaScript; @peculiar/x509 makes
// the certificates.

/** A certificate's SHA-256 fingerprint (hex), to name which CA issued what. */
export function fingerprint(pem: string): string {
  return createHash("sha256").update(new X509Certificate(pem).raw).digest("hex");
}

/** When a PEM certificate starts and stops being valid. */
export function validity(pem: string): { notBefore: Date; notAfter: Date } {
  const c = new X509Certificate(pem);
  return { notBefore: c.validFromDate, notAfter: c.validToDate };
}

/** Whether `leaf` (PEM) was signed by `ca` (PEM). */
export async function issuedBy(leaf: string, ca: string): Promise<boolean> {
  return new X509Certificate(leaf).verify(new X509Certificate(ca).publicKey);
}

/**
 * A serving certificate from a one-off CA of its own, outside any install's trust: for tests
 * and for Secrets made by hand (the operator issues default certificates from the install CA).
 */
export async function selfSignedServing(
  commonName: string,
  dnsNames: string[],
): Promise<Pem & { ca: string; notAfter: string }> {
  const ca = await createCA(`${commonName} (self-signed by ifp-operator)`);
  const leaf = await ca.issue({ commonName, dnsNames });
  return { cert: leaf.cert, key: leaf.key, ca: ca.cert, notAfter: isoSeconds(leaf.notAfter) };
}

/** A CA and a localhost serving certificate, written to a temporary directory. */
export async function localhostTls(dir = mkdtempSync(join(tmpdir(), "ifp-tls-"))) {
  const ca = await createCA();
  const leaf = await ca.issue({ commonName: "localhost", dnsNames: ["localhost"], ips: ["127.0.0.1", "::1"] });
  const files = { ca: join(dir, "ca.crt"), cert: join(dir, "tls.crt"), key: join(dir, "tls.key") };
  writeFileSync(files.ca, ca.cert);
  writeFileSync(files.cert, leaf.cert);
  writeFileSync(files.key, leaf.key, { mode: 0o600 });
  return { ca: ca.cert, cert: leaf.cert, key: leaf.key, files, dir };
}
