import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["runtime/**/*.test.ts", "operator/**/*.test.ts", "e2e/**/*.test.ts", "examples/**/*.test.ts"],
    globalSetup: ["e2e/support/global-setup.ts"],
    setupFiles: ["e2e/support/test-hooks.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ["default", "./e2e/support/summary-reporter.ts"],
  },
});
