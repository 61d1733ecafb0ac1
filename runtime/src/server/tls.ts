// The serving certificate and key read from their files, and reloaded when the files change
// (a renewed Secret) without a restart.
import { readFileSync, statSync } from "node:fs";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { TlsMaterial } from "./http.ts";

export interface TlsFiles {
  certFile: string;
  keyFile: string;
}

export function readTls(files: TlsFiles): TlsMaterial {
  try {
    return { cert: readFileSync(files.certFile), key: readFileSync(files.keyFile) };
  } catch (err) {
    throw new Error(`cannot read the TLS certificate or key: ${(err as Error).message}`);
  }
}

/**
 * Reload the serving certificate when its files change (cert-manager renews them in place in
 * the mounted Secret), without a restart. Polls the modification times.
 */
export function watchTls(app: FastifyInstance, files: TlsFiles, log: Logger, intervalMs = 60_000): () => void {
  const mtime = () => {
    try {
      return `${statSync(files.certFile).mtimeMs}:${statSync(files.keyFile).mtimeMs}`;
    } catch {
      return "";
    }
  };
  let last = mtime();
  const timer = setInterval(() => {
    const now = mtime();
    if (!now || now === last) return;
    try {
      const { cert, key } = readTls(files);
      (app.server as unknown as { setSecureContext(o: object): void }).setSecureContext({
        cert,
        key,
        minVersion: "TLSv1.2",
      });
      last = now;
      log.info("reloaded the TLS certificate");
    } catch (err) {
      log.warn({ err: (err as Error).message }, "could not reload the TLS certificate");
    }
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
