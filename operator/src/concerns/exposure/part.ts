// How the runtime is reached from outside the cluster (spec.expose, expose.ts): which kinds are
// rendered and which Gateway API versions are served; what is no longer asked for is deleted.
import type { ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { Part } from "../../reconcile/part.ts";
import { note } from "../../reconcile/pipeline.ts";
import { planExposure, pruneExposure, type ExposurePlan } from "./apply.ts";

/** The spec of a resource that may be exposed. */
type ExposeResource = { spec: { expose?: ExposeSpec } };

/** What the exposure part fills: the plan the workload and the prune part follow. */
export interface ExposureSlots {
  exposure: ExposurePlan;
}

/** The plan: a missing Gateway API blocks (without holding the workload) and is looked at again each minute. */
export function exposurePart<R extends ExposeResource>(): Part<
  R,
  object,
  ExposureSlots,
  Pick<ReconcileContext, "kube">
> {
  return {
    name: "exposure",
    provides: ["exposure"],
    async ensure(ctx, { owner, resource }) {
      const plan = await planExposure(ctx.kube, owner.metadata.namespace, resource.spec.expose);
      return {
        provides: { exposure: plan },
        ...(plan.blocker ? { blocked: plan.blocker, requeueAfterMs: 60_000 } : {}),
      };
    },
  };
}

/** Delete the exposure children spec.expose no longer asks for; `needsUnheld`: not while the workload is held. */
export function exposurePrunePart<R>(opts: {
  needsUnheld: boolean;
}): Part<R, ExposureSlots, object, Pick<ReconcileContext, "kube" | "caches" | "notes">> {
  return {
    name: "exposure-prune",
    needs: ["exposure"],
    needsUnheld: opts.needsUnheld,
    async ensure(ctx, { owner, obj, found }) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, found.exposure);
      if (pruned.length) await note(ctx, obj, "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      return { applied: pruned };
    },
  };
}
