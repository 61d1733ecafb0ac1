// The Secrets an Agent's pods mount that the operator generates: its signing (and encryption)
// keys (agent/signing.ts), its local API token (agent/local-api/server.ts), its hand-off secret
// (agent/inbound/handoff.ts). Each holds the workload until it is there and the Agent's own.
import type { AgentContext } from "./context.ts";
import type { AgentResource } from "./desired.ts";
import { ensureHandoffSecret } from "./handoff.ts";
import { ensureLocalApi, localApiChildren } from "./local-api.ts";
import { ensureSigningKey } from "./signing.ts";
import type { Outcome, Part } from "../../reconcile/part.ts";
import type { SigningOutcome } from "./signing.ts";

/** What the signing part fills: the Agent's signing key, once it is usable. */
export interface SigningSlots {
  signing: Exclude<SigningOutcome, { blocker: unknown }>;
}

const secretOutcome = (o: { applied: string[]; blocker?: Outcome["blocked"] }): Outcome<never> =>
  o.blocker ? { applied: o.applied, blocked: o.blocker, holds: true } : { applied: o.applied };

export const signingKeyPart: Part<AgentResource, object, SigningSlots, AgentContext> = {
  name: "signing-key",
  provides: ["signing"],
  async ensure(ctx, { obj, owner, resource }) {
    const signing = await ensureSigningKey(ctx, obj, owner, resource.spec.signing);
    if ("blocker" in signing) return secretOutcome(signing);
    return { applied: signing.applied, requeueAfterMs: signing.requeueAfterMs, provides: { signing } };
  },
};

export const localApiPart: Part<AgentResource, object, object, AgentContext> = {
  name: "local-api",
  desired: (_ctx, { owner, resource }) => localApiChildren(owner, resource),
  ensure: async (ctx, { obj, owner, resource }) => secretOutcome(await ensureLocalApi(ctx, obj, owner, resource)),
};

export const handoffPart: Part<AgentResource, object, object, AgentContext> = {
  name: "handoff",
  ensure: async (ctx, { obj, owner, resource }) => secretOutcome(await ensureHandoffSecret(ctx, obj, owner, resource)),
};
