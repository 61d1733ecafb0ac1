// The Agent controller's shell: read → parse → signing key and TLS → desired() → apply →
// observe → agentStatus() → write status. Level-triggered: it gets only namespace/name.
import type { V1Deployment, V1Secret } from "@kubernetes/client-node";
import { describeIssues } from "../../../../runtime/src/contract/issues.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl } from "../../../../runtime/src/resources/common.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import { invalidSpecConditions, type Blocker } from "../conditions.ts";
import { earliest, previousFields, reportFailure, writeStatus, type CustomObject, type ReconcileContext } from "../reconciler.ts";
import { certificateDnsNames, childNames, type Owner } from "../runtime.ts";
import { exposedHosts } from "../expose.ts";
import { planExposure, pruneExposure } from "../expose-reconcile.ts";
import { ensureTls } from "../tls.ts";
import { ensureTrust } from "../trust.ts";
import { agentPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { ensureNatsCreds } from "../nats-creds.ts";
import { agentOwner, desiredAgentChildren, type AgentResource } from "./desired.ts";
import { ensureLocalApi, localApiDnsNames } from "./local-api.ts";
import { ensureSigningKey } from "./signing.ts";
import { imageRefusal, secretUsableBy } from "../references.ts";
import { agentStatus } from "./status.ts";

export async function reconcileAgent(ctx: ReconcileContext, namespace: string, name: string): Promise<ReconcileResult> {
  const obj = ctx.caches.get<CustomObject>("Agent", namespace, name);
  if (!obj || obj.metadata?.deletionTimestamp) return {}; // children go by garbage collection
  const parsed = Agent.safeParse(obj);
  if (!parsed.success) {
    const message = describeIssues(parsed.error);
    if (await writeStatus(ctx, "agents", obj, previousFields(obj), invalidSpecConditions(message))) await ctx.kube.event(obj, "Warning", "InvalidSpec", message);
    return {};
  }
  const agent: AgentResource = { ...parsed.data, metadata: obj.metadata as unknown as Owner["metadata"] };
  const owner = agentOwner(agent);
  const claimed = agentIdClaimedBy(ctx, obj, agent.spec.agentId);
  if (claimed) {
    const blocker: Blocker = {
      reason: "DuplicateAgentId",
      message: `spec.agentId ${agent.spec.agentId} is already the id of Agent ${claimed} in this install; nothing is rendered for this Agent while that one exists`,
    };
    const { status, conditions } = agentStatus(agent, { applied: [], deployment: undefined, blocker });
    if (await writeStatus(ctx, "agents", obj, status, conditions)) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    return { requeueAfterMs: 30_000 };
  }
  try {
    const signing = await ensureSigningKey(ctx, obj, owner, agent.spec.signing);
    const expose = agent.spec.expose;
    const localApi = await ensureLocalApi(ctx, obj, owner, agent);
    const dnsNames = certificateDnsNames(owner, defaultBaseUrl(agent.spec.baseUrl, expose), [...localApiDnsNames(owner, agent), ...(agent.spec.tls?.dnsNames ?? []), ...exposedHosts(expose)]);
    const tls = await ensureTls(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls, dnsNames);
    for (const e of tls.events) await ctx.kube.event(obj, e.type, e.reason, e.message);
    const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls?.trust);
    const refused = imageRefusal(agent.spec.image, ctx.settings) ?? (await checkIntroductionSecret(ctx, owner, agent));
    const natsCreds = ctx.natsIssuer ? await ensureNatsCreds(ctx, owner, ctx.natsIssuer, agentPermissions(agent.spec.agentId)) : undefined;
    let applied: string[] = [...signing.applied, ...localApi.applied, ...tls.applied, ...trust.applied, ...(natsCreds?.applied ?? [])];
    const exposure = await planExposure(ctx.kube, namespace, expose);
    // Nothing that mounts a Secret is rendered until that Secret exists and may be used by this Agent.
    const tlsHeld = tls.blocker && ["TLSSecretMissing", "InvalidTLSSecret", "ForeignSecret"].includes(tls.blocker.reason);
    if (!("blocker" in signing) && !localApi.blocker && !refused && !tlsHeld) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, exposure);
      if (pruned.length) await ctx.kube.event(obj, "Normal", "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      const changed = await applyChildren(ctx.kube, ctx.caches, owner, desiredAgentChildren(agent, { settings: ctx.settings, signing, tlsSecret: tls.secretName, exposure }));
      if (changed.length) await ctx.kube.event(obj, "Normal", "Applied", `applied ${changed.join(", ")}`);
      applied = [...applied, ...pruned, ...changed];
    }
    const blocker: Blocker | undefined = "blocker" in signing ? signing.blocker : (localApi.blocker ?? refused ?? tls.blocker ?? trust.blocker ?? exposure.blocker);
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    const { status, conditions } = agentStatus(agent, {
      applied,
      deployment,
      blocker,
      waiting: tls.waiting,
      signing: "blocker" in signing ? undefined : signing,
      tlsSecret: tls.secretName,
    });
    const wrote = await writeStatus(ctx, "agents", obj, status, conditions);
    if (wrote && blocker) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    return { requeueAfterMs: earliest(tls.requeueAfterMs, blocker ? 30_000 : undefined, natsCreds?.requeueAfterMs, "blocker" in signing ? undefined : signing.requeueAfterMs) };
  } catch (err) {
    return await reportFailure(ctx, "agents", obj, err);
  }
}

/** The Secret of spec.inbox.introductionTokens must exist and be made or labelled for this Agent before a pod mounts it. */
async function checkIntroductionSecret(ctx: ReconcileContext, owner: Owner, agent: AgentResource): Promise<Blocker | undefined> {
  const ref = agent.spec.inbox.introductionTokens;
  if (!ref) return undefined;
  const field = "spec.inbox.introductionTokens.secretName";
  const secret = await ctx.kube.read<V1Secret>("v1", "Secret", owner.metadata.namespace, ref.secretName);
  if (!secret) return { reason: "IntroductionSecretMissing", message: `${field}: Secret ${ref.secretName} does not exist in namespace ${owner.metadata.namespace}` };
  return secretUsableBy(secret, owner, field);
}

/**
 * The Agent (namespace/name) that holds `agentId` when it is not this one: the oldest Agent of the
 * install with that id (then by namespace/name) keeps it; any later one is refused.
 */
function agentIdClaimedBy(ctx: ReconcileContext, self: CustomObject, agentId: string): string | undefined {
  const key = (o: CustomObject) => [o.metadata?.creationTimestamp ? new Date(o.metadata.creationTimestamp).getTime() : 0, `${o.metadata?.namespace}/${o.metadata?.name}`] as const;
  const mine = key(self);
  for (const other of ctx.caches.list<CustomObject>("Agent")) {
    if (other === self || other.metadata?.uid === self.metadata?.uid || other.metadata?.deletionTimestamp) continue;
    if ((other as { spec?: { agentId?: unknown } }).spec?.agentId !== agentId) continue;
    const theirs = key(other);
    if (theirs[0] < mine[0] || (theirs[0] === mine[0] && theirs[1] < mine[1])) return theirs[1];
  }
  return undefined;
}
