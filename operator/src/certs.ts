import { webcrypto } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as x509 from "@peculiar/x509";
import { isoSeconds } from "../../runtime/src/util/time.ts";

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

const ALG = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

export interface Pem {
  cert: string;
  key: string;
}

export interface CertificateAuthority extends Pem {
  /** Issue a certificate for the given DNS names / IP addresses. */
  issue(opts: { commonName: string; dnsNames?: string[]; ips?: string[]; client?: boolean; organization?: string }): Promise<Pem>;
}

async function exportKey(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey("pkcs8", key);
  const b64 = Buffer.from(der).toString("base64").replace(/.{64}/g, "$&\n");
  return `-----BEGIN PRIVATE KEY-----\n${b64}\n-----END PRIVATE KEY-----\n`;
}

function serial(): string {
  return Buffer.from(webcrypto.getRandomValues(new Uint8Array(16))).toString("hex").replace(/^[89a-f]/, "1");
}

/** A certificate authority (ECDSA P-256): the operator's self-signed serving certificates, and the tests' CA. */
export async function createCA(commonName = "ifp-operator test CA"): Promise<CertificateAuthority> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ["sign", "verify"])) as CryptoKeyPair;
  const now = new Date();
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${commonName}`,
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter: new Date(now.getTime() + 365 * 24 * 3600_000),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    cert: caCert.toString("pem") + "\n",
    key: await exportKey(keys.privateKey),
    async issue({ commonName: cn, dnsNames = [], ips = [], client = false, organization }) {
      const leafKeys = (await webcrypto.subtle.generateKey(ALG, true, ["sign", "verify"])) as CryptoKeyPair;
      const names = [...dnsNames.map((value) => ({ type: "dns" as const, value })), ...ips.map((value) => ({ type: "ip" as const, value }))];
      const cert = await x509.X509CertificateGenerator.create({
        serialNumber: serial(),
        subject: organization ? `CN=${cn}, O=${organization}` : `CN=${cn}`,
        issuer: caCert.subject,
        notBefore: new Date(now.getTime() - 3600_000),
        notAfter: new Date(now.getTime() + 365 * 24 * 3600_000),
        signingKey: keys.privateKey,
        publicKey: leafKeys.publicKey,
        signingAlgorithm: ALG,
        extensions: [
          new x509.BasicConstraintsExtension(false, undefined, true),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
          new x509.ExtendedKeyUsageExtension([client ? x509.ExtendedKeyUsage.clientAuth : x509.ExtendedKeyUsage.serverAuth], false),
          ...(names.length ? [new x509.SubjectAlternativeNameExtension(names)] : []),
          await x509.AuthorityKeyIdentifierExtension.create(caCert, false),
        ],
      });
      return { cert: cert.toString("pem") + "\n", key: await exportKey(leafKeys.privateKey) };
    },
  };
}

/**
 * A self-signed serving certificate (its own one-off CA) for a runtime's Service names, used
 * when an Agent or Relay names neither a TLS Secret nor a cert-manager issuer.
 */
export async function selfSignedServing(commonName: string, dnsNames: string[]): Promise<Pem & { ca: string; notAfter: string }> {
  const ca = await createCA(`${commonName} (self-signed by ifp-operator)`);
  const leaf = await ca.issue({ commonName, dnsNames });
  const notAfter = isoSeconds(new x509.X509Certificate(leaf.cert).notAfter);
  return { ...leaf, ca: ca.cert, notAfter };
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
