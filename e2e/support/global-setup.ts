import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureTools } from "../tools/tools.ts";
import { nodeTestUnsupported } from "./node.ts";
import { processStartTime } from "./process.ts";

/**
 * Build the tools the tests start (first run only; later runs find them in the cache), once,
 * before any test file runs, so that the build's output is not interleaved with tests.
 *
 * Also gives the run a directory where `e2e/support/process.ts` records the processes and
 * temporary directories the test workers make; the teardown kills what a worker left running
 * (a worker that crashed or was killed never ran its hooks) and lists what it left on disk.
 */
export default async function setup(): Promise<() => void> {
  // The real node's tools only where e2e/node.test.ts runs (Linux, root, …).
  const defaults = [
    "nats-server",
    "etcd",
    "kubernetes",
    "helm",
    "kube-score",
    "promtool",
    "prometheus-operator-crds",
    "kwok",
    "gateway-api",
    "a2a-go03",
    "card-verify",
    "cosign",
    "actionlint",
    ...(nodeTestUnsupported() ? [] : ["kubernetes-node", "coredns", "pause"]),
    // The scanner of the release test's images, where it builds them (as root).
    ...(process.getuid?.() === 0 ? ["syft"] : []),
  ];
  const tools = (process.env.IFP_TEST_TOOLS ?? defaults.join(",")).split(",").filter(Boolean);
  const failed = await ensureTools(tools);
  if (failed.length) throw new Error(`could not build the tools ${failed.join(", ")} (their errors are above)`);
  const runDir = mkdtempSync(join(tmpdir(), "ifp-test-run-"));
  process.env.IFP_TEST_RUN_DIR = runDir;
  return () => teardown(runDir);
}

export function teardown(runDir: string): void {
  const killed: string[] = [];
  const left: string[] = [];
  let entries: string[] = [];
  try {
    entries = readdirSync(runDir);
  } catch {
    return;
  }
  for (const entry of entries) {
    let data: { pid?: number; start?: string; name?: string; group?: boolean; path?: string };
    try {
      data = JSON.parse(readFileSync(join(runDir, entry), "utf8"));
    } catch {
      continue;
    }
    if (entry.startsWith("proc-") && data.pid && data.start && processStartTime(data.pid) === data.start) {
      try {
        process.kill(data.group ? -data.pid : data.pid, "SIGKILL");
        killed.push(`${data.name} (pid ${data.pid})`);
      } catch {
        // Ended in between.
      }
    } else if (entry.startsWith("dir-") && data.path) {
      left.push(data.path);
    }
  }
  rmSync(runDir, { recursive: true, force: true });
  if (killed.length)
    process.stderr.write(`\ntest teardown: killed processes a test worker left running: ${killed.join(", ")}\n`);
  if (left.length)
    process.stderr.write(
      `test teardown: directories a test worker left (kept for inspection):\n${left.map((p) => `  ${p}`).join("\n")}\n`,
    );
}
