// The runtime's serving certificate (tls.ts): refused names first (references.ts tlsRefusal),
// then the Secret the user names, a cert-manager Certificate, or one the install CA issues.
import { childNames } from "../names.ts";
import { earliest, note, type Part } from "../pipeline.ts";
import { type RequestedNames, tlsRefusal } from "../references.ts";
import { ensureTls } from "../tls.ts";
import { TLS_HOLDS, type RuntimePass, type RuntimeSpec } from "./pass.ts";

/** The names a resource's certificate is asked for. */
export interface TlsNames<P> {
  /** The resource's own Services' names, which it may always have. */
  own(pass: P): string[];
  /** The hosts it asks for by its URL and spec.expose. */
  requested(pass: P): RequestedNames[];
  /** Every name the certificate is to carry. */
  dnsNames(pass: P): string[];
}

/**
 * Ends the pass at a refused spec.tls before anything is made for the resource: nothing is
 * rendered, and the status and a Warning say why (the Agent's way).
 */
export function tlsRefusalGate<R extends RuntimeSpec>(names: TlsNames<RuntimePass<R>>): Part<RuntimePass<R>> {
  return {
    name: "tls-refusal",
    async ensure(ctx, pass) {
      const blocked = refusal(ctx.settings, pass, names);
      return blocked ? { blocked, holds: true, ends: true } : {};
    },
  };
}

/** The certificate; a refused spec.tls gets none and holds the workload (what a gate did not end already). */
export function tlsPart<R extends RuntimeSpec>(names: TlsNames<RuntimePass<R>>): Part<RuntimePass<R>> {
  return {
    name: "tls",
    async ensure(ctx, pass) {
      const { owner, resource, obj, found } = pass;
      const refused = refusal(ctx.settings, pass, names);
      if (refused) {
        found.tlsSecret = childNames(owner.metadata.name).tlsSecret;
        return { blocked: refused, holds: true, requeueAfterMs: 30_000 };
      }
      const tls = await ensureTls(ctx.kube, ctx.caches, ctx.trust, owner, resource.spec.tls, names.dnsNames(pass));
      for (const e of tls.events)
        await (e.type === "Normal"
          ? note(ctx, obj, e.reason, e.message)
          : ctx.kube.event(obj, e.type, e.reason, e.message));
      found.tlsSecret = tls.secretName;
      found.tlsWaiting = tls.waiting;
      return {
        applied: tls.applied,
        ...(tls.blocker ? { blocked: tls.blocker, holds: TLS_HOLDS.includes(tls.blocker.reason) } : {}),
        waiting: tls.waiting,
        requeueAfterMs: earliest(tls.requeueAfterMs, tls.blocker ? 30_000 : undefined),
      };
    },
  };
}

function refusal<R extends RuntimeSpec>(
  settings: Parameters<typeof tlsRefusal>[2],
  pass: RuntimePass<R>,
  names: TlsNames<RuntimePass<R>>,
) {
  return tlsRefusal(
    pass.resource.spec.tls,
    { namespace: pass.owner.metadata.namespace, own: names.own(pass), requested: names.requested(pass) },
    settings,
  );
}
