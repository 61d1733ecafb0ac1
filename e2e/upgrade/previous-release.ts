// The release before this one, which the upgrade test (e2e/node-upgrade.test.ts) installs and
// upgrades from: its version and commits, kept here alone so that a release bumps them in one
// place (docs/install.md, Releases). Its chart is charts/ of its source commit, as `git archive`
// gives it; its images are built by that commit's own recipe (its e2e/images/build.ts, run in a
// detached checkout of the commit with its own `npm ci`), cached outside the repository beside
// the image cache, under the commit.
//
//   node e2e/upgrade/previous-release.ts    build (or find) the previous release's images; prints REF=archive lines
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { BuiltImage } from "../images/build.ts";
import { cacheRoot } from "../tools/tools.ts";

/**
 * The release installed before the upgrade: the CHANGELOG's newest released version, the commit
 * that released it (its CHANGELOG entry), and the commit its chart and images are made from.
 * For 0.1.0 the two differ: the operator of 57e8319 does not compile (it imports modules its
 * tree lacks: controllers/runtime.ts, reconciler.ts, shared.ts, expose-reconcile.ts,
 * agent/reconcile.ts, relay/reconcile.ts, nats-creds.ts and nats-credentials.ts, deleted by the
 * commits before it, and controllers/names.ts and settings.ts, first added after it); b76073a,
 * two commits and a minute later and still version 0.1.0, is the first that builds. A later
 * release names one commit for both.
 */
export const PREVIOUS_RELEASE = {
  version: "0.1.0",
  commit: "57e8319d29ee4e516e6af683621122014598550d",
  source: "b76073a5196a1d9bcca412fc30f8a196063711cb",
} as const;

/** The images a release brings, by their kind in e2e/images/build.ts. */
export const RELEASE_IMAGE_KINDS = ["runtime", "operator", "app"] as const;
export type ReleaseImageKind = (typeof RELEASE_IMAGE_KINDS)[number];

const REPO = fileURLToPath(new URL("../../", import.meta.url));

function git(args: string[], cwd = REPO): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync("git", args, { cwd, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  return { status: r.status, stdout: r.stdout ?? "", stderr: r.stderr ?? r.error?.message ?? "" };
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(" ")} (in ${cwd}) failed (${r.status}):\n${(r.stderr || r.stdout).slice(-4000)}`,
    );
  return r.stdout;
}

/**
 * Throws, saying what to do, when `commit` is not in this clone's history (a shallow clone, or
 * one that never fetched it).
 */
export function requireCommit(commit: string = PREVIOUS_RELEASE.source, cwd = REPO): void {
  const r = git(["cat-file", "-e", `${commit}^{commit}`], cwd);
  if (r.status === 0) return;

  const shallow = git(["rev-parse", "--is-shallow-repository"], cwd).stdout.trim() === "true";
  throw new Error(
    `the previous release ${PREVIOUS_RELEASE.version} (commit ${commit}, e2e/upgrade/previous-release.ts) is not in this clone's history${shallow ? " (a shallow clone)" : ""}: run \`git fetch --unshallow\` (or \`git fetch origin ${commit}\`) and try again`,
  );
}

/** The previous release's chart (charts/ifp-operator of its source commit), extracted under `dir`; returns its path. */
export function previousChart(dir: string): string {
  requireCommit();
  const archive = join(dir, "previous-chart.tar");
  run("git", ["archive", "--format=tar", "-o", archive, PREVIOUS_RELEASE.source, "charts/ifp-operator"], REPO);
  run("tar", ["-xf", archive, "-C", dir], dir);
  rmSync(archive, { force: true });
  return join(dir, "charts", "ifp-operator");
}

/** Where the previous release's images are kept: beside the image cache, under its source commit. */
export function previousReleaseCache(commit: string = PREVIOUS_RELEASE.source): string {
  return join(dirname(cacheRoot()), "previous-release", commit);
}

/**
 * The previous release's images (runtime, operator, example app) as OCI archives, built by its
 * own recipe the first time and found in the cache after. The build runs in a detached checkout
 * of the commit (a git worktree in a temporary directory, removed after) with its own `npm ci`,
 * its tool cache pointed at the release's cache directory, so that its images and the pruning of
 * its older builds stay there and never touch the current images' cache.
 */
export function previousImages(): Record<ReleaseImageKind, BuiltImage> {
  requireCommit();
  const cache = previousReleaseCache();
  const manifest = join(cache, "images.json");
  if (existsSync(manifest)) {
    const kept = JSON.parse(readFileSync(manifest, "utf8")) as Record<ReleaseImageKind, BuiltImage>;
    if (RELEASE_IMAGE_KINDS.every((k) => kept[k] && existsSync(kept[k].archive))) return kept;
  }
  mkdirSync(cache, { recursive: true });
  const started = Date.now();
  process.stderr.write(
    `previous release: building the images of ${PREVIOUS_RELEASE.version} (${PREVIOUS_RELEASE.source.slice(0, 12)}) by its own recipe (first run only; cached in ${cache})\n`,
  );
  const work = mkdtempSync(join(tmpdir(), "ifp-previous-release-"));
  const checkout = join(work, "checkout");
  try {
    run("git", ["worktree", "add", "--detach", checkout, PREVIOUS_RELEASE.source], REPO);
    run("npm", ["ci", "--no-audit", "--no-fund", "--prefer-offline"], checkout);
    // Its own `npm run images`, its tools' cache (and so its image cache) the release's.
    const out = run("npm", ["run", "--silent", "images", "--", ...RELEASE_IMAGE_KINDS], checkout, {
      ...process.env,
      IFP_TOOLS_CACHE: join(cache, "tools"),
    });
    const built: Partial<Record<ReleaseImageKind, BuiltImage>> = {};
    const lines = out.split("\n").filter((l) => /^\S+=\S+$/.test(l));
    RELEASE_IMAGE_KINDS.forEach((kind, i) => {
      const [ref, archive] = (lines[i] ?? "").split("=") as [string, string];
      if (!ref || !archive || !existsSync(archive))
        throw new Error(`the previous release's image build printed no archive for ${kind}:\n${out}`);
      built[kind] = { ref, archive };
    });
    const partial = `${manifest}.${process.pid}.partial`;
    writeFileSync(partial, `${JSON.stringify(built, null, 2)}\n`);
    renameSync(partial, manifest);
    process.stderr.write(`previous release: images built in ${Math.round((Date.now() - started) / 1000)} s\n`);
    return built as Record<ReleaseImageKind, BuiltImage>;
  } finally {
    git(["worktree", "remove", "--force", checkout]);
    git(["worktree", "prune"]);
    rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  try {
    for (const [kind, img] of Object.entries(previousImages()))
      process.stdout.write(`${kind}: ${img.ref}=${img.archive}\n`);
  } catch (err) {
    process.stderr.write(`previous release: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
