// --ca-file on real HTTPS servers (loopback): the file's CAs are trusted in addition to the
// system roots, never instead of them, and a changed file is read again without a restart.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { once } from "node:events";
import { createServer, type Server } from "node:https";
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { createCA, type CertificateAuthority } from "../../../e2e/support/tls.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { defaultCaCertificates, HttpClient, parsePemCertificates } from "../../src/net/http-client.ts";

const dir = tempDir("ifp-ca-file-");
let ca1: CertificateAuthority;
let ca2: CertificateAuthority;
let server1: { server: Server; url: string };
let server2: { server: Server; url: string };

async function serve(ca: CertificateAuthority): Promise<{ server: Server; url: string }> {
  const leaf = await ca.issue({ commonName: "localhost", dnsNames: ["localhost"] });
  const server = createServer({ cert: leaf.cert, key: leaf.key }, (_req, res) => res.end("ok"));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { server, url: `https://localhost:${(server.address() as { port: number }).port}/` };
}

/** Replace a file the way the kubelet updates a mounted ConfigMap: a new file moved into place. */
function replaceFile(file: string, text: string): void {
  const tmp = `${file}.${Date.now()}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

beforeAll(async () => {
  [ca1, ca2] = await Promise.all([createCA("ca-file one"), createCA("ca-file two")]);
  [server1, server2] = await Promise.all([serve(ca1), serve(ca2)]);
});

afterAll(() => {
  server1?.server.close();
  server2?.server.close();
  releaseDir(dir);
});

describe("HttpClient --ca-file", () => {
  it("trusts a peer signed by the file's CA and still trusts the system roots", async () => {
    const file = join(dir, "one.crt");
    writeFileSync(file, ca1.cert);
    const http = new HttpClient({ caFile: file });
    onTestFinished(() => http.close());
    expect((await http.request(server1.url)).text).toBe("ok");
    const trusted = http.trustedCas()!;
    expect(rootCertificates.length).toBeGreaterThan(50);
    for (const root of rootCertificates) expect(trusted).toContain(root);
    expect(trusted).toContain(ca1.cert);
    // Node's whole default set is kept (NODE_EXTRA_CA_CERTS included), the file's CA added.
    expect(trusted).toEqual([...defaultCaCertificates(), ca1.cert]);
    // Not trusted: a peer of another CA.
    await expect(http.request(server2.url)).rejects.toThrow();
  });

  it("keeps NODE_EXTRA_CA_CERTS trusted next to the file", async () => {
    // A process started with NODE_EXTRA_CA_CERTS naming ca2, and a --ca-file naming ca1, trusts both.
    const extraFile = join(dir, "node-extra.crt");
    writeFileSync(extraFile, ca2.cert);
    const file = join(dir, "one-again.crt");
    writeFileSync(file, ca1.cert);
    const script = `
      import { HttpClient } from ${JSON.stringify(new URL("../../src/net/http-client.ts", import.meta.url).pathname)};
      const http = new HttpClient({ caFile: ${JSON.stringify(file)} });
      const a = await http.request(${JSON.stringify(server1.url)});
      const b = await http.request(${JSON.stringify(server2.url)});
      console.log(a.status, b.status);
      await http.close();`;
    // Run apart (the servers answer from this process, so it must not block).
    const r = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: extraFile },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.stdout.trim()).toBe("200 200");
  });

  it("leaves Node's default trust alone without a file", async () => {
    const http = new HttpClient();
    onTestFinished(() => http.close());
    expect(http.trustedCas()).toBeUndefined();
    await expect(http.request(server1.url)).rejects.toThrow();
  });

  it("reads the file again when it changes: a rotated bundle is trusted without a restart", async () => {
    const file = join(dir, "rotating.crt");
    writeFileSync(file, ca1.cert);
    const reloads: unknown[] = [];
    const http = new HttpClient({ caFile: file, caFileCheckMs: 0, onCaFileReload: (r) => reloads.push(r) });
    onTestFinished(() => http.close());
    expect((await http.request(server1.url)).status).toBe(200);
    await expect(http.request(server2.url)).rejects.toThrow();
    replaceFile(file, ca1.cert + ca2.cert);
    expect((await http.request(server2.url)).status).toBe(200);
    expect((await http.request(server1.url)).status).toBe(200);
    expect(reloads).toEqual([{ file, certificates: 2 }]);
    // The old CA leaves the bundle: its peers are no longer trusted.
    replaceFile(file, ca2.cert);
    await expect(http.request(server1.url)).rejects.toThrow();
    expect((await http.request(server2.url)).status).toBe(200);
  });

  it("keeps the trust it has when the file changes into something unusable, and says why", async () => {
    const file = join(dir, "broken.crt");
    writeFileSync(file, ca1.cert);
    const reloads: any[] = [];
    const http = new HttpClient({ caFile: file, caFileCheckMs: 0, onCaFileReload: (r) => reloads.push(r) });
    onTestFinished(() => http.close());
    replaceFile(file, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n");
    expect((await http.request(server1.url)).status).toBe(200);
    expect(reloads).toEqual([{ file, error: "certificate 1 of 1 is not a valid X.509 certificate" }]);
    // Reported once per version of the file, not on every request.
    expect((await http.request(server1.url)).status).toBe(200);
    expect(reloads).toHaveLength(1);
  });

  it("looks at the file at most every caFileCheckMs", async () => {
    const file = join(dir, "slow.crt");
    writeFileSync(file, ca1.cert);
    const http = new HttpClient({ caFile: file, caFileCheckMs: 60_000 });
    onTestFinished(() => http.close());
    replaceFile(file, ca2.cert);
    expect((await http.request(server1.url)).status).toBe(200);
    await expect(http.request(server2.url)).rejects.toThrow();
    await http.reloadCaFile(true);
    expect((await http.request(server2.url)).status).toBe(200);
  });

  it("refuses an unusable file at start with a message that names it", () => {
    const file = join(dir, "garbage.crt");
    writeFileSync(file, "hello");
    expect(() => new HttpClient({ caFile: file })).toThrow(`CA file ${file} holds no PEM certificate`);
    expect(() => new HttpClient({ caFile: join(dir, "absent.crt") })).toThrow(/ENOENT/);
    expect(parsePemCertificates(" \n")).toEqual([]);
  });
});
