import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, type ConnectionOptions } from "@nats-io/transport-node";
import { toolPath } from "../tools/tools.ts";
import { waitFor } from "./wait.ts";
import { describeExit, releaseDir, spawnProcess, tempDir, type ManagedProcess } from "./process.ts";

export interface NatsServer {
  url: string;
  port: number;
  storeDir: string;
  /** The server process's id while it runs. */
  readonly pid: number | undefined;
  /** The server's log (stdout and stderr) since it was last started, bounded. */
  log(): string;
  /** Stop the server (SIGTERM, SIGKILL after a grace period), keeping its store. */
  stop(): Promise<void>;
  /** Start it again on the same port and store (stopping it first if it runs). */
  restart(): Promise<void>;
  /** Stop it and delete its store (kept when a test of the file failed). */
  close(): Promise<void>;
}

/** Runs body with the server stopped; whatever happens, it runs again afterwards. */
export async function withNatsDown(nats: NatsServer, body: () => Promise<void>): Promise<void> {
  await nats.stop();
  try {
    await body();
  } finally {
    if (nats.pid === undefined) await nats.restart();
  }
}

const LISTENING = /Listening for client connections on [^\s]+:(\d+)/;

/**
 * A real nats-server with JetStream on a loopback port it picks itself (`-p -1`, reported in its
 * log, so no other process can take the port between choosing and binding it) and a private
 * store directory, from the project's tool cache. Its output goes to an in-memory ring buffer
 * (printed when a test fails) and to `nats-server.log` in the store directory.
 */
export interface StartNatsOptions {
  storeDir?: string;
  graceMs?: number;
  /** A port to listen on (e.g. one a runtime was already told about); default one the server picks. */
  port?: number;
  /** Extra nats-server configuration (e.g. an `authorization` block), given with `-c`. */
  config?: string;
  /** Connection options (credentials) for the readiness check, when `config` requires them. */
  connect?: Partial<ConnectionOptions>;
  /** The address to listen on: loopback by default, or another address of this machine (the real test node's bridge). */
  host?: string;
}

export async function startNats(opts: StartNatsOptions = {}): Promise<NatsServer> {
  const host = opts.host ?? "127.0.0.1";
  const bin = process.env.IFP_NATS_SERVER ?? toolPath("nats-server");
  const ownDir = opts.storeDir === undefined;
  const storeDir = opts.storeDir ?? tempDir("ifp-nats-");
  mkdirSync(storeDir, { recursive: true });
  let port = opts.port ?? -1;
  const configArgs: string[] = [];
  if (opts.config !== undefined) {
    const file = join(storeDir, "nats.conf");
    writeFileSync(file, opts.config);
    configArgs.push("-c", file);
  }
  let server: ManagedProcess | undefined;

  const startOnce = async (): Promise<ManagedProcess> => {
    const p = spawnProcess("nats-server", bin, ["-a", host, "-p", String(port), "-js", "-sd", storeDir, "--no_advertise", ...configArgs], {
      logFile: join(storeDir, "nats-server.log"),
    });
    server = p;
    const failed = p.exited.then((e) => {
      throw new Error(`nats-server ${describeExit(e)}:\n${p.log().slice(-4000)}`);
    });
    failed.catch(() => {});
    try {
      const listening = waitFor("nats-server to report its port", () => Number(LISTENING.exec(p.log())?.[1] ?? 0) || undefined, 20_000, 25);
      listening.catch(() => {});
      const bound = await Promise.race([failed, listening]);
      const accepting = waitFor("nats-server to accept connections", async () => {
        const nc = await connect({ servers: `${host}:${bound}`, timeout: 500, reconnect: false, ...opts.connect });
        await nc.close();
        return true;
      }, 20_000, 50);
      accepting.catch(() => {});
      await Promise.race([failed, accepting]);
      if (p.exit) await failed;
      port = bound;
      return p;
    } catch (err) {
      await p.stop({ graceMs: 2_000 });
      throw err;
    }
  };

  const start = async () => {
    // A restart must keep the port the clients know; should another process hold it for a
    // moment, retry rather than fail at once.
    for (let attempt = 1; ; attempt++) {
      try {
        await startOnce();
        return;
      } catch (err) {
        const inUse = /address already in use/i.test((err as Error).message);
        if (!inUse || port === -1 || attempt >= 10) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  };

  const stop = async () => {
    const p = server;
    server = undefined;
    await p?.stop({ graceMs: opts.graceMs ?? 10_000 });
  };

  try {
    await start();
  } catch (err) {
    if (ownDir) releaseDir(storeDir);
    throw err;
  }
  return {
    url: `nats://${host}:${port}`,
    port,
    storeDir,
    get pid() {
      return server?.exit ? undefined : server?.pid;
    },
    log: () => server?.log() ?? "",
    stop,
    async restart() {
      await stop();
      await start();
    },
    async close() {
      await stop();
      if (existsSync(storeDir)) releaseDir(storeDir);
    },
  };
}
