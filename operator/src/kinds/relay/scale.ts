// Pure: the fields of a resource's status the scale subresource reads (kubectl scale, a
// HorizontalPodAutoscaler): status.replicas and status.selector, from the runtime's Deployment.

export interface ScaleStatus {
  /** Runtime pods that exist (statusReplicasPath .status.replicas). */
  replicas: number;
  /** Runtime pods that are ready. */
  readyReplicas: number;
  /** The label selector of the runtime's pods, as a string (labelSelectorPath .status.selector). */
  selector: string;
}

/** A label selector as the scale subresource reads it: key=value pairs joined by commas, keys sorted. */
export function selectorString(labels: Record<string, string>): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(",");
}

/**
 * The scale fields from the labels the runtime's pods are selected by and its Deployment as last
 * read (absent before it exists: no pods).
 */
export function scaleStatus(
  selectorLabels: Record<string, string>,
  deployment?: { status?: { replicas?: number; readyReplicas?: number } },
): ScaleStatus {
  return {
    replicas: deployment?.status?.replicas ?? 0,
    readyReplicas: deployment?.status?.readyReplicas ?? 0,
    selector: selectorString(selectorLabels),
  };
}
