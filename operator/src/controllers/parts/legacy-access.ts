// The namespace's shared runtime access of an earlier version (legacy-runtime-access.ts),
// deleted once the runtimes run under their own: after the workload is applied.
import { sharedAccountName, releaseLegacyRuntimeAccess } from "../legacy-runtime-access.ts";
import { note, type Part } from "../pipeline.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

export function legacyAccessPart<R extends RuntimeSpec>(): Part<RuntimePass<R>> {
  return {
    name: "legacy-access",
    needsUnheld: true,
    async ensure(ctx, { owner, obj }) {
      const deleted = await releaseLegacyRuntimeAccess(ctx, owner.kind, owner.metadata.namespace);
      if (deleted.length)
        await note(
          ctx,
          obj,
          "Deleted",
          `deleted ${deleted.join(", ")}, the namespace's ${sharedAccountName(owner.kind)} no runtime runs under any more`,
        );
      return { applied: deleted };
    },
  };
}
