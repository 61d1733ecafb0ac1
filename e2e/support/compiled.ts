// The JavaScript the images run: the sources compiled with tsconfig.build.json, as the
// Dockerfiles' build stage compiles them. Benchmarks start these, not the TypeScript sources
// under Node's type stripping (about 30 MiB more per process), so that they measure what a
// cluster runs.
//
// The operator's and the runtime's entries are their images' bundles: the build stage of
// operator/Dockerfile or runtime/Dockerfile carried out (compiled, then bundled by
// operator/bundle.ts or runtime/bundle.ts) and laid out as the image's /app (imageApp).
//
// A compile takes tens of seconds on a small machine, so its output is kept in the cache beside
// the tools (~/.cache/ifp-operator/compiled), under a hash of everything that goes into it:
// every file of runtime/ and operator/, the TypeScript configurations, the package files, the
// build scripts, the compiler's version and this checkout's path. A source changed (or added,
// or removed) is a new hash and a new compile.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import {
  builderKind,
  compileBuildStage,
  dockerignore,
  ignoreFilePath,
  imageContextFiles,
  readDockerfile,
} from "../images/build.ts";
import { cacheRoot } from "../tools/tools.ts";

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

/** The directories and files whose content decides what a compile emits. */
const INPUT_DIRS = ["runtime", "operator", "crds"];
const INPUT_FILES = [
  "tsconfig.json",
  "tsconfig.build.json",
  "package.json",
  "package-lock.json",
  ".dockerignore",
  "e2e/images/build.ts",
  "e2e/support/compiled.ts",
  "node_modules/typescript/package.json",
  "node_modules/rolldown/package.json",
];
const SKIP = new Set(["node_modules", "dist", ".bench"]);

function hashTree(h: ReturnType<typeof createHash>, rel: string): void {
  const abs = join(REPO, rel);
  let entries: string[];
  try {
    entries = readdirSync(abs).sort();
  } catch {
    return;
  }
  for (const name of entries) {
    if (SKIP.has(name)) continue;
    const path = `${rel}/${name}`;
    const st = statSync(join(REPO, path), { throwIfNoEntry: false });
    if (!st) continue;
    if (st.isDirectory()) hashTree(h, path);
    else if (st.isFile())
      h.update(`${path}\0`)
        .update(readFileSync(join(REPO, path)))
        .update("\0");
  }
}

/** A hash of every input of a compile (see above); a few milliseconds. */
export function sourcesKey(): string {
  const h = createHash("sha256");
  h.update(`${REPO}\0${process.version}\0`);
  for (const f of INPUT_FILES) {
    const p = join(REPO, f);
    h.update(`${f}\0`)
      .update(existsSync(p) ? readFileSync(p) : "(absent)")
      .update("\0");
  }
  for (const d of INPUT_DIRS) hashTree(h, d);
  for (const name of readdirSync(REPO)
    .filter((n) => n.endsWith(".dockerignore"))
    .sort())
    h.update(`${name}\0`)
      .update(readFileSync(join(REPO, name)))
      .update("\0");
  return h.digest("hex").slice(0, 20);
}

function compiledCache(): string {
  const dir = join(dirname(cacheRoot()), "compiled");
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * The directory `build` fills for these sources: made once (into a staging directory, renamed
 * into place when complete, so that a run that stops half way or a second run at the same time
 * leaves no partial entry), then found by the sources' hash. Callers only read it.
 */
export function cachedBuild(kind: string, build: (dir: string) => void): string {
  const cache = compiledCache();
  const dir = join(cache, `${kind}-${sourcesKey()}`);
  if (existsSync(join(dir, ".complete"))) return dir;
  // Entries are renamed into place complete: one without its marker is not an entry.
  rmSync(dir, { recursive: true, force: true });
  const staging = mkdtempSync(join(cache, `.${kind}-`));
  try {
    build(staging);
    writeFileSync(join(staging, ".complete"), "");
    try {
      renameSync(staging, dir);
    } catch (err) {
      // Another run put the same entry in place first: use that one.
      if (!existsSync(join(dir, ".complete"))) throw err;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  // Older entries of this kind: beyond the three latest, those made over an hour ago (a run of
  // other sources in this checkout may still be reading a recent one).
  const older = readdirSync(cache)
    .filter((n) => n.startsWith(`${kind}-`) && join(cache, n) !== dir)
    .map((n) => ({ n, t: statSync(join(cache, n)).mtimeMs }))
    .sort((a, b) => b.t - a.t)
    .slice(2)
    .filter(({ t }) => Date.now() - t > 3600_000);
  for (const { n } of older) rmSync(join(cache, n), { recursive: true, force: true });
  return dir;
}

/** `npm run build`'s output (tsconfig.build.json compiled into an empty directory), from the cache when the sources are unchanged. */
export function compiledBuild(): string {
  return join(
    cachedBuild("build", (dir) => {
      compileTo(join(dir, "out"));
      // The dependencies resolve one level up from out/, as /app/node_modules does in the image.
      symlinkSync(join(REPO, "node_modules"), join(dir, "node_modules"));
    }),
    "out",
  );
}

/**
 * An image's /app as its Dockerfile's final stage lays it out: the files it copies from the
 * context, and what it copies from the build stage, carried out as e2e/images/build.ts carries it
 * out (compiled and bundled). Made once into the cache, where no node_modules is above it, as
 * the images have none; callers only read it. A Dockerfile that copies
 * from its deps stage (node_modules) is not laid out here.
 */
export function imageApp(dockerfile: string): string {
  const built = cachedBuild(`image-${dockerfile.replace(/\W+/g, "-")}`, (dir) => {
    const plan = readDockerfile(join(REPO, dockerfile));
    const root = join(dir, "root");
    const ignore = ignoreFilePath(dockerfile);
    const ignored = dockerignore(ignore ? readFileSync(join(REPO, ignore), "utf8") : "");
    for (const f of imageContextFiles(plan, ignored, dockerfile)) cpSync(join(REPO, f.src), join(root, f.dest));
    const stage = compileBuildStage(dockerfile);
    try {
      for (const c of plan.copies.filter((c) => c.from !== undefined)) {
        const from = plan.stages[c.from!]!;
        if (builderKind(from, plan.base) !== "build")
          throw new Error(`${dockerfile}: COPY --from=${c.from}: only the build stage's output is laid out here`);
        mkdirSync(join(root, c.dest), { recursive: true });
        cpSync(join(stage, relative(from.workdir, c.sources[0]!)), join(root, c.dest), { recursive: true });
      }
    } finally {
      rmSync(stage, { recursive: true, force: true });
    }
    writeFileSync(join(dir, "workdir"), plan.workdir);
  });
  return join(built, "root", readFileSync(join(built, "workdir"), "utf8"));
}

/** The entries whose image runs a bundle, with the variable that asks for tsc's output instead. */
const BUNDLED: Record<string, { dockerfile: string; unbundled: string }> = {
  "operator/bin/ifp-operator.ts": { dockerfile: "operator/Dockerfile", unbundled: "BENCH_OPERATOR_UNBUNDLED" },
  "runtime/bin/ifp-runtime.ts": { dockerfile: "runtime/Dockerfile", unbundled: "BENCH_RUNTIME_UNBUNDLED" },
};

/**
 * `entry` (a path under the repository, e.g. runtime/bin/ifp-runtime.ts) compiled; compiles once
 * per process. The operator's and the runtime's entries are their images' bundles
 * (operator/bundle.ts, runtime/bundle.ts), as the images run them; BENCH_OPERATOR_UNBUNDLED=1 and
 * BENCH_RUNTIME_UNBUNDLED=1 give tsc's output instead, and BENCH_SOURCE=1 the TypeScript source
 * itself, to measure them side by side.
 */
export function compiledEntry(entry: string): string {
  switch (entryCode(entry)) {
    case "TypeScript sources":
      return join(REPO, entry);
    case "the image's bundle":
      return join(imageApp(BUNDLED[entry]!.dockerfile), entry.replace(/\.ts$/, ".js"));
    default:
      outDir ??= compiledBuild();
      return join(outDir, entry.replace(/\.ts$/, ".js"));
  }
}

/** Which code compiledEntry(entry) runs, as a benchmark records it. */
export function entryCode(entry: string): "TypeScript sources" | "the image's bundle" | "tsc output and node_modules" {
  if (process.env.BENCH_SOURCE === "1") return "TypeScript sources";
  const bundled = BUNDLED[entry];
  if (bundled && process.env[bundled.unbundled] !== "1") return "the image's bundle";
  return "tsc output and node_modules";
}
