// The report of an `ifp check` run for people — one line per check, then the totals per level —
// its totals, and the exit code, by which levels' failures fail the run.
import { printable } from "../util/printable.ts";
import { type CheckResult, LEVELS, type Level, type Report, type Tally } from "./types.ts";

const MARK = { pass: "pass", fail: "FAIL", skip: "skip" } as const;

/** Which levels' failures fail the run: MUST always, SHOULD with --strict, profile with --profile. */
export interface Gate {
  strict?: boolean;
  profile?: boolean;
}

export const failsRun = (level: Level, gate: Gate = {}): boolean =>
  level === "MUST" || (level === "SHOULD" && !!gate.strict) || (level === "profile" && !!gate.profile);

/** The levels whose failures fail the run under `gate`, in the order of LEVELS (the JSON report's `gate.fails`). */
export const failingLevels = (gate: Gate = {}): Level[] => LEVELS.filter((level) => failsRun(level, gate));

/** The totals of a run's results: over every check, and per level (every level, with zeros). */
export function summarize(results: readonly CheckResult[]): Report["summary"] {
  const tally = (): Tally => ({ pass: 0, fail: 0, skip: 0 });
  const summary = { ...tally(), levels: Object.fromEntries(LEVELS.map((l) => [l, tally()])) as Record<Level, Tally> };
  for (const r of results) {
    summary[r.result]++;
    summary.levels[r.level][r.result]++;
  }
  return summary;
}

/**
 * The report for people: one line per check, then the totals per level. A reason quotes what the
 * target answered, so each is made printable (one line, no escape sequence or control character).
 */
export function formatReport(report: Report, gate: Gate = {}): string {
  const width = Math.max(...report.results.map((r) => r.id.length), 10);
  const lines = [`ifp check ${report.kind} ${printable(report.target)}`, ""];
  for (const r of report.results)
    lines.push(
      `${MARK[r.result]}  ${r.level.padEnd(7)}  ${r.id.padEnd(width)}  ${printable(r.reason)}  [${r.section}]`,
    );
  lines.push("");
  for (const level of LEVELS) {
    const t = report.summary.levels[level];
    if (t.pass + t.fail + t.skip)
      lines.push(`${level.padEnd(7)}  ${t.pass} passed, ${t.fail} failed, ${t.skip} skipped`);
  }
  const { pass, fail, skip } = report.summary;
  lines.push(`total    ${pass} passed, ${fail} failed, ${skip} skipped; ${report.requests} requests`);
  const failing = report.results.filter((r) => r.result === "fail");
  const fatal = failing.filter((r) => failsRun(r.level, gate));
  if (fatal.length) lines.push(`failing: ${fatal.map((r) => r.id).join(", ")}`);
  const other = failing.filter((r) => !failsRun(r.level, gate));
  if (other.length) lines.push(`missed, not failing the run: ${other.map((r) => `${r.id} (${r.level})`).join(", ")}`);
  return `${lines.join("\n")}\n`;
}

/** 1 when a check of a level that fails the run failed (MUST; SHOULD with --strict; profile with --profile), else 0. */
export const exitCode = (report: Report, gate: Gate = {}): number =>
  report.results.some((r) => r.result === "fail" && failsRun(r.level, gate)) ? 1 : 0;
