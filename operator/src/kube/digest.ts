// Pure: a managed ConfigMap's long values held in the cache as their digest. Nothing reads a
// child ConfigMap's data back: a reconcile only compares it with what it wants (subset.ts), so
// the cache keeps a SHA-256 of each value longer than DIGEST_ABOVE characters (an Agent's
// manifest, about 2 KB; a trust bundle) and the wanted ConfigMap is compared in the same form.
import { createHash } from "node:crypto";
import type { KubernetesObject } from "@kubernetes/client-node";

/** Values longer than this are held as their digest. */
export const DIGEST_ABOVE = 128;
/** A digest is far shorter than DIGEST_ABOVE, so digesting twice changes nothing. */
export const digestOf = (value: string): string => `sha256:${createHash("sha256").update(value).digest("base64url")}`;

type WithData = KubernetesObject & { data?: Record<string, string> };

/** The ConfigMap's data with each long value replaced by its digest (a new object; `obj` is left as it is). */
export function digestedData<T extends WithData>(obj: T): T {
  if (obj.kind !== "ConfigMap" || !obj.data || !Object.values(obj.data).some((v) => long(v))) return obj;
  return { ...obj, data: digestValues(obj.data) };
}

/** The same in place, for an object the cache keeps. */
export function digestDataInPlace(obj: WithData): void {
  if (obj.data && Object.values(obj.data).some((v) => long(v))) obj.data = digestValues(obj.data);
}

export const long = (v: unknown): v is string => typeof v === "string" && v.length > DIGEST_ABOVE;

function digestValues(data: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, long(v) ? digestOf(v) : v]));
}
