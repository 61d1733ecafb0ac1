// The runtime's workload: its identity (ServiceAccount, Role, RoleBinding; identity.ts) first,
// as the pods run under it, then its children in order, the Deployment last (agent/desired.ts,
// relay/desired.ts). Not while an earlier part holds it. An Agent's change of its pod template
// may wait for other Agents' rollouts (rollout.ts).
import type { KubernetesObject, V1Deployment } from "@kubernetes/client-node";
import { applyChildren } from "../../kube/apply.ts";
import { isSubset } from "../../kube/subset.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { WorkloadContext } from "./context.ts";
import { applyRuntimeIdentity, runtimeIdentityChildren } from "./identity.ts";
import { childNames } from "../../reconcile/names.ts";
import type { Part, Pass } from "../../reconcile/part.ts";
import { note } from "../../reconcile/pipeline.ts";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";

/** The spec of a resource with a workload. */
type WorkloadSpec = { spec: { deployment?: DeploymentSettings } };

/** The part of the context the workload part uses; the kind's own callbacks may use more of C. */
type WorkloadPartContext = Pick<ReconcileContext, "kube" | "caches" | "notes"> & WorkloadContext;

export interface WorkloadOptions<R, N, C> {
  /** The slots of earlier parts the children are rendered from. */
  needs: readonly (keyof N & string)[];
  /** Pure: the children from the pass and what the parts found. */
  children(ctx: C, pass: Pass<R, N>, extra: { directory?: unknown }): KubernetesObject[];
  /** What the children need that is read first (an Agent's directory of peers). */
  read?(ctx: C, pass: Pass<R, N>): Promise<{ directory?: unknown }>;
  /** Whether a change of the pod template waits for a free place among the rollouts (Agents). */
  gated?: boolean;
  /** More of the workload applied after the children, each saying what it applied or deleted. */
  extras?: ((ctx: C, pass: Pass<R, N>) => Promise<{ applied: string[]; deleted?: string }>)[];
}

export function workloadPart<R extends WorkloadSpec, N, C extends WorkloadPartContext>(
  opts: WorkloadOptions<R, N, C>,
): Part<R, N, object, C> {
  return {
    name: "workload",
    needs: opts.needs,
    needsUnheld: true,
    desired: (ctx, pass) => [
      ...runtimeIdentityChildren(pass.owner, pass.resource.spec.deployment),
      ...opts.children(ctx, pass, {}),
    ],
    async ensure(ctx, pass) {
      const { owner, obj, resource } = pass;
      let children = opts.children(ctx, pass, (await opts.read?.(ctx, pass)) ?? {});
      const queued = opts.gated ? holdRollout(ctx, obj, children) : undefined;
      if (queued) children = children.filter((c) => c.kind !== "Deployment");
      // The runtime's ServiceAccount, Role and RoleBinding first: the pods run under them.
      const applied = [
        ...(await applyRuntimeIdentity(ctx, owner, resource.spec.deployment)),
        ...(await applyChildren(ctx.kube, ctx.caches, owner, children)),
      ];
      for (const extra of opts.extras ?? []) {
        const done = await extra(ctx, pass);
        if (done.deleted) await note(ctx, obj, "Deleted", done.deleted);
        applied.push(...done.applied);
      }
      if (applied.length) await note(ctx, obj, "Applied", `applied ${applied.join(", ")}`);
      return { applied, ...(queued ? { queued, requeueAfterMs: ROLLOUT_RETRY_MS } : {}) };
    },
  };
}

/** How often an Agent whose rollout is queued looks again for a free place. */
const ROLLOUT_RETRY_MS = 5_000;

/**
 * Whether the change of this Agent's Deployment waits for other Agents' rollouts: only a change
 * of the pod template of a Deployment that exists, and only when it does not come from the
 * Agent's own spec (its generation is already observed: a new runtime image, a changed flag).
 */
function holdRollout(
  ctx: Pick<WorkloadPartContext, "caches" | "rollouts">,
  obj: Pass<unknown>["obj"],
  children: KubernetesObject[],
): Blocker | undefined {
  const gate = ctx.rollouts;
  const want = children.find((c) => c.kind === "Deployment") as V1Deployment | undefined;
  if (!gate || !want) return undefined;
  const { namespace, name } = want.metadata as { namespace: string; name: string };
  const current = ctx.caches.get<V1Deployment>("Deployment", namespace, name);
  if (!current || isSubset(want.spec?.template, current.spec?.template)) return undefined;
  const key = `${obj.metadata!.namespace}/${obj.metadata!.name}`;
  const observed = (obj.status as { observedGeneration?: number } | undefined)?.observedGeneration;
  const admission = gate.admit(key, current, {
    agents: ctx.caches.list("Agent").length,
    forced: observed !== obj.metadata?.generation,
    deploymentOf: (k) => {
      const [ns, n] = k.split("/") as [string, string];
      return ctx.caches.get<V1Deployment>("Deployment", ns, childNames(n).deployment);
    },
  });
  if (admission.ok) return undefined;
  return {
    reason: "RolloutQueued",
    message: `the runtime pods change once fewer than ${admission.max} Agents are rolling (${admission.rolling} now)`,
  };
}
