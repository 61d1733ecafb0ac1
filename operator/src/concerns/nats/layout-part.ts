// An Agent on an install of the isolated NATS layout (data-accounts.ts): refused before
// anything is made for it when its spec asks for what the layout does not serve yet (the list in
// runtime/src/contract/shared-layout.ts, the one place this is decided), and its consumers made in
// its tenant's data account once its credential and account are in place.
import {
  ISOLATED_LAYOUT_UNSUPPORTED,
  type UnsupportedFeature,
} from "../../../../runtime/src/contract/shared-layout.ts";
import { parseDuration } from "../../../../runtime/src/resources/fields.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { NatsContext } from "./context.ts";
import type { Part } from "../../reconcile/part.ts";
import { tenantRefusal, type NatsAccountSlots } from "./credential-part.ts";

/** What of the Agent's spec the isolated layout does not serve yet (of `unsupported`); empty elsewhere. */
export function notOnNatsLayout(
  layout: string | undefined,
  spec: Agent["spec"],
  unsupported: readonly UnsupportedFeature[] = ISOLATED_LAYOUT_UNSUPPORTED,
): string[] {
  if (layout !== "isolated") return [];
  return unsupported.filter((u) => u.uses(spec)).map((u) => u.field);
}

/** The gate of `unsupported` (the contract's list; a test gives one of its own while the contract's is empty). */
export const natsLayoutGateOf = (
  unsupported: readonly UnsupportedFeature[],
): Part<Agent, object, object, Pick<ReconcileContext, "settings">> => ({
  name: "nats-layout",
  async ensure(ctx, { resource }) {
    const fields = notOnNatsLayout(ctx.settings.natsLayout, resource.spec, unsupported);
    if (!fields.length) return {};
    return {
      blocked: {
        reason: "NotOnNatsLayout",
        message: `${fields.join(" and ")} ${fields.length > 1 ? "are" : "is"} not available on the isolated NATS layout of this install (docs/scale.md#what-runs-on-the-isolated-layout); nothing is rendered for this Agent while its spec asks for ${fields.length > 1 ? "them" : "it"}`,
      },
      holds: true,
      ends: true,
    };
  },
});

export const natsLayoutGate = natsLayoutGateOf(ISOLATED_LAYOUT_UNSUPPORTED);

/** The Agent's consumers in its tenant's data account; a tenant refused its JetStream holds the workload. */
export const sharedConsumersPart: Part<Agent, NatsAccountSlots, object, Pick<NatsContext, "dataAccounts">> = {
  name: "shared-consumers",
  needs: ["natsAccount"],
  async ensure(ctx, { owner, resource, found }) {
    if (!ctx.dataAccounts || !found.natsAccount) return {};
    const handler = resource.spec.handler;
    try {
      const made = await ctx.dataAccounts.ensureAgent(
        owner.metadata.namespace,
        found.natsAccount,
        handler ? parseDuration(handler.timeout) : undefined,
      );
      return made.length ? { applied: made.map((c) => `consumer ${c}`) } : {};
    } catch (err) {
      return tenantRefusal(err);
    }
  },
};
