// The PodDisruptionBudget of a runtime of more than one replica (spec.disruption): voluntary
// disruptions — a node drain, a cluster upgrade — take down at most spec.disruption.maxUnavailable
// of its pods at once (1 by default), so that a drain never empties an Agent's inbox or a
// Relay. maxUnavailable rather than minAvailable: it keeps allowing one eviction whatever the
// replicas (a scale-up needs no new budget), and with unhealthyPodEvictionPolicy AlwaysAllow a
// pod that is not ready never holds a drain up. One replica gets none (a budget would block
// every drain of its node), and the one made before is deleted, as with enabled: false.
import type { V1PodDisruptionBudget } from "@kubernetes/client-node";
import type { DisruptionSpec } from "../../../../runtime/src/resources/disruption.ts";
import { applyChildren, controlledBy } from "../../kube/apply.ts";
import type { Caches } from "../../kube/caches.ts";
import type { Kube } from "../../kube/client.ts";
import { childMeta, childNames, selectorLabels } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

export function disruptionBudgetName(owner: Owner): string {
  return childNames(owner.metadata.name).deployment;
}

/** The budget for `replicas` pods of the owner's runtime, or none (pure). */
export function disruptionBudget(
  owner: Owner,
  replicas: number,
  disruption: DisruptionSpec | undefined,
): V1PodDisruptionBudget | undefined {
  const spec = disruption ?? { enabled: true, maxUnavailable: 1 };
  if (!spec.enabled || replicas <= 1) return undefined;
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: childMeta(owner, disruptionBudgetName(owner)),
    spec: {
      maxUnavailable: spec.maxUnavailable,
      selector: { matchLabels: selectorLabels(owner) },
      unhealthyPodEvictionPolicy: "AlwaysAllow",
    },
  };
}

/**
 * Apply the owner's budget, or delete the one this owner made when it should have none. Returns
 * what it applied ("PodDisruptionBudget/name") or, for a deletion, the note saying what and why.
 */
export async function ensureDisruptionBudget(
  ctx: { kube: Kube; caches: Caches },
  owner: Owner,
  spec: { replicas: number; disruption?: DisruptionSpec },
): Promise<{ applied: string[]; deleted?: string }> {
  const budget = disruptionBudget(owner, spec.replicas, spec.disruption);
  if (budget) return { applied: await applyChildren(ctx.kube, ctx.caches, owner, [budget]) };
  const name = disruptionBudgetName(owner);
  const live = ctx.caches.get<V1PodDisruptionBudget>("PodDisruptionBudget", owner.metadata.namespace, name);
  if (!live || !controlledBy(live, owner.metadata.uid) || live.metadata?.deletionTimestamp) return { applied: [] };
  await ctx.kube.remove({
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { name, namespace: owner.metadata.namespace },
  });
  const why =
    spec.disruption?.enabled === false ? "spec.disruption.enabled is false" : `spec.replicas is ${spec.replicas}`;
  return { applied: [], deleted: `deleted PodDisruptionBudget/${name}, ${why}` };
}
