// The command line of the operator's commands (`ifp-operator`, `prepare-uninstall`,
// `reload-nats`): option tables read with their environment fallbacks, the shared value parsers,
// and the frame of a subcommand. Light on purpose: the NATS pods' reloader loads only this.
import { parseArgs } from "node:util";
import type pino from "pino";
import { createLogger } from "../../../runtime/src/telemetry/log-format.ts";

/** Bad input on the command line: the command prints it with its usage and exits 2. */
export class UsageError extends Error {}

const DURATION = /^(\d+)(ms|s|m|h)$/;

/** A duration flag such as 30s, 5m or 1h, in ms. */
export function duration(text: string, name = "resync"): number {
  const m = DURATION.exec(text);
  if (!m || Number(m[1]) <= 0)
    throw new UsageError(`--${name} takes a duration such as 30s, 5m or 1h, not ${JSON.stringify(text)}`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as "ms" | "s" | "m" | "h"];
}

/** A comma-separated flag, trimmed, empty entries dropped. */
export function list(text: string | undefined): string[] {
  return (text ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

/**
 * The flags of a table (plus -h/--help) read from `args`; str() gives a flag's non-empty value,
 * else its environment variable's. Throws UsageError on bad input.
 */
export function readFlags<T extends Record<string, { type: "string" | "boolean"; env?: string }>>(
  table: T,
  args: string[],
  env: NodeJS.ProcessEnv,
) {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args,
      options: {
        ...Object.fromEntries(Object.entries(table).map(([k, v]) => [k, { type: v.type }])),
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const str = (k: keyof T & string): string | undefined => {
    const v = values[k];
    if (typeof v === "string" && v !== "") return v;
    const name = table[k]!.env;
    return name && env[name] ? env[name] : undefined;
  };
  return { values, str };
}

/**
 * A subcommand: its flags parsed (a usage error exits 2 with the usage), --help printed, else
 * `body` run with a logger of the subcommand's name.
 */
export async function subcommand<T extends { help: boolean; logLevel: string }>(
  name: string,
  usage: string,
  argv: string[],
  parse: (argv: string[]) => T,
  body: (parsed: T, log: pino.Logger) => Promise<void>,
): Promise<void> {
  let parsed: T;
  try {
    parsed = parse(argv);
  } catch (err) {
    process.stderr.write(`ifp-operator ${name}: ${(err as Error).message}\n\n${usage}`);
    process.exitCode = 2;
    return;
  }
  if (parsed.help) {
    process.stdout.write(usage);
    return;
  }
  await body(parsed, createLogger({ level: parsed.logLevel, component: `ifp-operator-${name}` }));
}
