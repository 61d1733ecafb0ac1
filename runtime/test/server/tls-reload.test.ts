// Hot reload of the serving certificate (server/tls.ts): the runtime's HTTPS server is given new
// files on disk — rewritten in place, or swapped the way a Kubernetes Secret volume does it —
// and new connections get the new certificate without a restart.
import { X509Certificate } from "node:crypto";
import { mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "node:tls";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { createCA, type CertificateAuthority, type Pem } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { createServer } from "../../src/server/http.ts";
import { readTls, watchTls, type TlsFiles } from "../../src/server/tls.ts";
import { tempDir } from "../support/fixtures.ts";

const POLL_MS = 100;
let ca: CertificateAuthority;
let certs: Pem[];
beforeAll(async () => {
  ca = await createCA("tls reload test CA");
  certs = await Promise.all(
    [0, 1, 2].map(() => ca.issue({ commonName: "localhost", dnsNames: ["localhost"], ips: ["127.0.0.1"] })),
  );
});

const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256;

/** The fingerprint of the certificate a new TLS connection is served. */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port, servername: "localhost", ca: ca.cert }, () => {
      const fp = socket.getPeerCertificate().fingerprint256;
      socket.end();
      resolve(fp);
    });
    socket.once("error", reject);
  });
}

let running: { app: FastifyInstance; stop: () => void } | undefined;
afterEach(async () => {
  running?.stop();
  await running?.app.close();
  running = undefined;
});

/** The runtime's HTTPS server (server/http.ts) with the certificate watch the runtimes start. */
async function serve(files: TlsFiles, warnings: string[] = []) {
  const logger = pino({ level: "warn" }, { write: (line: string) => void warnings.push(JSON.parse(line).msg) });
  const app = createServer({ tls: readTls(files), logger });
  app.get("/hello", async () => ({ status: "ok" }));
  const stop = watchTls(app, files, logger, POLL_MS);
  running = { app, stop };
  await app.listen({ port: 0, host: "127.0.0.1" });
  const addr = app.server.address();
  return typeof addr === "object" && addr ? addr.port : 0;
}

describe("TLS certificate hot reload", () => {
  it("serves a certificate rewritten in place to new connections, without a restart", async () => {
    const dir = tempDir();
    const files = { certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") };
    writeFileSync(files.certFile, certs[0]!.cert);
    writeFileSync(files.keyFile, certs[0]!.key);
    const port = await serve(files);
    expect(await servedFingerprint(port)).toBe(fingerprint(certs[0]!.cert));

    writeFileSync(files.keyFile, certs[1]!.key);
    writeFileSync(files.certFile, certs[1]!.cert);
    await waitFor(
      "the new certificate to be served",
      async () => (await servedFingerprint(port)) === fingerprint(certs[1]!.cert),
      10_000,
      50,
    );
    const res = await httpsRequest(`https://localhost:${port}/hello`, { ca: ca.cert });
    expect(res.status).toBe(200);
  });

  it("follows a Kubernetes Secret volume's atomic swap of its ..data link", async () => {
    const dir = tempDir();
    const version = (n: number) => {
      const d = join(dir, `..2026_11_23_0${n}`);
      mkdirSync(d);
      writeFileSync(join(d, "tls.crt"), certs[n]!.cert);
      writeFileSync(join(d, "tls.key"), certs[n]!.key);
      return d;
    };
    symlinkSync(version(0), join(dir, "..data"));
    symlinkSync(join("..data", "tls.crt"), join(dir, "tls.crt"));
    symlinkSync(join("..data", "tls.key"), join(dir, "tls.key"));
    const port = await serve({ certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") });
    expect(await servedFingerprint(port)).toBe(fingerprint(certs[0]!.cert));

    // As the kubelet does: a new timestamped directory, a new link renamed over ..data, the old one removed.
    symlinkSync(version(2), join(dir, "..data_tmp"));
    renameSync(join(dir, "..data_tmp"), join(dir, "..data"));
    rmSync(join(dir, "..2026_11_23_00"), { recursive: true });
    await waitFor(
      "the swapped certificate to be served",
      async () => (await servedFingerprint(port)) === fingerprint(certs[2]!.cert),
      10_000,
      50,
    );
  });

  it("keeps serving the old certificate while the new pair is half written, and takes it once complete", async () => {
    const dir = tempDir();
    const files = { certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") };
    writeFileSync(files.certFile, certs[0]!.cert);
    writeFileSync(files.keyFile, certs[0]!.key);
    const warnings: string[] = [];
    const port = await serve(files, warnings);

    writeFileSync(files.certFile, certs[1]!.cert); // the key does not match yet
    await waitFor(
      "the mismatch to be noticed",
      () => warnings.includes("could not reload the TLS certificate"),
      10_000,
      20,
    );
    await consistently(
      "the old certificate to be served",
      async () => (await servedFingerprint(port)) === fingerprint(certs[0]!.cert),
      4 * POLL_MS,
      50,
    );

    writeFileSync(files.keyFile, certs[1]!.key);
    await waitFor(
      "the completed pair to be served",
      async () => (await servedFingerprint(port)) === fingerprint(certs[1]!.cert),
      10_000,
      50,
    );
  });
});
