import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Processes and temporary directories of the tests, accounted for:
 *
 * - every process started here keeps a bounded ring buffer of its stdout and stderr, and its
 *   exit (code or signal) is known from its `exit` event, whatever killed it;
 * - `stop()` is bounded: SIGTERM, SIGKILL after a grace period, and a last bounded wait;
 * - when a test fails, `e2e/support/test-hooks.ts` prints the logs of the processes involved
 *   and keeps the test file's temporary directories (printing their paths); they are deleted
 *   when the file passes;
 * - processes and directories are recorded under IFP_TEST_RUN_DIR (set by the global setup),
 *   so that the global teardown kills what a crashed worker left running.
 */

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the process could not be started at all. */
  error?: Error;
}

export interface ManagedProcess {
  readonly name: string;
  readonly proc: ChildProcess;
  readonly pid: number | undefined;
  /** How it ended; undefined while it runs. */
  readonly exit: ExitInfo | undefined;
  /** Resolves when it has ended (never rejects). */
  readonly exited: Promise<ExitInfo>;
  /** The last `logBytes` of its stdout and stderr, interleaved. */
  log(): string;
  /** SIGTERM (or `signal`), SIGKILL after `graceMs`; returns once it ended or after a bounded wait. */
  stop(opts?: { signal?: NodeJS.Signals; graceMs?: number }): Promise<ExitInfo | undefined>;
}

export interface SpawnProcessOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Size of the in-memory log ring buffer (default 64 KiB). */
  logBytes?: number;
  /** Also append all output to this file (kept with the state directory on failure). */
  logFile?: string;
  /** Run in its own process group and signal the whole group (for `npm start` and the like). */
  group?: boolean;
  /** Called with each chunk of output as text. */
  onOutput?: (text: string) => void;
}

/** "exited with code 1", "was killed by SIGKILL", "could not start: …". */
export function describeExit(e: ExitInfo | undefined): string {
  if (!e) return "is still running";
  if (e.error) return `could not start: ${e.error.message}`;
  return e.signal ? `was killed by ${e.signal}` : `exited with code ${e.code}`;
}

/** A ring buffer of text, bounded in bytes (roughly: in UTF-16 code units). */
export class LogRing {
  private chunks: string[] = [];
  private size = 0;
  private readonly limit: number;
  constructor(limit = 64 * 1024) {
    this.limit = limit;
  }
  push(text: string): void {
    this.chunks.push(text);
    this.size += text.length;
    while (this.size > this.limit) {
      const first = this.chunks[0]!;
      const excess = this.size - this.limit;
      if (first.length <= excess) {
        this.chunks.shift();
        this.size -= first.length;
      } else {
        this.chunks[0] = first.slice(excess);
        this.size -= excess;
      }
    }
  }
  text(): string {
    return this.chunks.join("");
  }
}

// ---- The registry of this (worker) process ----

interface LogSource {
  name: string;
  text(): string;
  /** When it stopped producing output (undefined while live). */
  endedAt?: number;
  startedAt: number;
}

/** Live processes, each with how to signal it (its group, when it has one). */
const live = new Map<ManagedProcess, (sig: NodeJS.Signals) => void>();
const sources: LogSource[] = [];
const MAX_ENDED_SOURCES = 30;

function addSource(s: LogSource): void {
  sources.push(s);
  const ended = sources.filter((x) => x.endedAt !== undefined);
  for (const old of ended.slice(0, Math.max(0, ended.length - MAX_ENDED_SOURCES)))
    sources.splice(sources.indexOf(old), 1);
}

/**
 * A log sink for in-process code (e.g. `pino(opts, logSink("relay"))`): kept in a ring buffer
 * and printed with the process logs when a test fails.
 */
export function logSink(
  name: string,
  logBytes = 64 * 1024,
): { write(text: string): boolean; text(): string; end(): void } {
  const ring = new LogRing(logBytes);
  const source: LogSource = { name, text: () => ring.text(), startedAt: Date.now() };
  addSource(source);
  return {
    write(text: string) {
      ring.push(String(text));
      return true;
    },
    text: () => ring.text(),
    end() {
      source.endedAt ??= Date.now();
    },
  };
}

const runDir = () => process.env.IFP_TEST_RUN_DIR;
const record = (kind: string, id: string, data: object) => {
  const dir = runDir();
  if (!dir) return;
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `${kind}-${process.pid}-${id}.json`), JSON.stringify(data));
  } catch {
    // The run directory is a safety net only.
  }
};
const unrecord = (kind: string, id: string) => {
  const dir = runDir();
  if (!dir) return;
  try {
    unlinkSync(join(dir, `${kind}-${process.pid}-${id}.json`));
  } catch {
    // Already gone.
  }
};

/**
 * When process `pid` started (clock ticks since boot, from /proc), to tell it from a later
 * process that reused its id; undefined where there is no /proc or no such process.
 */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The fields after the command name (which may hold spaces) are space-separated; starttime is field 22.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/** Start `bin args` with its output captured; see `ManagedProcess`. */
export function spawnProcess(
  name: string,
  bin: string,
  args: string[],
  opts: SpawnProcessOptions = {},
): ManagedProcess {
  const ring = new LogRing(opts.logBytes);
  const spawnOpts: SpawnOptions = {
    stdio: ["ignore", "pipe", "pipe"],
    env: opts.env ?? process.env,
    cwd: opts.cwd,
    detached: opts.group ?? false,
  };
  const proc = spawn(bin, args, spawnOpts);
  let exit: ExitInfo | undefined;
  let resolveExited!: (e: ExitInfo) => void;
  const exited = new Promise<ExitInfo>((r) => (resolveExited = r));
  const source: LogSource = {
    name: proc.pid ? `${name} (pid ${proc.pid})` : name,
    text: () => ring.text(),
    startedAt: Date.now(),
  };
  const onData = (d: Buffer) => {
    const text = d.toString();
    ring.push(text);
    if (opts.logFile) {
      try {
        appendFileSync(opts.logFile, text);
      } catch {
        // The log file's directory may have been removed; the ring buffer still has it.
      }
    }
    opts.onOutput?.(text);
  };
  proc.stdout!.on("data", onData);
  proc.stderr!.on("data", onData);
  // `exit` can come before the last output: `exited` resolves once the output streams closed
  // too, or 2 s after the exit should a grandchild hold them open.
  const closed = new Promise<void>((r) => proc.once("close", () => r()));
  const ended = (e: ExitInfo) => {
    if (exit) return;
    exit = e;
    live.delete(managed);
    source.endedAt = Date.now();
    if (proc.pid) unrecord("proc", String(proc.pid));
    void Promise.race([closed, new Promise((r) => setTimeout(r, 2_000).unref())]).then(() => {
      ring.push(`\n[${name} ${describeExit(e)}]\n`);
      resolveExited(e);
    });
  };
  proc.once("exit", (code, signal) => ended({ code, signal }));
  // A process that cannot start emits `error` and no `exit`.
  proc.once("error", (error) => {
    if (proc.pid === undefined) ended({ code: null, signal: null, error });
  });

  const signal = (sig: NodeJS.Signals) => {
    if (exit) return;
    try {
      if (opts.group && proc.pid) process.kill(-proc.pid, sig);
      else proc.kill(sig);
    } catch {
      // It ended in between.
    }
  };
  const within = (ms: number) =>
    Promise.race([exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), ms).unref())]);

  const managed: ManagedProcess = {
    name,
    proc,
    get pid() {
      return proc.pid;
    },
    get exit() {
      return exit;
    },
    exited,
    log: () => ring.text(),
    async stop({ signal: first = "SIGTERM", graceMs = 10_000 } = {}) {
      if (exit) return exit;
      signal(first);
      if (await within(graceMs)) return exit;
      ring.push(`\n[${name} did not stop within ${graceMs} ms of ${first}; sending SIGKILL]\n`);
      signal("SIGKILL");
      if (await within(5_000)) return exit;
      ring.push(`\n[${name} still running 5 s after SIGKILL; giving up waiting]\n`);
      return undefined;
    },
  };
  if (proc.pid) {
    live.set(managed, signal);
    addSource(source);
    record("proc", String(proc.pid), {
      pid: proc.pid,
      group: opts.group ?? false,
      bin,
      name,
      start: processStartTime(proc.pid),
    });
  }
  return managed;
}

/**
 * Stop a child process started elsewhere, boundedly: SIGTERM, SIGKILL after `graceMs`, then at
 * most 5 s more. Knows an exited process by its exit code or signal, not by exit code alone.
 */
export async function stopChild(proc: ChildProcess, graceMs = 10_000): Promise<void> {
  const done = () => proc.exitCode !== null || proc.signalCode !== null;
  if (done() || proc.pid === undefined) return;
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  const within = (ms: number) =>
    Promise.race([exited.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), ms).unref())]);
  proc.kill("SIGTERM");
  if (done() || (await within(graceMs))) return;
  proc.kill("SIGKILL");
  await within(5_000);
}

/** The processes started here that still run. */
export function liveProcesses(): ManagedProcess[] {
  return [...live.keys()];
}

/** Stop every process started here that still runs (the end of a test file, the end of a run). */
export async function stopAllProcesses(graceMs = 5_000): Promise<void> {
  await Promise.all([...live.keys()].map((p) => p.stop({ graceMs })));
}

/** Logs of the processes and sinks that were live at or after `since` (ms since the epoch). */
export function logsSince(since = 0, bytesEach = 8 * 1024): string {
  const parts: string[] = [];
  for (const s of sources) {
    if (s.endedAt !== undefined && s.endedAt < since) continue;
    const text = s.text();
    const tail =
      text.length > bytesEach
        ? `[… ${text.length - bytesEach} earlier characters not shown]\n${text.slice(-bytesEach)}`
        : text;
    parts.push(`──── ${s.name}${s.endedAt !== undefined ? " (ended)" : ""} ────\n${tail.trimEnd() || "(no output)"}`);
  }
  return parts.join("\n");
}

// ---- Temporary directories ----

interface TempDir {
  path: string;
  id: string;
}
let deferDeletion = false;
let failureSeen = false;
const pendingDirs: TempDir[] = [];
const ownedDirs = new Map<string, TempDir>();
let dirSeq = 0;

/** A new temporary directory (`mkdtemp` under the OS temp dir), accounted for. */
export function tempDir(prefix: string): string {
  const path = mkdtempSync(join(tmpdir(), prefix));
  const d = { path, id: `${Date.now()}-${dirSeq++}` };
  ownedDirs.set(path, d);
  record("dir", d.id, { path });
  return path;
}

/**
 * Done with a directory from `tempDir` (or any directory the caller owns): deleted now, or, in
 * a test file, at the file's end — kept, with its path printed, when a test of the file failed.
 */
export function releaseDir(path: string): void {
  const d = ownedDirs.get(path) ?? { path, id: "" };
  ownedDirs.delete(path);
  if (deferDeletion) {
    if (!pendingDirs.some((p) => p.path === path)) pendingDirs.push(d);
    return;
  }
  rmSync(path, { recursive: true, force: true });
  if (d.id) unrecord("dir", d.id);
}

/** Called by the test hooks: directories are released at the end of the test file. */
export function deferDirDeletion(): void {
  deferDeletion = true;
}

/** Called by the test hooks when a test failed: this file's directories are kept. */
export function markFailed(): void {
  failureSeen = true;
}

export function failed(): boolean {
  return failureSeen;
}

/**
 * The end of a test file: every directory made or released here is deleted, or kept and
 * listed when `keep`. Returns the kept paths.
 */
export function settleDirs(keep: boolean): string[] {
  const all = [...pendingDirs.splice(0), ...ownedDirs.values()];
  ownedDirs.clear();
  // The next file in this worker (the suite runs its files in one process each) starts afresh.
  failureSeen = false;
  for (const d of all) {
    if (!keep) rmSync(d.path, { recursive: true, force: true });
    if (d.id) unrecord("dir", d.id);
  }
  return keep ? all.map((d) => d.path) : [];
}

// A worker that ends without its hooks (an error, process.exit) still takes its children along.
process.once("exit", () => {
  for (const signal of live.values()) signal("SIGKILL");
});
