// Verdicts: the results of one `ifp check` run as its groups record them — each check once, at
// the level and section the catalog gives it, a later verdict replacing the first in place.
import { CHECKS, type CheckId } from "./catalog.ts";
import { clip } from "./common.ts";
import type { CheckResult, Outcome } from "./types.ts";

/** The longest reason a result keeps (what the target answered is quoted, clipped). */
export const MAX_REASON = 300;

export class Verdicts {
  /** In the order the checks were first recorded. */
  readonly results: CheckResult[] = [];

  /** The verdict of check `id`; one the catalog does not know is a mistake of the kit, thrown. */
  record(id: string, result: Outcome, why: string): void {
    const rule = CHECKS[id as CheckId];
    if (!rule) throw new Error(`unknown check ${id}`);
    const r: CheckResult = { id, section: rule.section, level: rule.level, result, reason: clip(why, MAX_REASON) };
    const i = this.results.findIndex((x) => x.id === id);
    // A later, sharper verdict replaces the first.
    if (i >= 0) this.results[i] = r;
    else this.results.push(r);
  }

  has(id: string): boolean {
    return this.results.some((r) => r.id === id);
  }
}
