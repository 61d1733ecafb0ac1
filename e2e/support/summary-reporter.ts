import { relative } from "node:path";
import type { Reporter, TestModule } from "vitest/node";

/** How many of the slowest test files the summary names. */
const SLOWEST = 10;

/**
 * Ends a run with one plain line, "N passed, N failed, N skipped", that any CI reads the same
 * way; a module that failed to load counts as a failure. Before it, the ten slowest test files
 * with their seconds (import, set-up, hooks and tests: what the file cost its worker), so that
 * a file that grows slow is seen in every run.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = unhandledErrors.length;
    let skipped = 0;
    for (const mod of testModules) {
      if (mod.state() === "failed" && [...mod.children.allTests()].length === 0) failed++;
      for (const test of mod.children.allTests()) {
        const state = test.result().state;
        if (state === "passed") passed++;
        else if (state === "failed") failed++;
        else skipped++;
      }
    }
    const slowest = slowestFiles(testModules, SLOWEST);
    if (slowest.length > 1) {
      const lines = slowest.map(({ file, seconds }) => `${seconds.toFixed(1).padStart(7)} s  ${file}`);
      process.stdout.write(`\nslowest test files:\n${lines.join("\n")}\n`);
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}

/** The `n` test files that took longest, with the seconds each took. */
export function slowestFiles(testModules: ReadonlyArray<TestModule>, n: number): { file: string; seconds: number }[] {
  return testModules
    .map((mod) => {
      const d = mod.diagnostic();
      const ms = d.environmentSetupDuration + d.prepareDuration + d.setupDuration + d.collectDuration + d.duration;
      return { file: relative(process.cwd(), mod.moduleId), seconds: ms / 1000 };
    })
    .sort((a, b) => b.seconds - a.seconds)
    .slice(0, n);
}
