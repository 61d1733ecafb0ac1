import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["runtime/**/*.test.ts", "operator/**/*.test.ts", "e2e/**/*.test.ts", "examples/**/*.test.ts"],
    globalSetup: ["e2e/support/global-setup.ts"],
    setupFiles: ["e2e/support/test-hooks.ts"],
    pool: "forks",
    // Two files at a time. e2e/node.test.ts (a real node, minutes long) runs in one worker while
    // the other files run in the other: vitest starts the longest files first (by the previous
    // run's durations, else by size), its steps carry their own timeouts, and a lock in
    // /run/lock keeps a second real node on the machine waiting (e2e/README.md).
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ["default", "./e2e/support/summary-reporter.ts"],
  },
});
