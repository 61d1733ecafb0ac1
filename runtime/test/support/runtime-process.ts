// A runtime the tests started as a process, waited for: ready once its /readyz answers 200, failed
// at once (with its log) when it ends first, and stopped when it does not get ready in time.
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { describeExit, type ManagedProcess } from "../../../e2e/support/process.ts";

/**
 * Resolves once `child`'s `${base}/readyz` answers 200 (trusting `ca`). Throws with its log when
 * it ends before that — e.g. EADDRINUSE, a port taken meanwhile (onFreePorts chooses again) — or
 * when it is not ready within `timeoutMs`, having stopped it.
 */
export async function untilReady(child: ManagedProcess, base: string, ca: string, timeoutMs = 30_000): Promise<void> {
  const state = await waitFor(
    `${child.name} to be ready`,
    async () => {
      if (child.exit) return "ended";
      // Bounded: a server of another test that took the port may never answer.
      const res = await httpsRequest(`${base}/readyz`, { ca, timeoutMs: 2_000 }).catch(() => ({ status: 0 }));
      return res.status === 200 && "ready";
    },
    timeoutMs,
    200,
  ).catch(async (err: unknown) => {
    await child.stop();
    throw new Error(`${(err as Error).message}\n${child.log()}`);
  });
  if (state === "ended")
    throw new Error(`${child.name} ${describeExit(child.exit)} before it was ready:\n${child.log()}`);
}
