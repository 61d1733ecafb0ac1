// The namespace's shared runtime access of an earlier version (legacy-runtime-access.ts),
// deleted once the runtimes run under their own: after the workload is applied.
import { sharedAccountName, releaseLegacyRuntimeAccess } from "./legacy-runtime-access.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { Part } from "../../reconcile/part.ts";
import type { Owner } from "../../reconcile/settings.ts";
import { note } from "../../reconcile/pipeline.ts";

/** A resource of the kind gone: the namespace's shared access goes once no runtime of the kind runs under it (its controller's `gone`). */
export function releaseLegacyAccess(
  kind: Owner["kind"],
): (ctx: Pick<ReconcileContext, "kube" | "caches" | "log">, namespace: string) => Promise<void> {
  return async (ctx, namespace) => {
    const released = await releaseLegacyRuntimeAccess(ctx, kind, namespace);
    if (released.length)
      ctx.log.info(
        { namespace, deleted: released },
        `Deleted the namespace's shared ${kind.toLowerCase()} runtime access of an earlier version (${released.join(", ")}): no runtime runs under it any more`,
      );
  };
}

export function legacyAccessPart<R>(): Part<R, object, object, Pick<ReconcileContext, "kube" | "caches" | "notes">> {
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
