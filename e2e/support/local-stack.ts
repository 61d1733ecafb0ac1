// `npm start` as the README tells it, on ports of its own: the tests of the local stack start
// it through here and read what it prints.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { spawnProcess, type ManagedProcess } from "./process.ts";
import { waitFor } from "./wait.ts";

/**
 * A base port with room for the stack's ports (base … base+302) below the kernel's ephemeral range
 * and above 10080, the one port there that fetch refuses to connect to.
 */
export function basePort(): number {
  const [lo] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
  const top = (lo ?? 32768) - 400;
  return 10_100 + Math.floor(Math.random() * Math.max(1000, top - 10_100));
}

export interface LocalStack {
  /** The `npm start` process (its own process group). */
  process: ManagedProcess;
  /** alice's port; bob is on base + 1, the relay on base + 2, each agent's local API on its port + 100. */
  base: number;
  /** The state directory (IFP_STACK_DIR): keys, the CA, the TLS certificate and key the runtimes serve. */
  stateDir: string;
  /** The CA file it prints, and its PEM. */
  caFile: string;
  ca: string;
  /** The ready-to-paste `ifp send` command it prints. */
  command: string;
  /** Ctrl-C, as a person would; bounded. */
  stop(): Promise<void>;
}

/**
 * `npm start --silent` with IFP_STACK_DIR under `dir` and IFP_STACK_PORT on a random base, once
 * it printed that it is up; should one of its ports be taken, it starts again elsewhere (three
 * attempts).
 */
export async function startLocalStack(dir: string): Promise<LocalStack> {
  for (let attempt = 1; ; attempt++) {
    const base = basePort();
    const stateDir = join(dir, String(attempt));
    const stack = spawnProcess("npm start", "npm", ["start", "--silent"], {
      env: { ...process.env, IFP_STACK_DIR: stateDir, IFP_STACK_PORT: String(base) },
      group: true,
    });
    const command = await waitFor(
      "the ready-to-paste command",
      () =>
        /Send alice a signed message from bob:\n\s+(npx ifp send .*)\n/.exec(stack.log())?.[1] ??
        (stack.exit ? "" : undefined),
      120_000,
      250,
    );
    if (command) {
      const caFile = /^\s+CA\s+(\S+)$/m.exec(stack.log())![1]!;
      return {
        process: stack,
        base,
        stateDir,
        caFile,
        ca: readFileSync(caFile, "utf8"),
        command,
        stop: async () => {
          await stack.stop({ signal: "SIGINT", graceMs: 20_000 });
        },
      };
    }
    if (!/EADDRINUSE/.test(stack.log()) || attempt >= 3)
      throw new Error(`npm start ended before it was ready:\n${stack.log()}`);
    await stack.stop();
  }
}
