import { ensureTool } from "../tools/tools.ts";

/**
 * Build the tools the tests start (first run only; later runs find them in the cache), once,
 * before any test file runs, so that the build's output is not interleaved with tests.
 */
export default function setup(): void {
  const tools = (process.env.IFP_TEST_TOOLS ?? "nats-server,etcd,kubernetes,helm,kube-score,kwok").split(",").filter(Boolean);
  for (const t of tools) ensureTool(t);
}
