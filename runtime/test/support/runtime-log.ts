// The logs of runtimes started in the test process (startAgent, startRelay): kept in memory,
// bounded, and printed with the process logs when a test fails (e2e/support/test-hooks.ts).
import pino, { type Logger } from "pino";
import { logSink } from "../../../e2e/support/process.ts";
import { LOG_FORMAT } from "../../src/telemetry/log-format.ts";

export interface LogLine {
  level: string;
  time: string;
  msg: string;
  [field: string]: unknown;
}

export interface RuntimeLog {
  logger: Logger;
  /** The lines kept (the last 64 KiB), parsed; a line cut by the bound is left out. */
  lines(): LogLine[];
  /** The runtime has stopped: its log is printed only for tests that ran while it did. */
  end(): void;
}

/**
 * A logger for an in-process runtime named `name`: debug and up are kept (IFP_TEST_LOG=<level>
 * also echoes them to stdout from that level, as a live view while writing a test).
 */
export function runtimeLog(name: string): RuntimeLog {
  const sink = logSink(name);
  const echo = process.env.IFP_TEST_LOG;
  const streams: pino.StreamEntry[] = [{ level: "debug", stream: sink }];
  if (echo && echo !== "silent") streams.push({ level: echo as pino.Level, stream: process.stdout });
  const logger = pino(
    { ...LOG_FORMAT, level: echo === "trace" ? "trace" : "debug", base: { component: name } },
    pino.multistream(streams),
  );
  return {
    logger,
    lines() {
      const out: LogLine[] = [];
      for (const l of sink.text().split("\n")) {
        if (!l.startsWith("{")) continue;
        try {
          out.push(JSON.parse(l) as LogLine);
        } catch {
          // The first line, cut by the ring buffer's bound.
        }
      }
      return out;
    },
    end: () => sink.end(),
  };
}

/**
 * `start(logger)` (startAgent, startRelay) with its log kept as `runtimeLog` says; the log ends
 * when the runtime is closed, or at once when it could not start.
 */
export async function withRuntimeLog<R extends { close(): Promise<void> }>(
  name: string,
  start: (logger: Logger) => Promise<R>,
): Promise<R & { logLines(): LogLine[] }> {
  const log = runtimeLog(name);
  let running: R;
  try {
    running = await start(log.logger);
  } catch (err) {
    log.end();
    throw err;
  }
  const close = running.close.bind(running);
  return Object.assign(running, {
    close: async () => {
      try {
        await close();
      } finally {
        log.end();
      }
    },
    logLines: () => log.lines(),
  });
}
