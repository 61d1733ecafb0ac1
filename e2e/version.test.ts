// Every command reports one version and one commit: package.json's version, and the commit that
// git archive writes into archived-commit.ts (a release's source) or, in a checkout, its HEAD.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createOperatorMetrics } from "../operator/src/commands/metrics.ts";
import { createRuntimeMetrics } from "../runtime/src/server/metrics.ts";
import { buildInfo, versionLine } from "../runtime/src/util/version.ts";

const REPO = fileURLToPath(new URL("../", import.meta.url));
const { version } = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { version: string };
const head = spawnSync("git", ["rev-parse", "HEAD"], { cwd: REPO, encoding: "utf8" }).stdout.trim();

describe("buildInfo", () => {
  it("is package.json's version and the checkout's HEAD", () => {
    expect(buildInfo()).toEqual({ version, commit: head });
    expect(versionLine("x")).toBe(`x ${version} (commit ${head.slice(0, 12)})`);
    expect(versionLine("x", { version: "1.0.0", commit: "unknown" })).toBe("x 1.0.0 (commit unknown)");
  });

  it("takes the commit git archive writes into a release's source", () => {
    const dir = mkdtempSync(join(tmpdir(), "ifp-archive-"));
    try {
      const tar = spawnSync("git", ["archive", "--format=tar", "HEAD", "runtime/src/util/archived-commit.ts"], {
        cwd: REPO,
      });
      expect(tar.status, String(tar.stderr)).toBe(0);
      expect(spawnSync("tar", ["-x", "-C", dir], { input: tar.stdout }).status).toBe(0);
      const archived = readFileSync(join(dir, "runtime/src/util/archived-commit.ts"), "utf8");
      expect(archived).toContain(`export const ARCHIVED_COMMIT = "${head}";`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    ["ifp", "runtime/bin/ifp.ts", ["--version"]],
    ["ifp", "runtime/bin/ifp.ts", ["-V"]],
    ["ifp-runtime", "runtime/bin/ifp-runtime.ts", ["--version"]],
    ["ifp-runtime", "runtime/bin/ifp-runtime.ts", ["version"]],
    ["ifp-operator", "operator/bin/ifp-operator.ts", ["--version"]],
    ["kubectl-ifp", "operator/bin/kubectl-ifp.ts", ["--version"]],
    ["kubectl-ifp", "operator/bin/kubectl-ifp.ts", ["version"]],
  ])("%s %s %s prints it, exit 0", (name, bin, args) => {
    const r = spawnSync(process.execPath, [join(REPO, bin), ...args], { encoding: "utf8", timeout: 60_000 });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${name} ${version} (commit ${head.slice(0, 12)})\n`);
  });

  it("labels ifp_build_info and ifp_operator_build_info with them", async () => {
    const runtime = await createRuntimeMetrics("agent").registry.metrics();
    expect(runtime).toContain(`ifp_build_info{version="${version}",commit="${head}",mode="agent"} 1`);
    const operator = await createOperatorMetrics().registry.metrics();
    expect(operator).toContain(`ifp_operator_build_info{version="${version}",commit="${head}"} 1`);
  });
});
