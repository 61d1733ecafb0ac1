// The operator's mark on a Secret it generated: an HMAC-SHA256, with a key only the operator
// holds (marks.key of the install CA Secret, trust.ts), of what the Secret holds and for whom.
// Whoever may create Secrets in a namespace can copy the operator's labels, and an owner
// reference once the owner exists, but not the mark: a Secret planted under a name the operator
// generates into is told from the operator's own by it.
import { createHmac, timingSafeEqual } from "node:crypto";
import type { KubernetesObject } from "@kubernetes/client-node";

/** The annotation that carries the mark. */
export const GENERATED_MARK = "ifp.dev/generated-mark";

/** What a signing Secret's mark covers: where it is and the public half of the key it holds. */
export const signingMarkFields = (namespace: string, secretName: string, publicKey: string) => [
  "signing-key",
  namespace,
  secretName,
  publicKey,
];

/** What the mark of a Secret owned by its resource covers: where it is and its owner's uid. */
export const ownedMarkFields = (namespace: string, secretName: string, ownerUid: string) => [
  "owned",
  namespace,
  secretName,
  ownerUid,
];

/** The key the operator marks what it generates with, and when it was made (InstallTrust.marks). */
export interface Marks {
  key: Buffer;
  since: number;
}

/** What holds the marks key: the install's trust, which keeps it in the install CA Secret. */
export interface MarksSource {
  marks(): Marks;
}

/** The annotation that marks Secret `name` of `namespace` as made by the operator for the owner of uid `ownerUid`. */
export function ownedMark(marks: Marks, namespace: string, name: string, ownerUid: string): Record<string, string> {
  return { [GENERATED_MARK]: generatedMark(marks.key, ownedMarkFields(namespace, name, ownerUid)) };
}

/**
 * Whether the operator made `secret` for the owner of uid `ownerUid`: it carries the operator's
 * mark of both, or it was made before the operator had its marks key (by an earlier version,
 * which marked nothing; the API server sets creationTimestamp, nobody can antedate it).
 */
export function markedFor(secret: KubernetesObject, marks: Marks, ownerUid: string): boolean {
  const { namespace = "", name = "", creationTimestamp } = secret.metadata ?? {};
  if (hasGeneratedMark(secret, marks.key, ownedMarkFields(namespace, name, ownerUid))) return true;
  const created = Date.parse(String(creationTimestamp ?? ""));
  return Number.isFinite(created) && created < marks.since;
}

/** The mark of `fields` under `key` (base64url). */
export function generatedMark(key: Buffer, fields: string[]): string {
  const h = createHmac("sha256", key);
  for (const f of fields) h.update(`${Buffer.byteLength(f)}:${f}`);
  return h.digest("base64url");
}

/** Whether `obj` carries the mark of `fields` under `key`. */
export function hasGeneratedMark(obj: KubernetesObject, key: Buffer, fields: string[]): boolean {
  const got = Buffer.from(obj.metadata?.annotations?.[GENERATED_MARK] ?? "");
  const want = Buffer.from(generatedMark(key, fields));
  return got.length === want.length && timingSafeEqual(got, want);
}
