// The operator's marks on what it writes: its one field manager, the recommended labels by
// which the informers select the children it manages, and the content hash of annotations.
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";

export const FIELD_MANAGER = "ifp-operator";
export const MANAGED_BY = { "app.kubernetes.io/managed-by": "ifp-operator" } as const;
export const MANAGED_SELECTOR = "app.kubernetes.io/managed-by=ifp-operator";
export const INSTANCE_LABEL = "app.kubernetes.io/instance";
export const COMPONENT_LABEL = "app.kubernetes.io/component";

/** Whether the object carries the operator's managed-by label. */
export function managedByOperator(obj: { metadata?: { labels?: Record<string, string> } }): boolean {
  return obj.metadata?.labels?.["app.kubernetes.io/managed-by"] === MANAGED_BY["app.kubernetes.io/managed-by"];
}

/** A short SHA-256 of the canonical JSON of `value`: equal for equal content, whatever the key order. */
export function hashOf(value: unknown): string {
  return createHash("sha256")
    .update(canonicalize(value) ?? "")
    .digest("hex")
    .slice(0, 16);
}
