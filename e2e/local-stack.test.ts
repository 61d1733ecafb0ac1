import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { spawnProcess, tempDir, type ManagedProcess } from "./support/process.ts";
import { waitFor } from "./support/wait.ts";

/** A base port with room for the stack's ports (base … base+102) below the kernel's ephemeral range. */
function basePort(): number {
  const [lo] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
  const top = (lo ?? 32768) - 200;
  return 10_000 + Math.floor(Math.random() * Math.max(1000, top - 10_000));
}

/** `npm start` as the README tells it, and the command it prints, as a person would paste it. */
it("npm start brings up the local stack and its printed command sends a signed message", { timeout: 200_000 }, async () => {
  const dir = tempDir("ifp-stack-");
  let stack: ManagedProcess | undefined;
  let base = 0;
  let command: string | undefined;
  try {
    // The stack's ports are fixed by its environment; should one be taken, start again elsewhere.
    for (let attempt = 1; !command; attempt++) {
      base = basePort();
      stack = spawnProcess("npm start", "npm", ["start", "--silent"], { env: { ...process.env, IFP_STACK_DIR: `${dir}/${attempt}`, IFP_STACK_PORT: String(base) }, group: true });
      const s = stack;
      command = await waitFor("the ready-to-paste command", () => /Send alice a signed message from bob:\n\s+(npx ifp send .*)\n/.exec(s.log())?.[1] ?? (s.exit ? "" : undefined), 120_000, 250);
      if (!command) {
        if (!/EADDRINUSE/.test(s.log()) || attempt >= 3) throw new Error(`npm start ended before it was ready:\n${s.log()}`);
        await s.stop();
      }
    }
    expect(stack!.log()).toContain(`alice     https://localhost:${base}/.well-known/agent/capabilities`);
    const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile("sh", ["-c", command!], { encoding: "utf8", timeout: 45_000 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr })),
    );
    expect(result.stdout, result.stderr).toMatch(/^202 \{"status":"accepted"/);
    expect(result.code).toBe(0);
  } finally {
    // Ctrl-C, as a person would; bounded, and it cannot replace the test's own error.
    await stack?.stop({ signal: "SIGINT", graceMs: 20_000 });
  }
});
