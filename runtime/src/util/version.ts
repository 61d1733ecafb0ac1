// The version and commit a build reports (--version, the start-up log line, the build_info
// metrics): package.json's version, and the commit from a source archive or the git checkout.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ARCHIVED_COMMIT } from "./archived-commit.ts";

/** What every command reports about its build: `--version`, the start-up log line, the build_info metrics. */
export interface BuildInfo {
  /** package.json's version, or "unknown". */
  version: string;
  /** The full commit hash the code was built from, or "unknown". */
  commit: string;
}

const COMMIT = /^[0-9a-f]{40}$/;

/**
 * The version and commit a bundle that has no package.json beside it was built with: the kubectl
 * plugin's (operator/plugin-bundle.ts defines it); undeclared everywhere else.
 */
declare const IFP_BUNDLED_BUILD: BuildInfo | undefined;

/**
 * The package.json beside runtime/ and operator/: three directories up from this module in the
 * sources and in tsc's output, two from a chunk of an image's bundle
 * (runtime/bundle.ts: /app/runtime/lib/*.js, /app/package.json).
 */
function packageFile(): { path: string; version: string } | undefined {
  const require = createRequire(import.meta.url);
  for (const path of ["../../../package.json", "../../package.json"]) {
    try {
      const pkg = require(path) as { name?: string; version?: string };
      if (pkg.name === "ifp-operator" && pkg.version)
        return { path: fileURLToPath(new URL(path, import.meta.url)), version: pkg.version };
    } catch {
      // Not this layout.
    }
  }
  return undefined;
}

/** HEAD of the git checkout at `root`, when root is the top of one. */
function checkoutCommit(root: string): string | undefined {
  if (!existsSync(join(root, ".git"))) return undefined;
  const r = spawnSync("git", ["rev-parse", "--verify", "HEAD"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
    timeout: 5_000,
  });
  const commit = r.status === 0 ? r.stdout.trim() : "";
  return COMMIT.test(commit) ? commit : undefined;
}

let cached: BuildInfo | undefined;

/**
 * The version and commit of this build. The version is package.json's; the commit is the one
 * `git archive` wrote into archived-commit.ts (a release, and the images built from it), else the
 * HEAD of the checkout the package.json is the top of, else "unknown".
 */
export function buildInfo(): BuildInfo {
  if (cached) return cached;
  if (typeof IFP_BUNDLED_BUILD === "object") {
    cached = IFP_BUNDLED_BUILD;
    return cached;
  }
  const pkg = packageFile();
  const commit = COMMIT.test(ARCHIVED_COMMIT)
    ? ARCHIVED_COMMIT
    : ((pkg && checkoutCommit(dirname(pkg.path))) ?? "unknown");
  cached = { version: pkg?.version ?? "unknown", commit };
  return cached;
}

/** `NAME VERSION (commit 0123456789ab)`, the line each command's --version prints. */
export function versionLine(name: string, info = buildInfo()): string {
  return `${name} ${info.version} (commit ${info.commit === "unknown" ? info.commit : info.commit.slice(0, 12)})`;
}
