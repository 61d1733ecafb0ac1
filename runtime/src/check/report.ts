import type { Report } from "./types.ts";

const MARK = { pass: "pass", fail: "FAIL", skip: "skip" } as const;

/** The report for people: one line per check, then the totals. */
export function formatReport(report: Report): string {
  const width = Math.max(...report.results.map((r) => r.id.length), 10);
  const lines = [`ifp check ${report.kind} ${report.target}`, ""];
  for (const r of report.results) lines.push(`${MARK[r.result]}  ${r.id.padEnd(width)}  ${r.reason}  [${r.spec}]`);
  const { pass, fail, skip } = report.summary;
  lines.push("", `${pass} passed, ${fail} failed, ${skip} skipped; ${report.requests} requests`);
  if (fail) lines.push(`failing: ${report.results.filter((r) => r.result === "fail").map((r) => r.id).join(", ")}`);
  return `${lines.join("\n")}\n`;
}

/** 0 when nothing failed, 1 otherwise. */
export const exitCode = (report: Report): number => (report.summary.fail ? 1 : 0);
