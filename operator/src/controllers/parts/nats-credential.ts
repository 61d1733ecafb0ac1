// The runtime's own NATS credential, when the operator issues them (runtime-nats-credential.ts):
// the Secret `<name>-nats` with the permissions of its kind, in its own account.
import type { NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import type { AccountResource } from "../../nats-account-limits.ts";
import type { ReconcileContext } from "../context.ts";
import type { Part } from "../pipeline.ts";
import { ensureNatsCreds } from "../runtime-nats-credential.ts";
import { tenantRefusal } from "./nats-layout.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

export function natsCredentialPart<R extends RuntimeSpec>(
  permissions: (pass: RuntimePass<R>, account: string, ctx: ReconcileContext) => NatsPermissions,
): Part<RuntimePass<R>> {
  return {
    name: "nats-credential",
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
      pass.found.natsAccount = creds.account;
      return { applied: creds.applied, requeueAfterMs: creds.requeueAfterMs };
    },
  };
}
