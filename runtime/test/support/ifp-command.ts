// The ifp command as a person runs it: a process of its own, started from the TypeScript entry.
import { execFile } from "node:child_process";

const BIN = new URL("../../bin/ifp.ts", import.meta.url).pathname;

export interface IfpRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

/**
 * `ifp ARGS…` without blocking this process, which may serve what the command talks to (an
 * agent, a relay); its exit status and output. Killed after `timeoutMs`.
 */
export function ifpCommand(timeoutMs = 30_000): (...args: string[]) => Promise<IfpRun> {
  return (...args) =>
    new Promise((resolve) => {
      execFile(process.execPath, [BIN, ...args], { encoding: "utf8", timeout: timeoutMs }, (err, stdout, stderr) => {
        resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      });
    });
}
