// Pure: whether the object a reconcile wants is already contained in the one the API server holds,
// and the first path where it is not (for logs), so that an apply changing nothing is skipped.
/**
 * Whether every field of `want` has the same value in `have` (extra fields in `have`, such as
 * server defaults, are ignored; arrays compare element by element and must have equal length).
 * Lets a reconcile skip an apply that would change nothing.
 */
export function isSubset(want: unknown, have: unknown): boolean {
  if (want === null || typeof want !== "object") return want === have || (want === undefined && have === undefined);
  if (Array.isArray(want)) {
    return Array.isArray(have) && have.length === want.length && want.every((w, i) => isSubset(w, have[i]));
  }
  if (have === null || typeof have !== "object" || Array.isArray(have)) return false;
  const h = have as Record<string, unknown>;
  return Object.entries(want as Record<string, unknown>).every(([k, v]) => v === undefined || isSubset(v, h[k]));
}

/** The first path at which `have` lacks what `want` holds (for logs), or undefined. */
export function firstDifference(want: unknown, have: unknown, path = ""): string | undefined {
  if (want === null || typeof want !== "object") return isSubset(want, have) ? undefined : path || "(root)";
  if (Array.isArray(want)) {
    if (!Array.isArray(have) || have.length !== want.length) return `${path} (length)`;
    for (let i = 0; i < want.length; i++) {
      const d = firstDifference(want[i], have[i], `${path}[${i}]`);
      if (d) return d;
    }
    return undefined;
  }
  if (have === null || typeof have !== "object" || Array.isArray(have)) return path || "(root)";
  for (const [k, v] of Object.entries(want as Record<string, unknown>)) {
    if (v === undefined) continue;
    const d = firstDifference(v, (have as Record<string, unknown>)[k], path ? `${path}.${k}` : k);
    if (d) return d;
  }
  return undefined;
}
