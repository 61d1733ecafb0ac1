// The release of the commit checked out, as the tests that read or install one share it (the
// release test, the real node's install): made once per commit and version as a user makes one
// with a key of their own (`cosign generate-key-pair`, then `npm run release -- VERSION --key
// cosign.key --out DIR`), and kept beside the image cache, its images being the cached archives.
// A release of another commit is removed. Made under a lock, so that two runs of one commit on the
// machine make it once, and a test that asks for a copy of its own has it linked while the lock
// is held, so that no other run removes what it reads.
import { execFile, spawnSync } from "node:child_process";
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { withDirLock } from "../support/dir-lock.ts";
import { cacheRoot } from "../tools/tools.ts";
import type { Release } from "./release.ts";
import { generateKeyPair } from "./sign.ts";

/** A release of HEAD, and the public half (PEM) of the key pair it was made with. */
export type ReleaseOfHead = Release & { signedWith: string };

const REPO = fileURLToPath(new URL("../..", import.meta.url));

/** Run a program without blocking the event loop; rejects with its output on failure. */
function run(cmd: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { cwd: REPO, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) =>
      err
        ? reject(new Error(`${cmd} ${args.join(" ")} failed (${err.code ?? err.signal}): ${stderr || stdout}`))
        : resolve(stdout),
    ),
  );
}

/** The files of the flat directory `from` as hard links in `to` (made): a copy that shares their bytes. */
function linkInto(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const f of readdirSync(from)) {
    if (!statSync(join(from, f)).isFile()) throw new Error(`${join(from, f)} is not a file`);
    linkSync(join(from, f), join(to, f));
  }
}

/**
 * The release of HEAD; with `copyTo`, its files linked into that directory (made), which the
 * returned release names as its `dir` and which no other run removes.
 */
export async function releaseOfHead(copyTo?: string): Promise<ReleaseOfHead> {
  const version = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")).version as string;
  const head = spawnSync("git", ["rev-parse", "HEAD"], { cwd: REPO, encoding: "utf8" }).stdout.trim();
  const root = join(dirname(cacheRoot()), "releases");
  const entry = join(root, `${version}-${head.slice(0, 12)}`);
  const dir = join(entry, "release");
  const keyDir = join(entry, "key");
  const manifest = join(dir, "release.json");
  return withDirLock(
    `${root}.lock`,
    "the lock of the cached releases (another run makes one)",
    20 * 60_000,
    async () => {
      const kept = existsSync(manifest) ? JSON.parse(readFileSync(manifest, "utf8")) : undefined;
      if (kept?.commit !== head || !existsSync(join(keyDir, "cosign.pub"))) {
        if (existsSync(root))
          for (const e of readdirSync(root)) rmSync(join(root, e), { recursive: true, force: true });
        const { key } = generateKeyPair(keyDir);
        // As a user makes one; in a process of its own, so that the caller goes on meanwhile.
        await run("npm", ["run", "release", "--", version, "--key", key, "--out", dir], 20 * 60_000);
      }
      const made = JSON.parse(readFileSync(manifest, "utf8"));
      const signedWith = readFileSync(join(keyDir, "cosign.pub"), "utf8");
      if (copyTo) linkInto(dir, copyTo);
      return { ...made, dir: copyTo ?? dir, checksums: "SHA256SUMS", signedWith };
    },
  );
}
