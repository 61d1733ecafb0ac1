import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { toolPath } from "../tools/tools.ts";
import { freePort, waitFor } from "./ports.ts";

export interface NatsServer {
  url: string;
  port: number;
  storeDir: string;
  /** The server process's id while it runs. */
  readonly pid: number | undefined;
  /** Stop the server (SIGTERM), keeping its store. */
  stop(): Promise<void>;
  /** Start it again on the same port and store. */
  restart(): Promise<void>;
  /** Stop it and delete its store. */
  close(): Promise<void>;
}

/**
 * A real nats-server with JetStream on a free loopback port and a private store directory,
 * from the project's tool cache.
 */
export async function startNats(opts: { storeDir?: string } = {}): Promise<NatsServer> {
  const bin = process.env.IFP_NATS_SERVER ?? toolPath("nats-server");
  const storeDir = opts.storeDir ?? mkdtempSync(join(tmpdir(), "ifp-nats-"));
  const port = await freePort();
  let proc: ChildProcess | undefined;
  let stderr = "";

  const start = async () => {
    stderr = "";
    proc = spawn(bin, ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir, "--no_advertise"], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    proc.stderr!.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    const exited = new Promise<never>((_, reject) =>
      proc!.once("exit", (code) => reject(new Error(`nats-server exited with ${code}: ${stderr}`))),
    );
    exited.catch(() => {});
    await Promise.race([
      exited,
      waitFor("nats-server to accept connections", async () => {
        const nc = await connect({ servers: `127.0.0.1:${port}`, timeout: 500, reconnect: false });
        await nc.close();
        return true;
      }, 20_000, 50),
    ]);
  };

  const stop = async () => {
    const p = proc;
    proc = undefined;
    if (!p || p.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once("exit", () => resolve());
      p.kill("SIGTERM");
      setTimeout(() => p.kill("SIGKILL"), 10_000).unref();
    });
  };

  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    get pid() {
      return proc?.pid;
    },
    stop,
    restart: start,
    async close() {
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
