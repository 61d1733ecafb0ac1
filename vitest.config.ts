import { dirname, join } from "node:path";
import { configDefaults, defineConfig } from "vitest/config";
import { cacheRoot } from "./e2e/tools/tools.ts";

/** The real-node files: the install as a user makes it, and the upgrade from the previous release. */
const NODE_TESTS = ["e2e/node.test.ts", "e2e/node-upgrade.test.ts"];
const UNIT_TESTS = ["runtime/src/**/*.test.ts", "operator/src/**/*.test.ts"];

export default defineConfig({
  // Vitest keeps each test file's last duration here, and starts the longest files first. In the
  // user's cache, beside the tools (not node_modules/.vite), so that a new clone on the same
  // machine starts with them rather than ordering by file size.
  cacheDir: join(dirname(cacheRoot()), "vite"),
  test: {
    globalSetup: ["e2e/support/global-setup.ts"],
    setupFiles: ["e2e/support/test-hooks.ts"],
    pool: "forks",
    // Five files at a time on a two-core machine: the suite's tests spend much of their time
    // waiting on real servers' timers, leases, retries and pods, not on the cores (e2e/README.md).
    maxWorkers: 5,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ["default", "./e2e/support/summary-reporter.ts"],
    projects: [
      // The unit tests beside the sources: pure functions and in-process servers, milliseconds
      // each. One module graph per worker (no isolation): a fresh process and a fresh import of
      // each file would cost more than their tests.
      {
        extends: true,
        test: { name: "unit", include: UNIT_TESTS, pool: "threads", isolate: false },
      },
      // Everything else but the real node: real servers. Each worker process runs its files one
      // after the other with one module graph (no isolation), so that fastify, the NATS and
      // Kubernetes clients and the schemas are imported once per worker. What a file starts it
      // stops in its own afterAll hooks, and e2e/support/test-hooks.ts stops any process it left.
      {
        extends: true,
        test: {
          name: "suite",
          isolate: false,
          include: ["runtime/**/*.test.ts", "operator/**/*.test.ts", "e2e/**/*.test.ts", "examples/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...NODE_TESTS, ...UNIT_TESTS],
        },
      },
      // The real-node files (a real node each, minutes long, mostly waiting on their pods) run
      // beside the suite's files, in the same run, so that their pods use the cores the suite
      // leaves idle. The two run at once, each on a node in a slot of its own (a lock in /run/lock
      // each, its own bridge, Service range and kube-proxy mode); a third waits (e2e/README.md).
      { extends: true, test: { name: "node", include: NODE_TESTS } },
    ],
  },
});
