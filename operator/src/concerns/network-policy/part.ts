// The runtime's NetworkPolicy is rendered with the workload (network-policy.ts); this part
// deletes it when the install renders none.
import { pruneNetworkPolicy } from "./network-policy.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { Part } from "../../reconcile/part.ts";
import { note } from "../../reconcile/pipeline.ts";

export function networkPolicyPrunePart<R>(opts: {
  needsUnheld: boolean;
}): Part<R, object, object, Pick<ReconcileContext, "kube" | "caches" | "settings" | "notes">> {
  return {
    name: "network-policy-prune",
    needsUnheld: opts.needsUnheld,
    async ensure(ctx, { owner, obj }) {
      const deleted = await pruneNetworkPolicy(ctx, owner);
      if (deleted.length)
        await note(
          ctx,
          obj,
          "Deleted",
          `deleted ${deleted.join(", ")}, the install renders no runtime NetworkPolicies`,
        );
      return { applied: deleted };
    },
  };
}
