// The runtime's trust bundle: the install's CAs and those spec.tls.trust adds (trust.ts).
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { TlsContext } from "./context.ts";
import type { Part } from "../../reconcile/part.ts";
import { ensureTrust, type TrustRef } from "./trust.ts";

export function trustPart<R extends { spec: { tls?: { trust?: TrustRef[] } } }>(): Part<
  R,
  object,
  object,
  Pick<ReconcileContext, "kube" | "caches"> & TlsContext
> {
  return {
    name: "trust",
    async ensure(ctx, { owner, resource }) {
      const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, resource.spec.tls?.trust);
      return { applied: trust.applied, ...(trust.blocker ? { blocked: trust.blocker, requeueAfterMs: 30_000 } : {}) };
    },
  };
}
