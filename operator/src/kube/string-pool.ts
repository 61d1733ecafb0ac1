// Pure: one copy of each string many cached objects hold alike. Every Agent's children repeat the
// same label values, image, environment names, volume and mount names, and the install CA's
// certificate (in each trust ConfigMap and each TLS Secret); a string parsed from JSON is a copy
// of its own, so ten thousand Agents hold ten thousand of each.

/**
 * The first of equal strings, kept in a pool of at most `maxChars` characters (strings longer than
 * `maxLength`, such as keys and credentials, which no two objects share, are not pooled). A full
 * pool starts afresh: the objects keep the strings they hold, and the strings shared by the next
 * objects are pooled again, so what the pool holds stays bounded whatever passes through it.
 */
export class StringPool {
  private pool = new Map<string, string>();
  private chars = 0;
  private readonly maxChars: number;
  private readonly maxLength: number;
  constructor(maxChars = 4 * 1024 * 1024, maxLength = 2048) {
    this.maxChars = maxChars;
    this.maxLength = maxLength;
  }

  intern(s: string): string {
    if (s.length > this.maxLength) return s;
    const kept = this.pool.get(s);
    if (kept !== undefined) return kept;
    if (this.chars + s.length > this.maxChars) {
      this.pool = new Map();
      this.chars = 0;
    }
    this.pool.set(s, s);
    this.chars += s.length;
    return s;
  }

  /** Characters held by the pool now. */
  get size(): number {
    return this.chars;
  }

  /** Every string value of `value` (objects and arrays, in place) replaced by its pooled copy. */
  internAll<T>(value: T): T {
    if (typeof value === "string") return this.intern(value) as T;
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) value[i] = this.internAll(value[i]);
    } else if (value !== null && typeof value === "object" && !(value instanceof Date)) {
      const o = value as Record<string, unknown>;
      for (const k of Object.keys(o)) o[k] = this.internAll(o[k]);
    }
    return value;
  }
}
