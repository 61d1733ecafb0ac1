// The Agent controller's shell: read → parse → signing key and TLS → desired() → apply →
// observe → agentStatus() → write status. Level-triggered: it gets only namespace/name.
import type { KubernetesObject, V1Deployment, V1Secret } from "@kubernetes/client-node";
import { isSubset } from "../../kube/subset.ts";
import { describeIssues } from "../../../../runtime/src/contract/issues.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl } from "../../../../runtime/src/resources/common.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import { invalidSpecConditions, type Blocker } from "../conditions.ts";
import {
  earliest,
  note,
  previousFields,
  reconcileResource,
  recordNotes,
  reportFailure,
  writeStatus,
  type CustomObject,
  type ReconcileContext,
} from "../reconciler.ts";
import { AGENT_RUNTIME_ACCOUNT, releaseSharedRuntimeAccess } from "../shared.ts";
import { applyRuntimeIdentity, serviceAccountRefusal } from "../identity.ts";
import { pruneNetworkPolicy } from "../network-policy.ts";
import { certificateDnsNames, childNames, serviceDnsNames, type Owner } from "../runtime.ts";
import { exposedHosts } from "../expose.ts";
import { planExposure, pruneExposure } from "../expose-reconcile.ts";
import { ensureTls } from "../tls.ts";
import { ensureTrust } from "../trust.ts";
import { agentPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { ensureNatsCreds } from "../nats-creds.ts";
import { deleteRuntimeData } from "../runtime-account.ts";
import { agentOwner, desiredAgentChildren, type AgentResource } from "./desired.ts";
import { ensureLocalApi, localApiDnsNames } from "./local-api.ts";
import { ensureHandoffSecret } from "./handoff.ts";
import { ensureSigningKey } from "./signing.ts";
import { activeSigningKey, agentIdClaim, selectedPeers } from "./directory.ts";
import { isDidKey } from "../../../../runtime/src/protocol/did-key.ts";
import { privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { SIGNING_KEY_FILE } from "../../../../runtime/src/contract/signing-keys.ts";
import type { AgentStatus } from "../../crd/status.ts";
import { imageRefusal, requestedHosts, secretUsableBy, tlsRefusal } from "../references.ts";
import { agentStatus } from "./status.ts";
import { podSettingsRefusal, readSecret } from "../pod-policy.ts";
import { errorMessage } from "../../kube/client.ts";
import {
  AGENT_FINALIZER,
  agentKeyOf,
  agentLeftovers,
  deleteAgentJetStream,
  hasFinalizer,
  setFinalizer,
} from "../finalizers.ts";

export function reconcileAgent(shared: ReconcileContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reconcileResource("Agent", shared, namespace, name, (ctx, obj) => reconcilePass(ctx, obj, namespace, name));
}

async function reconcilePass(
  ctx: ReconcileContext,
  obj: CustomObject,
  namespace: string,
  name: string,
): Promise<ReconcileResult> {
  // Children go by garbage collection; JetStream by the finalizer.
  if (obj.metadata?.deletionTimestamp) return finalizeAgent(ctx, obj);
  const parsed = Agent.safeParse(obj);
  if (!parsed.success) {
    const message = describeIssues(parsed.error);
    if (await writeStatus(ctx, "agents", obj, previousFields(obj), invalidSpecConditions(message)))
      await ctx.kube.event(obj, "Warning", "InvalidSpec", message);
    return {};
  }
  const agent: AgentResource = { ...parsed.data, metadata: obj.metadata as unknown as Owner["metadata"] };
  const owner = agentOwner(agent);
  // Refused before anything is made for it: nothing is rendered, and the status and a Warning say why.
  const refuse = async (blocker: Blocker): Promise<ReconcileResult> => {
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    const { status, conditions } = agentStatus(agent, { applied: [], deployment, blocker });
    if (await writeStatus(ctx, "agents", obj, status, conditions))
      await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    return { requeueAfterMs: 30_000 };
  };
  const claimed = agentIdClaimedBy(ctx, obj, agent.spec.agentId, await signingKeyOf(ctx, owner, agent));
  if (claimed) {
    return refuse({
      reason: "DuplicateAgentId",
      message: `spec.agentId ${agent.spec.agentId} is already the id of Agent ${claimed} in this install; nothing is rendered for this Agent while that one exists`,
    });
  }
  const expose = agent.spec.expose;
  // Every name the certificate would carry: the Agent's own Services' names, else one the install allows.
  const tlsRefused = tlsRefusal(
    agent.spec.tls,
    {
      namespace,
      own: [...serviceDnsNames(owner), ...localApiDnsNames(owner, agent)],
      requested: requestedHosts("spec.baseUrl", agent.spec.baseUrl, expose),
    },
    ctx.settings,
  );
  if (tlsRefused) return refuse(tlsRefused);
  try {
    // The agent's streams and buckets go with it unless it keeps them; the finalizer says so.
    if (await setFinalizer(ctx.kube, obj, AGENT_FINALIZER, !agent.spec.retention.keepOnDelete)) return {}; // the update brings the next pass
    const signing = await ensureSigningKey(ctx, obj, owner, agent.spec.signing);
    const localApi = await ensureLocalApi(ctx, obj, owner, agent);
    const handoff = await ensureHandoffSecret(ctx, obj, owner, agent);
    const dnsNames = certificateDnsNames(owner, defaultBaseUrl(agent.spec.baseUrl, expose), [
      ...localApiDnsNames(owner, agent),
      ...(agent.spec.tls?.dnsNames ?? []),
      ...exposedHosts(expose),
    ]);
    const tls = await ensureTls(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls, dnsNames);
    for (const e of tls.events)
      await (e.type === "Normal"
        ? note(ctx, obj, e.reason, e.message)
        : ctx.kube.event(obj, e.type, e.reason, e.message));
    const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls?.trust);
    const refused =
      imageRefusal(agent.spec.image, ctx.settings) ??
      (await checkIntroductionSecret(ctx, owner, agent)) ??
      (await podSettingsRefusal(readSecret(ctx), owner, agent.spec.deployment, ctx.settings)) ??
      (await serviceAccountRefusal(ctx, owner, agent.spec.deployment));
    const natsCreds = ctx.natsIssuer
      ? await ensureNatsCreds(ctx, owner, ctx.natsIssuer, agentPermissions(agent.spec.agentId, agentKeyOf(agent)))
      : undefined;
    let applied: string[] = [
      ...signing.applied,
      ...localApi.applied,
      ...handoff.applied,
      ...tls.applied,
      ...trust.applied,
      ...(natsCreds?.applied ?? []),
    ];
    const exposure = await planExposure(ctx.kube, namespace, expose);
    let queued: Blocker | undefined;
    // Nothing that mounts a Secret is rendered until that Secret exists and may be used by this Agent.
    const tlsHeld =
      tls.blocker && ["TLSSecretMissing", "InvalidTLSSecret", "ForeignSecret"].includes(tls.blocker.reason);
    if (!("blocker" in signing) && !localApi.blocker && !handoff.blocker && !refused && !tlsHeld) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, exposure);
      if (pruned.length) await note(ctx, obj, "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      const unpoliced = await pruneNetworkPolicy(ctx, owner);
      if (unpoliced.length)
        await note(
          ctx,
          obj,
          "Deleted",
          `deleted ${unpoliced.join(", ")}, the install renders no runtime NetworkPolicies`,
        );
      pruned.push(...unpoliced);
      const directory = await directoryPeers(ctx, obj, agent);
      let children = desiredAgentChildren(agent, {
        settings: ctx.settings,
        signing,
        tlsSecret: tls.secretName,
        exposure,
        directory,
      });
      queued = holdRollout(ctx, obj, children);
      if (queued) children = children.filter((c) => c.kind !== "Deployment");
      // The runtime's ServiceAccount, Role and RoleBinding first: the pods run under them.
      const changed = [
        ...(await applyRuntimeIdentity(ctx, owner, agent.spec.deployment)),
        ...(await applyChildren(ctx.kube, ctx.caches, owner, children)),
      ];
      if (changed.length) await note(ctx, obj, "Applied", `applied ${changed.join(", ")}`);
      const legacy = await releaseSharedRuntimeAccess(ctx, "Agent", namespace);
      if (legacy.length)
        await note(
          ctx,
          obj,
          "Deleted",
          `deleted ${legacy.join(", ")}, the namespace's ${AGENT_RUNTIME_ACCOUNT} no runtime runs under any more`,
        );
      applied = [...applied, ...pruned, ...changed, ...legacy];
    }
    const blocker: Blocker | undefined =
      "blocker" in signing
        ? signing.blocker
        : (localApi.blocker ?? handoff.blocker ?? refused ?? tls.blocker ?? trust.blocker ?? exposure.blocker);
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    // Whether the directory may list it under its agent id: it runs either way.
    const claim = agentIdClaim(
      agent.spec.agentId,
      { namespace, name },
      "blocker" in signing ? undefined : signing.publicKey,
      ctx.settings,
    );
    const { status, conditions } = agentStatus(agent, {
      applied,
      deployment,
      blocker,
      waiting: tls.waiting,
      queued,
      signing: "blocker" in signing ? undefined : signing,
      tlsSecret: tls.secretName,
      claim,
    });
    const requeueAfterMs = earliest(
      tls.requeueAfterMs,
      blocker ? 30_000 : undefined,
      natsCreds?.requeueAfterMs,
      queued ? ROLLOUT_RETRY_MS : undefined,
      "blocker" in signing ? undefined : signing.requeueAfterMs,
    );
    // A pass that wrote children leaves the status to the pass their watch events bring, which
    // sees them in the cache: written now it would say only that they were applied, and be
    // replaced at once. Blocked or held passes write theirs now; a later pass is due regardless.
    if (applied.length && !blocker && !queued) return { requeueAfterMs: earliest(requeueAfterMs, STATUS_FOLLOW_UP_MS) };
    await recordNotes(ctx, obj);
    const listedBefore = (
      (obj.status?.conditions as { type: string; status: string; message?: string }[] | undefined) ?? []
    ).find((c) => c.type === "DirectoryListed");
    const wrote = await writeStatus(ctx, "agents", obj, status, conditions);
    if (wrote && blocker) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    if (wrote && !claim.vouched && (listedBefore?.status !== "False" || listedBefore.message !== claim.message))
      await ctx.kube.event(obj, "Warning", "AgentIdNotVouched", claim.message);
    return { requeueAfterMs };
  } catch (err) {
    return await reportFailure(ctx, "agents", obj, err);
  }
}

/** The peers spec.peerSelector selects among the Agents the operator watches (directory.ts). */
async function directoryPeers(
  ctx: ReconcileContext,
  obj: CustomObject,
  agent: AgentResource,
): Promise<AgentResource["spec"]["peers"]> {
  const selector = agent.spec.peerSelector;
  if (!selector) return [];
  const agents = ctx.caches.list<CustomObject>("Agent");
  const labels =
    selector.namespaceSelector && ctx.namespaceLabels
      ? await ctx.namespaceLabels.load(agents.map((a) => a.metadata?.namespace ?? "").filter(Boolean))
      : () => undefined;
  return selectedPeers(obj, selector, agents, labels, ctx.settings);
}

/** When a pass that wrote children and left the status to the next pass looks again at the latest (watch events usually come first). */
const STATUS_FOLLOW_UP_MS = 2_000;

/** How often an Agent whose rollout is queued looks again for a free place. */
const ROLLOUT_RETRY_MS = 5_000;

/**
 * Whether the change of this Agent's Deployment waits for other Agents' rollouts: only a change
 * of the pod template of a Deployment that exists, and only when it does not come from the
 * Agent's own spec (its generation is already observed: a new runtime image, a changed flag).
 */
function holdRollout(ctx: ReconcileContext, obj: CustomObject, children: KubernetesObject[]): Blocker | undefined {
  const gate = ctx.rollouts;
  const want = children.find((c) => c.kind === "Deployment") as V1Deployment | undefined;
  if (!gate || !want) return undefined;
  const { namespace, name } = want.metadata as { namespace: string; name: string };
  const current = ctx.caches.get<V1Deployment>("Deployment", namespace, name);
  if (!current || isSubset(want.spec?.template, current.spec?.template)) return undefined;
  const key = `${obj.metadata!.namespace}/${obj.metadata!.name}`;
  const observed = (obj.status as { observedGeneration?: number } | undefined)?.observedGeneration;
  const admission = gate.admit(key, current, {
    agents: ctx.caches.list("Agent").length,
    forced: observed !== obj.metadata?.generation,
    deploymentOf: (k) => {
      const [ns, n] = k.split("/") as [string, string];
      return ctx.caches.get<V1Deployment>("Deployment", ns, childNames(n).deployment);
    },
  });
  if (admission.ok) return undefined;
  return {
    reason: "RolloutQueued",
    message: `the runtime pods change once fewer than ${admission.max} Agents are rolling (${admission.rolling} now)`,
  };
}

/**
 * An Agent being deleted: delete its JetStream streams (with their consumers) and KV buckets and
 * purge its keys of the shared bucket (all named from its namespace/name, so no other Agent's),
 * unless spec.retention.keepOnDelete; then let it go. While NATS cannot be reached the Agent waits, at most
 * the finalizer timeout of this process's clock; then the finalizer goes anyway, with a Warning
 * Event naming what was left behind.
 */
async function finalizeAgent(ctx: ReconcileContext, obj: CustomObject): Promise<ReconcileResult> {
  if (!hasFinalizer(obj, AGENT_FINALIZER)) return {};
  const ref = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
  const key = agentKeyOf(obj);
  const keep = (obj.spec as { retention?: { keepOnDelete?: unknown } } | undefined)?.retention?.keepOnDelete === true;
  if (!keep) {
    let failure: string | undefined;
    if (!ctx.nats?.isConnected) failure = "the operator is not connected to NATS";
    else {
      try {
        // In the agent's own account: every stream there, then the account itself.
        const deleted = await deleteRuntimeData(ctx, obj, (jsm) => deleteAgentJetStream(jsm, key));
        if (deleted.length) ctx.log.info({ agent: ref, deleted }, "Deleted the agent's JetStream streams and buckets");
      } catch (err) {
        failure = errorMessage(err);
      }
    }
    if (failure) {
      const left = ctx.deletions.left(obj);
      if (left > 0) {
        ctx.log.warn({ agent: ref, err: failure, giveUpInMs: left }, "waiting for NATS to delete the agent's streams");
        return { requeueAfterMs: Math.min(10_000, left) };
      }
      const leftovers = agentLeftovers(key).join(", ");
      await ctx.kube.event(
        obj,
        "Warning",
        "CleanupAbandoned",
        `could not delete the agent's JetStream data for ${Math.round(ctx.deletions.timeoutMs / 1000)}s (${failure}); the Agent goes and these stay: ${leftovers}; delete them by hand`,
      );
      ctx.log.warn(
        { agent: ref, left: leftovers, err: failure },
        "gave up deleting the agent's streams; letting the Agent go",
      );
    }
  }
  await setFinalizer(ctx.kube, obj, AGENT_FINALIZER, false);
  ctx.deletions.forget(obj);
  for (const [id, uid] of ctx.agentIds ?? []) if (uid === obj.metadata?.uid) ctx.agentIds!.delete(id);
  ctx.rollouts?.forget(`${obj.metadata?.namespace}/${obj.metadata?.name}`);
  return {};
}

/** The Secret of spec.inbox.introductionTokens must exist and be made or labelled for this Agent before a pod mounts it. */
async function checkIntroductionSecret(
  ctx: ReconcileContext,
  owner: Owner,
  agent: AgentResource,
): Promise<Blocker | undefined> {
  const ref = agent.spec.inbox.introductionTokens;
  if (!ref) return undefined;
  const field = "spec.inbox.introductionTokens.secretName";
  const secret = await ctx.kube.read<V1Secret>("v1", "Secret", owner.metadata.namespace, ref.secretName);
  if (!secret)
    return {
      reason: "IntroductionSecretMissing",
      message: `${field}: Secret ${ref.secretName} does not exist in namespace ${owner.metadata.namespace}`,
    };
  return secretUsableBy(secret, owner, field);
}

/**
 * The public key in the signing Secret this Agent may use, read only for a did:key agent id (whose
 * claim it backs); undefined when there is none yet or it is not usable.
 */
async function signingKeyOf(ctx: ReconcileContext, owner: Owner, agent: AgentResource): Promise<string | undefined> {
  if (!isDidKey(agent.spec.agentId)) return undefined;
  const ns = owner.metadata.namespace;
  const name = agent.spec.signing.secretName ?? childNames(owner.metadata.name).signingSecret;
  const secret =
    ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  const pem = secret?.data?.[SIGNING_KEY_FILE];
  if (!secret || !pem || secretUsableBy(secret, owner, "spec.signing.secretName")) return undefined;
  try {
    return rawPublicKey(privateKeyFromPem(Buffer.from(pem, "base64").toString()));
  } catch {
    return undefined;
  }
}

/**
 * The Agent (namespace/name) that holds `agentId` when it is not this one: one whose claim the
 * install vouches for (directory.ts agentIdClaim) before one whose claim it does not, so that a
 * tenant claiming another's id never keeps that one from it; then one already running under it,
 * else the oldest Agent of the install with that id (then by namespace/name); any other is
 * refused. `selfKey`: this Agent's signing key, for a did:key id.
 */
function agentIdClaimedBy(
  ctx: ReconcileContext,
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
