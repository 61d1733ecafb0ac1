// The runtime's own NATS credential, when the operator issues them (runtime-credential.ts):
// the Secret `<name>-nats` with the permissions of its kind, in its own account.
import type { NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import type { AccountResource } from "./account-limits.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { NatsContext } from "./context.ts";
import type { Outcome, Part, Pass } from "../../reconcile/part.ts";
import { ensureNatsCreds } from "./runtime-credential.ts";
import { TenantStorageError } from "./data-accounts.ts";

/** What the credential part fills: the runtime's own NATS account, when the operator issues its credential. */
export interface NatsAccountSlots {
  natsAccount?: string;
}

/** The part of the context the credential part uses. */
export type CredentialContext = Pick<ReconcileContext, "kube" | "caches" | "settings"> & NatsContext;

export function natsCredentialPart<R extends { spec: object }>(
  permissions: (pass: Pass<R>, account: string, ctx: CredentialContext) => NatsPermissions,
): Part<R, object, NatsAccountSlots, CredentialContext> {
  return {
    name: "nats-credential",
    provides: ["natsAccount"],
    async ensure(ctx, pass) {
      if (!ctx.natsIssuer) return {};
      let creds: Awaited<ReturnType<typeof ensureNatsCreds>>;
      try {
        creds = await ensureNatsCreds(
          ctx,
          pass.owner,
          ctx.natsIssuer,
          (account) => permissions(pass, account, ctx),
          // The Agent's inbox and durability, the Relay's retention: what its account's limits follow.
          pass.resource.spec as NonNullable<AccountResource["spec"]>,
        );
      } catch (err) {
        // On the isolated layout: the tenant's data account, made first, may be refused its JetStream.
        return tenantRefusal(err);
      }
      return { applied: creds.applied, requeueAfterMs: creds.requeueAfterMs, provides: { natsAccount: creds.account } };
    },
  };
}

/** A tenant refused its JetStream: the Agent is blocked (its workload held) and looked at again; anything else is thrown. */
export function tenantRefusal(err: unknown): Outcome {
  if (err instanceof TenantStorageError)
    return { blocked: { reason: err.reason, message: err.message }, holds: true, requeueAfterMs: 30_000 };
  throw err;
}
