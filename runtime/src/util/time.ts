// Timestamps in the form the IFP drafts and Kubernetes' metav1.Time use.
/** ISO 8601 / RFC 3339 UTC in whole seconds: the form the IFP drafts and metav1.Time use. */
export function isoSeconds(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}
