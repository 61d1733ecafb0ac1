// The durations of a long test file's set-up steps and of each of its tests, printed as one line
// when it ends (`<file> took … s: {…}`), so that a run shows where the file spends its time.
import { afterEach, beforeEach } from "vitest";

const since = (t: number) => Math.round((Date.now() - t) / 100) / 10;

/** Call inside the file's describe(): each test's duration is recorded under its name's first clause. */
export function fileTimings(file: string) {
  const started = Date.now();
  const timings: Record<string, number> = {};
  let testStarted = 0;
  beforeEach(() => {
    testStarted = Date.now();
  });
  afterEach((ctx) => {
    timings[`test: ${ctx.task.name.split(/[,:;]/)[0]!.slice(0, 60)}`] = since(testStarted);
  });
  return {
    /** Run `fn`, recording its duration as `what`. */
    async timed<T>(what: string, fn: () => Promise<T> | T): Promise<T> {
      const t = Date.now();
      try {
        return await fn();
      } finally {
        timings[what] = since(t);
      }
    },
    /** The line, with the file's total so far; `about` follows the total. */
    print(about = ""): void {
      timings.total = since(started);
      process.stderr.write(`${file} took ${timings.total} s${about}: ${JSON.stringify(timings)}\n`);
    },
  };
}
