// The one log format of the operator and the runtimes (docs/observability.md#log-lines): the
// real binaries, started as their images start them, write lines with the same fields, the level
// as a word and the time in RFC 3339.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { tempDir } from "./support/process.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** The JSON lines a binary wrote to stdout before it ended. */
function linesOf(bin: string, args: string[]): Record<string, unknown>[] {
  const r = spawnSync(process.execPath, [join(root, bin), ...args], {
    cwd: tempDir("ifp-log-format-"),
    encoding: "utf8",
    timeout: 45_000,
    env: { ...process.env, KUBECONFIG: "/nonexistent/kubeconfig" },
  });
  const lines = r.stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines.length, `${bin} wrote no JSON line: ${r.stdout}${r.stderr}`).toBeGreaterThan(0);
  return lines;
}

describe("log lines", () => {
  it("have the same fields in the operator and a runtime: level as a word, time in RFC 3339, component", () => {
    const operator = linesOf("operator/bin/ifp-operator.ts", ["--kubeconfig", "/nonexistent/kubeconfig"]);
    const runtime = linesOf("runtime/bin/ifp-runtime.ts", [
      ...["agent", "--manifest", "/nonexistent/agent.yaml", "--port", "8443"],
      ...["--tls-cert", "x.crt", "--tls-key", "x.key", "--signing-key", "x.key", "--nats", "nats://127.0.0.1:1"],
    ]);
    for (const l of [...operator, ...runtime]) {
      expect(l.level).toMatch(/^(trace|debug|info|warn|error|fatal)$/);
      expect(l.time).toMatch(RFC3339);
      expect(Math.abs(Date.parse(l.time as string) - Date.now())).toBeLessThan(120_000);
      expect(typeof l.msg).toBe("string");
    }
    // The same failure in both: the same field names, in the same order.
    const op = operator.find((l) => l.msg === "could not start");
    const rt = runtime.find((l) => l.msg === "could not start");
    expect(op).toMatchObject({ level: "error", component: "ifp-operator", err: expect.stringMatching(/ENOENT/) });
    expect(rt).toMatchObject({ level: "fatal", component: "ifp-runtime-agent", err: expect.stringMatching(/ENOENT/) });
    expect(Object.keys(op!)).toEqual(["level", "time", "component", "err", "msg"]);
    expect(Object.keys(rt!)).toEqual(Object.keys(op!));
    // No numeric level or epoch time anywhere, and no field only one side has on a plain line.
    const warn = operator.find((l) => l.level === "warn");
    expect(Object.keys(warn!)).toEqual(["level", "time", "component", "msg"]);
  });
});
