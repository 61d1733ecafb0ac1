// The runtime's trust bundle: the install's CAs and those spec.tls.trust adds (trust.ts).
import type { Part } from "../pipeline.ts";
import { ensureTrust } from "../trust.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

export function trustPart<R extends RuntimeSpec>(): Part<RuntimePass<R>> {
  return {
    name: "trust",
    async ensure(ctx, { owner, resource }) {
      const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, resource.spec.tls?.trust);
      return { applied: trust.applied, ...(trust.blocker ? { blocked: trust.blocker, requeueAfterMs: 30_000 } : {}) };
    },
  };
}
