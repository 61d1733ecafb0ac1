// The JavaScript the images run: the sources compiled with tsconfig.build.json, as the
// Dockerfiles' build stage compiles them. Benchmarks start these, not the TypeScript sources
// under Node's type stripping (about 30 MiB more per process), so that they measure what a
// cluster runs.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
let outDir: string | undefined;

/** Compile the sources with tsconfig.build.json into `dir` (an absolute path), as `npm run build` does into dist/. */
export function compileTo(dir: string): void {
  const r = spawnSync(
    process.execPath,
    [join(REPO, "node_modules", "typescript", "bin", "tsc"), "-p", join(REPO, "tsconfig.build.json"), "--outDir", dir],
    { cwd: REPO, encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`tsc -p tsconfig.build.json failed: ${(r.stdout + r.stderr).slice(-3000)}`);
}

/**
 * `entry` (a path under the repository, e.g. runtime/bin/ifp-runtime.ts) compiled; compiles once
 * per process. BENCH_SOURCE=1 returns the TypeScript source itself, to measure the two side by side.
 */
export function compiledEntry(entry: string): string {
  if (process.env.BENCH_SOURCE === "1") return join(REPO, entry);
  if (!outDir) {
    const dir = join(REPO, ".bench", "dist");
    compileTo(dir);
    outDir = dir;
  }
  return join(outDir, entry.replace(/\.ts$/, ".js"));
}
