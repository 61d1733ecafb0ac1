// One Agent per agent id in the install: a second Agent claiming an id another holds is refused
// before anything is made for it (the pass ends; the status and a Warning say why).
import type { V1Secret } from "@kubernetes/client-node";
import { isDidKey } from "../../../../runtime/src/protocol/did-key.ts";
import type { AgentStatus } from "../../crd/status.ts";
import type { AgentResource } from "./desired.ts";
import { activeSigningKey, agentIdClaim } from "./directory.ts";
import { signingKeyIn, signingSecretUse } from "./signing.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import type { AgentContext } from "./context.ts";
import { childNames } from "../../reconcile/names.ts";
import type { Part } from "../../reconcile/part.ts";
import type { Owner } from "../../reconcile/settings.ts";

export const agentIdPart: Part<AgentResource, object, object, AgentContext> = {
  name: "agent-id",
  async ensure(ctx, { obj, owner, resource }) {
    const agentId = resource.spec.agentId;
    const claimed = agentIdClaimedBy(ctx, obj, agentId, await signingKeyOf(ctx, obj, owner, resource));
    if (!claimed) return {};
    return {
      blocked: {
        reason: "DuplicateAgentId",
        message: `spec.agentId ${agentId} is already the id of Agent ${claimed} in this install; nothing is rendered for this Agent while that one exists`,
      },
      holds: true,
      ends: true,
    };
  },
};

/**
 * The public key in the signing Secret this Agent may use, read only for a did:key agent id (whose
 * claim it backs); undefined when there is none yet or it is not usable.
 */
async function signingKeyOf(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  agent: AgentResource,
): Promise<string | undefined> {
  if (!isDidKey(agent.spec.agentId)) return undefined;
  const ns = owner.metadata.namespace;
  const name = agent.spec.signing.secretName ?? childNames(owner.metadata.name).signingSecret;
  const secret =
    ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  if (!secret || typeof signingSecretUse(secret, owner, obj, agent.spec.signing, ctx.trust.marks().key) !== "string")
    return undefined;
  return signingKeyIn(secret.data);
}

/**
 * The Agent (namespace/name) that holds `agentId` when it is not this one: one whose claim the
 * install vouches for (directory.ts agentIdClaim) before one whose claim it does not, so that a
 * tenant claiming another's id never keeps that one from it; then one already running under it,
 * else the oldest Agent of the install with that id (then by namespace/name); any other is
 * refused. `selfKey`: this Agent's signing key, for a did:key id.
 */
function agentIdClaimedBy(
  ctx: AgentContext,
  self: CustomObject,
  agentId: string,
  selfKey: string | undefined,
): string | undefined {
  // An Agent already running under the id keeps it; between two that both do (or neither),
  // the older, then the first by namespace/name. So a newcomer never displaces a running Agent,
  // even one created in the same second.
  // Running: rendered under the id by this process (its status may not be in the cache yet), or
  // reconciled with a status that does not refuse it.
  const holds = (o: CustomObject) =>
    ctx.agentIds?.get(agentId) === o.metadata?.uid ||
    (o.status?.observedGeneration !== undefined &&
      !((o.status?.conditions as { type: string; reason?: string }[] | undefined) ?? []).some(
        (c) => c.type === "Ready" && c.reason === "DuplicateAgentId",
      ));
  const vouched = (o: CustomObject, signingKey: string | undefined) =>
    agentIdClaim(
      agentId,
      { namespace: o.metadata?.namespace ?? "", name: o.metadata?.name ?? "" },
      signingKey,
      ctx.settings,
    ).vouched;
  const key = (o: CustomObject, signingKey: string | undefined) =>
    [
      vouched(o, signingKey) ? 0 : 1,
      holds(o) ? 0 : 1,
      o.metadata?.creationTimestamp ? new Date(o.metadata.creationTimestamp).getTime() : 0,
      `${o.metadata?.namespace}/${o.metadata?.name}`,
    ] as const;
  const before = (a: ReturnType<typeof key>, b: ReturnType<typeof key>) =>
    a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] !== b[2] ? a[2] < b[2] : a[3] < b[3];
  const mine = key(self, selfKey);
  for (const other of ctx.caches.list<CustomObject>("Agent")) {
    if (other === self || other.metadata?.uid === self.metadata?.uid || other.metadata?.deletionTimestamp) continue;
    if ((other as { spec?: { agentId?: unknown } }).spec?.agentId !== agentId) continue;
    const theirs = key(other, activeSigningKey(other.status as AgentStatus | undefined));
    if (before(theirs, mine)) return theirs[3];
  }
  if (self.metadata?.uid) ctx.agentIds?.set(agentId, self.metadata.uid);
  return undefined;
}
