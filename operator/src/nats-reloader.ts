// `ifp-operator reload-nats`: the sidecar beside each server of the chart's NATS. nats-server
// reads its certificate only at start and on a reload signal; the kubelet brings a renewed Secret
// into the pod, and this notices it (a digest of the watched files, compared every interval) and
// signals the server (SIGHUP, as `nats-server --signal reload` does) through the pid file the
// server writes. The pod shares one process namespace, so the pid is the server's here too.
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { errorMessage } from "../../runtime/src/util/errors.ts";

export interface ReloaderOptions {
  /** The directories whose files are watched (the mounted certificate Secret). */
  watch: string[];
  /** The file nats-server writes its pid to (its `pid_file`). */
  pidFile: string;
  intervalMs: number;
  log: Logger;
  /** Sends the signal (default process.kill); tests give their own process's pid file. */
  signal?: (pid: number) => void;
}

/** A digest of every regular file under the directories (following the kubelet's symlinks). */
export async function digestOf(dirs: string[]): Promise<string> {
  const h = createHash("sha256");
  for (const dir of dirs) {
    let names: string[];
    try {
      names = (await readdir(dir)).filter((n) => !n.startsWith("..")).sort();
    } catch (err) {
      h.update(`${dir}\0missing:${(err as NodeJS.ErrnoException).code}\0`);
      continue;
    }
    for (const name of names) {
      try {
        h.update(`${dir}/${name}\0`).update(await readFile(join(dir, name)));
      } catch {
        // A directory or a file that went away between the listing and the read: not content.
      }
    }
  }
  return h.digest("hex");
}

/** Watch until `stop` aborts; each change of the files signals the server once. */
export async function runReloader(opts: ReloaderOptions, stop: AbortSignal): Promise<void> {
  const signal = opts.signal ?? ((pid: number) => process.kill(pid, "SIGHUP"));
  let seen = await digestOf(opts.watch);
  let pending = false;
  opts.log.info({ watch: opts.watch, pidFile: opts.pidFile }, "watching the NATS server's certificate");
  while (!stop.aborted) {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, opts.intervalMs);
      stop.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
    });
    if (stop.aborted) break;
    const now = await digestOf(opts.watch);
    if (now !== seen) {
      seen = now;
      pending = true;
    }
    if (!pending) continue;
    // A server not started yet (no pid file) reads the files at its start anyway; one that is
    // restarting is signalled at the next interval.
    try {
      const pid = Number.parseInt((await readFile(opts.pidFile, "utf8")).trim(), 10);
      if (!Number.isInteger(pid) || pid <= 0) throw new Error(`${opts.pidFile} holds no pid`);
      signal(pid);
      pending = false;
      opts.log.info({ pid }, "the certificate changed: told the NATS server to reload");
    } catch (err) {
      opts.log.warn({ err: errorMessage(err) }, "the certificate changed, but the NATS server could not be told yet; trying again");
    }
  }
}
