import { execFile, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { waitFor } from "./support/ports.ts";

/** `npm start` as the README tells it, and the command it prints, as a person would paste it. */
it("npm start brings up the local stack and its printed command sends a signed message", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ifp-stack-"));
  const base = 20000 + Math.floor(Math.random() * 20000);
  const stack = spawn("npm", ["start", "--silent"], { env: { ...process.env, IFP_STACK_DIR: dir, IFP_STACK_PORT: String(base) }, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let out = "";
  stack.stdout.on("data", (d) => (out += d));
  stack.stderr.on("data", (d) => (out += d));
  try {
    const command = await waitFor("the ready-to-paste command", () => /Send alice a signed message from bob:\n\s+(npx ifp send .*)\n/.exec(out)?.[1], 120_000, 250).catch((err) => {
      throw new Error(`${err.message}\n${out}`);
    });
    expect(out).toContain(`alice     https://localhost:${base}/.well-known/agent/capabilities`);
    const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile("sh", ["-c", command], { encoding: "utf8" }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr })),
    );
    expect(result.stdout).toMatch(/^202 \{"status":"accepted"/);
    expect(result.code).toBe(0);
  } finally {
    process.kill(-stack.pid!, "SIGINT");
    await new Promise((r) => stack.once("exit", r));
  }
});
