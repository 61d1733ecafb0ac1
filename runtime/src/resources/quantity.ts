/**
 * Kubernetes resource quantities ("512Mi", "0.5", "1500m", "1e3", 2), read with the API server's
 * grammar: an optional sign, a decimal number, then a binary suffix (Ki … Ei), a decimal one
 * (n, u, m, k, M … E) or an exponent.
 */

export const BINARY_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL_EXP: Record<string, number> = { n: -9, u: -6, m: -3, "": 0, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const QUANTITY = /^([+-]?)(\d*)(?:\.(\d*))?(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?\d+))?$/;
export const NANO = 10n ** 9n;

export interface Quantity {
  negative: boolean;
  /** The magnitude as a count of nano units, rounded up (the API server's precision). */
  nanos: bigint;
  /** How it was written: with a binary suffix, a decimal one (or none), or an exponent. */
  format: "binary" | "decimal" | "exponent";
}

/** A quantity's value; undefined for what is not a quantity (or an exponent beyond ±64). */
export function parseQuantity(q: string | number): Quantity | undefined {
  const text = typeof q === "number" ? (Number.isInteger(q) ? BigInt(q).toString() : String(q)) : q.trim();
  const m = QUANTITY.exec(text);
  if (!m || (!m[2] && !m[3])) return undefined;
  const [, sign, whole = "", frac = "", bin, dec, exp] = m;
  // value = digits × 10^-frac.length × (1024^k or 10^e); kept as a count of nano units, rounded up.
  let num = BigInt(`${whole}${frac}` || "0");
  let den = 10n ** BigInt(frac.length);
  let format: Quantity["format"] = "decimal";
  if (bin) {
    num *= 1024n ** BigInt(BINARY_SUFFIXES.indexOf(bin));
    format = "binary";
  } else {
    const e = exp !== undefined ? Number(exp) : DECIMAL_EXP[dec ?? ""]!;
    if (exp !== undefined) format = "exponent";
    if (Math.abs(e) > 64) return undefined;
    if (e >= 0) num *= 10n ** BigInt(e);
    else den *= 10n ** BigInt(-e);
  }
  return { negative: sign === "-", nanos: (num * NANO + den - 1n) / den, format };
}
