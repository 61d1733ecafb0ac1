// The runtime's NetworkPolicy is rendered with the workload (network-policy.ts); this part
// deletes it when the install renders none.
import { pruneNetworkPolicy } from "../network-policy.ts";
import { note, type Part } from "../pipeline.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

export function networkPolicyPrunePart<R extends RuntimeSpec>(opts: { needsUnheld: boolean }): Part<RuntimePass<R>> {
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
