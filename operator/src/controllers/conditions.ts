/** A status condition in the Kubernetes API conventions. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration: number;
  lastTransitionTime: string;
}

export type ConditionInput = Omit<Condition, "lastTransitionTime" | "observedGeneration">;

/**
 * The new conditions, keeping each one's lastTransitionTime unless its status flipped; types
 * not given again are dropped.
 */
export function mergeConditions(previous: Condition[] | undefined, next: ConditionInput[], generation: number, now: Date): Condition[] {
  return next.map((c) => {
    const old = previous?.find((p) => p.type === c.type);
    return {
      ...c,
      observedGeneration: generation,
      lastTransitionTime: old && old.status === c.status ? old.lastTransitionTime : now.toISOString().replace(/\.\d{3}Z$/, "Z"),
    };
  });
}

export function readyFromDeployment(dep: { spec?: { replicas?: number }; status?: { readyReplicas?: number; observedGeneration?: number; updatedReplicas?: number }; metadata?: { generation?: number } } | undefined): ConditionInput {
  if (!dep) return { type: "Ready", status: "False", reason: "DeploymentMissing", message: "the runtime Deployment does not exist yet" };
  const want = dep.spec?.replicas ?? 1;
  const ready = dep.status?.readyReplicas ?? 0;
  const current = (dep.status?.observedGeneration ?? 0) >= (dep.metadata?.generation ?? 0);
  if (want === 0) return { type: "Ready", status: "True", reason: "ScaledToZero", message: "spec.replicas is 0" };
  if (current && ready >= want && (dep.status?.updatedReplicas ?? ready) >= want) {
    return { type: "Ready", status: "True", reason: "RuntimeReady", message: `${ready}/${want} runtime replicas ready` };
  }
  return { type: "Ready", status: "False", reason: "RuntimeNotReady", message: `${ready}/${want} runtime replicas ready` };
}
