// The one log format of the operator and both runtime modes (docs/observability.md#log-lines):
// one JSON object per line with the same fields everywhere — "level" as pino's label ("info"),
// "time" in RFC 3339 (UTC, milliseconds), pid, hostname, "component" (ifp-operator,
// ifp-runtime, …) and msg — so that one query reads the logs of every part of an install.
import pino, { type DestinationStream, type Logger, type LoggerOptions } from "pino";

/** pino options of the format: the level as its label, the time as an RFC 3339 string. */
export const LOG_FORMAT = {
  formatters: { level: (label: string) => ({ level: label }) },
  timestamp: pino.stdTimeFunctions.isoTime,
} satisfies LoggerOptions;

/** A logger of `component` in the format, at `level`, writing to `stream` (stdout by default). */
export function createLogger(
  opts: { level: string; component: string; base?: Record<string, unknown> },
  stream?: DestinationStream,
): Logger {
  const options: LoggerOptions = {
    ...LOG_FORMAT,
    level: opts.level,
    base: { component: opts.component, ...opts.base },
  };
  return stream ? pino(options, stream) : pino(options);
}
