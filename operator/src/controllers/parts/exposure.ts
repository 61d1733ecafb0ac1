// How the runtime is reached from outside the cluster (spec.expose, expose.ts): which kinds are
// rendered and which Gateway API versions are served; what is no longer asked for is deleted.
import { planExposure, pruneExposure } from "../exposure-apply.ts";
import { note, type Part } from "../pipeline.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

/** The plan: a missing Gateway API blocks (without holding the workload) and is looked at again each minute. */
export function exposurePart<R extends RuntimeSpec>(): Part<RuntimePass<R>> {
  return {
    name: "exposure",
    async ensure(ctx, { owner, resource, found }) {
      const plan = await planExposure(ctx.kube, owner.metadata.namespace, resource.spec.expose);
      found.exposure = plan;
      return plan.blocker ? { blocked: plan.blocker, requeueAfterMs: 60_000 } : {};
    },
  };
}

/** Delete the exposure children spec.expose no longer asks for; `needsUnheld`: not while the workload is held. */
export function exposurePrunePart<R extends RuntimeSpec>(opts: { needsUnheld: boolean }): Part<RuntimePass<R>> {
  return {
    name: "exposure-prune",
    needsUnheld: opts.needsUnheld,
    async ensure(ctx, { owner, obj, found }) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, found.exposure!);
      if (pruned.length) await note(ctx, obj, "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      return { applied: pruned };
    },
  };
}
