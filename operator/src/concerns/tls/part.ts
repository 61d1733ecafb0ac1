// The runtime's serving certificate (tls.ts): refused names first (references.ts tlsRefusal),
// then the Secret the user names, a cert-manager Certificate, or one the install CA issues.
import { childNames } from "../../reconcile/names.ts";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { TlsContext } from "./context.ts";
import type { Part, Pass } from "../../reconcile/part.ts";
import { earliest, note } from "../../reconcile/pipeline.ts";
import { type RequestedNames, tlsRefusal } from "../../reconcile/references.ts";
import { ensureTls, type TlsSpecInput } from "./tls.ts";

/** The spec of a resource with a serving certificate. */
export interface TlsSpec {
  spec: { tls?: TlsSpecInput & { trust?: TrustRef[] } };
}

/** What the certificate part fills: the Secret the pods mount, and a certificate still being issued. */
export interface TlsSlots {
  tlsSecret: string;
  tlsWaiting?: Blocker;
}

/** The reasons of a TLS blocker that hold the workload: the pods would mount a Secret that is not there or not theirs. */
export const TLS_HOLDS = ["TLSSecretMissing", "InvalidTLSSecret", "ForeignSecret"];

/** The part of the context the certificate parts use. */
type CertificateContext = Pick<ReconcileContext, "kube" | "caches" | "settings" | "notes"> & TlsContext;
import type { TrustRef } from "./trust.ts";

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
export function tlsRefusalGate<R extends TlsSpec>(
  names: TlsNames<Pass<R>>,
): Part<R, object, object, CertificateContext> {
  return {
    name: "tls-refusal",
    async ensure(ctx, pass) {
      const blocked = refusal(ctx.settings, pass, names);
      return blocked ? { blocked, holds: true, ends: true } : {};
    },
  };
}

/** The certificate; a refused spec.tls gets none and holds the workload (what a gate did not end already). */
export function tlsPart<R extends TlsSpec>(names: TlsNames<Pass<R>>): Part<R, object, TlsSlots, CertificateContext> {
  return {
    name: "tls",
    provides: ["tlsSecret", "tlsWaiting"],
    async ensure(ctx, pass) {
      const { owner, resource, obj } = pass;
      const refused = refusal(ctx.settings, pass, names);
      if (refused)
        return {
          blocked: refused,
          holds: true,
          requeueAfterMs: 30_000,
          provides: { tlsSecret: childNames(owner.metadata.name).tlsSecret },
        };
      const tls = await ensureTls(ctx.kube, ctx.caches, ctx.trust, owner, resource.spec.tls, names.dnsNames(pass));
      for (const e of tls.events)
        await (e.type === "Normal"
          ? note(ctx, obj, e.reason, e.message)
          : ctx.kube.event(obj, e.type, e.reason, e.message));
      return {
        provides: { tlsSecret: tls.secretName, tlsWaiting: tls.waiting },
        applied: tls.applied,
        ...(tls.blocker ? { blocked: tls.blocker, holds: TLS_HOLDS.includes(tls.blocker.reason) } : {}),
        waiting: tls.waiting,
        requeueAfterMs: earliest(tls.requeueAfterMs, tls.blocker ? 30_000 : undefined),
      };
    },
  };
}

function refusal<R extends TlsSpec>(
  settings: Parameters<typeof tlsRefusal>[2],
  pass: Pass<R>,
  names: TlsNames<Pass<R>>,
) {
  return tlsRefusal(
    pass.resource.spec.tls,
    { namespace: pass.owner.metadata.namespace, own: names.own(pass), requested: names.requested(pass) },
    settings,
  );
}
