// A lock one process on the machine holds at a time: a directory made with mkdir (atomic), with
// the holder's pid inside, taken over when that process has died. For what the test runs of one
// machine share: a real node's slot, and the cached release of a commit.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { isAlive } from "../tools/tools.ts";
import { waitFor } from "./ports.ts";

/**
 * The live process holding the lock at `path` (-1 while its holder writes its pid), or undefined
 * when none holds it (a dead holder's lock is removed).
 */
export function lockHolder(path: string): number | undefined {
  let holder: number;
  try {
    holder = Number(readFileSync(join(path, "pid"), "utf8"));
  } catch {
    return existsSync(path) ? -1 : undefined;
  }
  if (!holder) return -1;
  if (isAlive(holder)) return holder;
  rmSync(path, { recursive: true, force: true });
  return undefined;
}

/** One try at the lock at `path`: whether it is now this process's. */
export function tryDirLock(path: string): boolean {
  try {
    mkdirSync(path);
  } catch {
    lockHolder(path);
    return false;
  }
  writeFileSync(join(path, "pid"), String(process.pid));
  return true;
}

/** Wait until the lock at `path` is this process's (at most `timeoutMs`); `what` names it in the timeout's error. */
export async function acquireDirLock(path: string, what: string, timeoutMs: number): Promise<void> {
  mkdirSync(dirname(path), { recursive: true });
  await waitFor(what, () => tryDirLock(path), timeoutMs, 1000);
}

/** Give the lock at `path` up. */
export function releaseDirLock(path: string): void {
  rmSync(path, { recursive: true, force: true });
}

/** `fn` run holding the lock at `path`. */
export async function withDirLock<T>(
  path: string,
  what: string,
  timeoutMs: number,
  fn: () => T | Promise<T>,
): Promise<T> {
  await acquireDirLock(path, what, timeoutMs);
  try {
    return await fn();
  } finally {
    releaseDirLock(path);
  }
}
