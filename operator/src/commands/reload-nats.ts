// `ifp-operator reload-nats`: the sidecar beside each server of the chart's NATS. nats-server
// reads its certificate only at start and on a reload signal; the kubelet brings a renewed Secret
// into the pod, and this notices it (a digest of the watched files, compared every interval) and
// signals the server (SIGHUP, as `nats-server --signal reload` does) through the pid file the
// server writes. The pod shares one process namespace, so the pid is the server's here too.
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { errorMessage } from "../../../runtime/src/util/errors.ts";
import { duration, list, readFlags, subcommand, UsageError } from "./flags.ts";

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
      opts.log.warn(
        { err: errorMessage(err) },
        "the certificate changed, but the NATS server could not be told yet; trying again",
      );
    }
  }
}

export const RELOAD_NATS_USAGE = `
usage: ifp-operator reload-nats --watch DIR --pid-file FILE [flags]

The sidecar of the chart's NATS servers (the pod shares one process namespace): when a file in
the watched directories changes (the kubelet brought a renewed certificate), tells the server to
reload (SIGHUP to the pid in its pid file).

  --watch DIR,DIR                 the directories to watch (the mounted certificate Secret)
  --pid-file FILE                 nats-server's pid_file
  --interval DURATION             how often the files are compared (default 10s)
  --log-level LEVEL               info (default), debug, warn, error [IFP_LOG_LEVEL]
`;

const RELOAD_NATS_OPTIONS = {
  watch: { type: "string" },
  "pid-file": { type: "string" },
  interval: { type: "string" },
  "log-level": { type: "string", env: "IFP_LOG_LEVEL" },
} as const;

/** The flags of `ifp-operator reload-nats` (throws UsageError on bad input). */
export function parseReloadNatsFlags(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): { help: boolean; watch: string[]; pidFile: string; intervalMs: number; logLevel: string } {
  const { values, str } = readFlags(RELOAD_NATS_OPTIONS, argv, env);
  const watch = list(str("watch"));
  const pidFile = str("pid-file");
  if (!values.help && (!watch.length || !pidFile)) throw new UsageError("reload-nats needs --watch and --pid-file");
  return {
    help: Boolean(values.help),
    watch,
    pidFile: pidFile ?? "",
    intervalMs: duration(str("interval") ?? "10s", "interval"),
    logLevel: str("log-level") ?? "info",
  };
}

/** `ifp-operator reload-nats`: runs until SIGTERM or SIGINT. */
export function reloadNatsMain(argv: string[]): Promise<void> {
  return subcommand("reload-nats", RELOAD_NATS_USAGE, argv, parseReloadNatsFlags, async (parsed, log) => {
    const stop = new AbortController();
    for (const sig of ["SIGTERM", "SIGINT"] as const) process.once(sig, () => stop.abort());
    await runReloader(
      { watch: parsed.watch, pidFile: parsed.pidFile, intervalMs: parsed.intervalMs, log },
      stop.signal,
    );
  });
}
