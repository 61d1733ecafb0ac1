// A lock one process on the machine holds at a time: a directory made with mkdir (atomic), with
// the holder's pid inside, taken over when that process has died. For what the test runs of one
// machine share: the real node, and the cached release of a commit.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { isAlive } from "../tools/tools.ts";
import { waitFor } from "./ports.ts";

/** Wait until the lock at `path` is this process's (at most `timeoutMs`); `what` names it in the timeout's error. */
export async function acquireDirLock(path: string, what: string, timeoutMs: number): Promise<void> {
  mkdirSync(dirname(path), { recursive: true });
  await waitFor(
    what,
    () => {
      try {
        mkdirSync(path);
        writeFileSync(join(path, "pid"), String(process.pid));
        return true;
      } catch {
        let holder = 0;
        try {
          holder = Number(readFileSync(join(path, "pid"), "utf8"));
        } catch {}
        if (holder && !isAlive(holder)) rmSync(path, { recursive: true, force: true });
        return false;
      }
    },
    timeoutMs,
    1000,
  );
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
