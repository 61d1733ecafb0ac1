// Pure: Kubernetes resource quantities read with the API server's grammar, and sizes in bytes
// read from and written as quantities.
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

/**
 * Bytes of a size written as a whole number (1048576) or a quantity ("64Mi", "1Gi", "500k",
 * "2M", "1e6"); undefined for what is not a whole, non-negative number of bytes of at most
 * Number.MAX_SAFE_INTEGER ("0.5", "1500m", "-5Mi", "99999999Ei", "64Mo").
 */
export function bytesOf(q: string | number): number | undefined {
  if (typeof q === "number") return Number.isSafeInteger(q) && q >= 0 ? q : undefined;
  const parsed = parseQuantity(q);
  if (!parsed || (parsed.negative && parsed.nanos > 0n) || parsed.nanos % NANO !== 0n) return undefined;
  const bytes = parsed.nanos / NANO;
  return bytes <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(bytes) : undefined;
}

/** A number of bytes the shortest way a quantity writes it exactly: 1048576 → "1Mi", 1500 → "1500". */
export function bytesQuantity(bytes: number): string {
  let n = bytes;
  let i = 0;
  while (n !== 0 && n % 1024 === 0 && i < BINARY_SUFFIXES.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n}${BINARY_SUFFIXES[i]}`;
}
