import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { toolPath } from "../tools/tools.ts";
import { type ManagedProcess, spawnProcess, tempDir } from "./process.ts";

/** An OCI registry on loopback: `crane registry serve`, its blobs in a directory of the test. */
export interface Registry {
  /** `127.0.0.1:<port>`, as an image reference's registry part (crane speaks plain HTTP to loopback). */
  host: string;
  /** Where it keeps the blobs. */
  dir: string;
  proc: ManagedProcess;
  stop(): Promise<void>;
}

/**
 * Start a registry on a port the kernel chooses (`--address 127.0.0.1:0`), read from its
 * `serving on port N` line; fails with its output if it ends or says nothing within 20 s.
 */
export async function startRegistry(name = "registry"): Promise<Registry> {
  const dir = join(tempDir(`ifp-${name}-`), "blobs");
  // --disk wants the directory to exist: without it every upload fails with a 500.
  mkdirSync(dir, { recursive: true });
  let announced: (port: number) => void;
  const port = new Promise<number>((r) => (announced = r));
  let seen = "";
  const proc = spawnProcess(
    `crane registry serve (${name})`,
    toolPath("crane"),
    ["registry", "serve", "--address", "127.0.0.1:0", "--disk", dir],
    {
      onOutput: (text) => {
        seen += text;
        const m = /serving on port (\d+)/.exec(seen);
        if (m) announced(Number(m[1]));
        if (seen.length > 4096) seen = seen.slice(-256);
      },
    },
  );
  const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 20_000).unref());
  const first = await Promise.race([port, proc.exited, timer]);
  if (typeof first !== "number") {
    await proc.stop({ graceMs: 1_000 });
    throw new Error(`crane registry serve did not start (${first === "timeout" ? "20 s" : "it ended"}): ${proc.log()}`);
  }
  return {
    host: `127.0.0.1:${first}`,
    dir,
    proc,
    stop: async () => {
      await proc.stop({ graceMs: 5_000 });
    },
  };
}
