// Preloaded into a runtime spawned by a test (node --import, which Node also runs in each worker
// thread started from a file): event loop 1 of spec.runtime.workers throws an uncaught error once
// the file IFP_TEST_CRASH_FILE exists, as a defect of the runtime would.
import { existsSync } from "node:fs";
import { isMainThread, workerData } from "node:worker_threads";

const file = process.env.IFP_TEST_CRASH_FILE;
if (!isMainThread && file && (workerData as { index?: number } | undefined)?.index === 1) {
  const timer = setInterval(() => {
    if (!existsSync(file)) return;
    clearInterval(timer);
    throw new Error("event loop 1 crashed (test)");
  }, 20);
  timer.unref();
}
