// Pure: how the plugin prints — aligned tables as kubectl prints them, and times relative to now.
import { printable } from "../../../../runtime/src/util/printable.ts";

/** Columns padded to their widest cell, separated by three spaces, as `kubectl get` does. */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows.map((r) => r.map((cell) => printable(cell)))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return all
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!)))
        .join("   ")
        .trimEnd(),
    )
    .join("\n");
}

function span(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** "5m ago" for a past RFC 3339 time. */
export function ago(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? iso : `${span(now - t)} ago`;
}

/** "in 364d" for a future time, "expired 2d ago" for a past one. */
export function until(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  return t >= now ? `in ${span(t - now)}` : `expired ${span(now - t)} ago`;
}
