import { afterAll, beforeEach } from "vitest";
import { deferDirDeletion, logsSince, markFailed, settleDirs, stopAllProcesses } from "./process.ts";

/**
 * Loaded into every test file (vitest `setupFiles`). When a test fails or times out, prints the
 * logs of the processes (and `logSink`s) that ran during it. At the end of the file, stops what
 * the file left running and deletes its temporary directories — or, when anything in the file
 * failed (a test or a hook), keeps them and prints their paths.
 */
deferDirDeletion();

beforeEach(({ onTestFailed, task }) => {
  const since = Date.now();
  onTestFailed(() => {
    markFailed();
    const logs = logsSince(since);
    if (logs)
      process.stderr.write(
        `\n════ logs of the processes of the failed test "${task.name}" ════\n${logs}\n════ end of logs ════\n`,
      );
  });
});

interface TaskLike {
  result?: { state?: string; errors?: unknown[] };
  tasks?: TaskLike[];
}
const anyFailed = (t: TaskLike): boolean =>
  t.result?.state === "fail" || (t.result?.errors?.length ?? 0) > 0 || (t.tasks ?? []).some(anyFailed);
const testFailed = (t: TaskLike): boolean => (t.tasks ? t.tasks.some(testFailed) : t.result?.state === "fail");

// biome-ignore lint/correctness/noEmptyPattern: vitest passes the suite second, after the (unused) fixtures
afterAll(async ({}, suite) => {
  await stopAllProcesses();
  // A failed hook (beforeAll) fails no test, so onTestFailed never printed these.
  if (anyFailed(suite as TaskLike) && !testFailed(suite as TaskLike)) {
    const logs = logsSince(0);
    if (logs)
      process.stderr.write(
        `\n════ logs of the processes of ${suite.name} (a hook failed) ════\n${logs}\n════ end of logs ════\n`,
      );
  }
  const keep = anyFailed(suite as TaskLike);
  if (keep) markFailed();
  const kept = settleDirs(keep);
  if (kept.length)
    process.stderr.write(
      `\n${suite.name} failed; its temporary directories are kept for inspection:\n${kept.map((p) => `  ${p}`).join("\n")}\n`,
    );
}, 60_000);
