// The Agent controller's shell: read → parse → signing key and TLS → desired() → apply →
// observe → agentStatus() → write status. Level-triggered: it gets only namespace/name.
import type { KubernetesObject, V1Deployment, V1Secret } from "@kubernetes/client-node";
import { isSubset } from "../../kube/subset.ts";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem, generateEncryptionKey } from "../../../../runtime/src/protocol/encryption.ts";
import { describeIssues } from "../../../../runtime/src/contract/issues.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl } from "../../../../runtime/src/resources/common.ts";
import { applyChildren } from "../../kube/apply.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY } from "../../kube/metadata.ts";
import { invalidSpecConditions, isoSeconds, type Blocker } from "../conditions.ts";
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
import { agentStatus } from "./status.ts";
import { errorMessage } from "../../kube/client.ts";
import { AGENT_FINALIZER, agentLeftovers, deleteAgentJetStream, hasFinalizer, sameAgentIdElsewhere, setFinalizer, storedAgentId } from "../finalizers.ts";

export async function reconcileAgent(ctx: ReconcileContext, namespace: string, name: string): Promise<ReconcileResult> {
  const obj = ctx.caches.get<CustomObject>("Agent", namespace, name);
  if (!obj) return {};
  // Children go by garbage collection; JetStream by the finalizer.
  if (obj.metadata?.deletionTimestamp) return finalizeAgent(ctx, obj);
  const parsed = Agent.safeParse(obj);
  if (!parsed.success) {
    const message = describeIssues(parsed.error);
    if (await writeStatus(ctx, "agents", obj, previousFields(obj), invalidSpecConditions(message))) await ctx.kube.event(obj, "Warning", "InvalidSpec", message);
    return {};
  }
  const agent: AgentResource = { ...parsed.data, metadata: obj.metadata as unknown as Owner["metadata"] };
  const owner = agentOwner(agent);
  try {
    // The agent's streams and buckets go with it unless it keeps them; the finalizer says so.
    if (await setFinalizer(ctx.kube, obj, AGENT_FINALIZER, !agent.spec.retention.keepOnDelete)) return {}; // the update brings the next pass
    const signing = await ensureSigningKey(ctx, obj, owner, agent.spec.signing.secretName);
    const expose = agent.spec.expose;
    const localApi = await ensureLocalApi(ctx, obj, owner, agent);
    const dnsNames = certificateDnsNames(owner, defaultBaseUrl(agent.spec.baseUrl, expose), [...localApiDnsNames(owner, agent), ...(agent.spec.tls?.dnsNames ?? []), ...exposedHosts(expose)]);
    const tls = await ensureTls(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls, dnsNames);
    for (const e of tls.events) await ctx.kube.event(obj, e.type, e.reason, e.message);
    const trust = await ensureTrust(ctx.kube, ctx.caches, ctx.trust, owner, agent.spec.tls?.trust);
    const natsCreds = ctx.natsIssuer ? await ensureNatsCreds(ctx, owner, ctx.natsIssuer, agentPermissions(agent.spec.agentId)) : undefined;
    let applied: string[] = [...signing.applied, ...localApi.applied, ...tls.applied, ...trust.applied, ...(natsCreds?.applied ?? [])];
    const exposure = await planExposure(ctx.kube, namespace, expose);
    let queued: Blocker | undefined;
    if (!("blocker" in signing) && !localApi.blocker) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, exposure);
      if (pruned.length) await ctx.kube.event(obj, "Normal", "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      let children = desiredAgentChildren(agent, { settings: ctx.settings, signing, tlsSecret: tls.secretName, exposure });
      queued = holdRollout(ctx, obj, children);
      if (queued) children = children.filter((c) => c.kind !== "Deployment");
      const changed = await applyChildren(ctx.kube, ctx.caches, owner, children);
      if (changed.length) await ctx.kube.event(obj, "Normal", "Applied", `applied ${changed.join(", ")}`);
      applied = [...applied, ...pruned, ...changed];
    }
    const blocker: Blocker | undefined = "blocker" in signing ? signing.blocker : (localApi.blocker ?? tls.blocker ?? trust.blocker ?? exposure.blocker);
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    const { status, conditions } = agentStatus(agent, {
      applied,
      deployment,
      blocker,
      waiting: tls.waiting,
      queued,
      signing: "blocker" in signing ? undefined : signing,
      tlsSecret: tls.secretName,
    });
    const wrote = await writeStatus(ctx, "agents", obj, status, conditions);
    if (wrote && blocker) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    return { requeueAfterMs: earliest(tls.requeueAfterMs, blocker ? 30_000 : undefined, natsCreds?.requeueAfterMs, queued ? ROLLOUT_RETRY_MS : undefined) };
  } catch (err) {
    return await reportFailure(ctx, "agents", obj, err);
  }
}

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
  return { reason: "RolloutQueued", message: `the runtime pods change once fewer than ${admission.max} Agents are rolling (${admission.rolling} now)` };
}

/**
 * An Agent being deleted: delete its JetStream streams (with their consumers) and KV buckets and
 * purge its keys of the shared bucket, unless spec.retention.keepOnDelete or another Agent runs
 * under the same agent id; then let it go. While NATS cannot be reached the Agent waits, at most
 * the finalizer timeout of this process's clock; then the finalizer goes anyway, with a Warning
 * Event naming what was left behind.
 */
async function finalizeAgent(ctx: ReconcileContext, obj: CustomObject): Promise<ReconcileResult> {
  if (!hasFinalizer(obj, AGENT_FINALIZER)) return {};
  const ref = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
  const agentId = storedAgentId(obj);
  const keep = (obj.spec as { retention?: { keepOnDelete?: unknown } } | undefined)?.retention?.keepOnDelete === true;
  const sharing = agentId ? sameAgentIdElsewhere(ctx.caches, obj, agentId) : undefined;
  if (agentId && !keep && sharing) {
    await ctx.kube.event(obj, "Normal", "JetStreamKept", `agent id ${agentId} is also run by ${sharing.metadata?.namespace}/${sharing.metadata?.name}; its streams and buckets stay`);
  } else if (agentId && !keep) {
    let failure: string | undefined;
    if (!ctx.nats?.isConnected) failure = "the operator is not connected to NATS";
    else {
      try {
        const deleted = await deleteAgentJetStream(ctx.nats.jsm, agentId);
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
      const leftovers = agentLeftovers(agentId).join(", ");
      await ctx.kube.event(obj, "Warning", "CleanupAbandoned", `could not delete the agent's JetStream data for ${Math.round(ctx.deletions.timeoutMs / 1000)}s (${failure}); the Agent goes and these stay: ${leftovers}; delete them by hand`);
      ctx.log.warn({ agent: ref, left: leftovers, err: failure }, "gave up deleting the agent's streams; letting the Agent go");
    }
  }
  await setFinalizer(ctx.kube, obj, AGENT_FINALIZER, false);
  ctx.deletions.forget(obj);
  ctx.rollouts?.forget(`${obj.metadata?.namespace}/${obj.metadata?.name}`);
  return {};
}

type SigningOutcome =
  | { secretName: string; publicKey: string; created: string; encryption?: { keyId: string; publicKey: string }; applied: string[] }
  | { blocker: Blocker; applied: string[] };

/**
 * The signing key's Secret: generated once (Ed25519, PKCS#8 PEM under signing.key) and never
 * overwritten. It has no owner reference: the agent's identity outlives a deleted Agent, and an
 * Agent created again under the same name signs with the same key. A Secret the user made
 * under that name is used as it is.
 *
 * The same Secret holds the X25519 encryption key under encryption.key (docs/encryption.md),
 * generated with the signing key. A Secret the operator made before encryption keys existed
 * gets one added (never replaced); a Secret the user made is left alone, and without
 * encryption.key the agent has no encryption key (status.encryptionKey is absent).
 */
async function ensureSigningKey(ctx: ReconcileContext, obj: CustomObject, owner: Owner, secretName: string | undefined): Promise<SigningOutcome> {
  const ns = owner.metadata.namespace;
  const name = secretName ?? childNames(owner.metadata.name).signingSecret;
  const applied: string[] = [];
  let secret = ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  if (!secret) {
    const key = generateSigningKey();
    const created = await ctx.kube.createIfAbsent<V1Secret>({
      apiVersion: "v1",
      kind: "Secret",
      type: "Opaque",
      metadata: {
        name,
        namespace: ns,
        labels: { ...MANAGED_BY, [INSTANCE_LABEL]: owner.metadata.name, [COMPONENT_LABEL]: "agent", "app.kubernetes.io/part-of": "ifp-operator" },
        annotations: { "ifp.dev/public-key": key.publicKey },
      },
      data: {
        "signing.key": Buffer.from(key.privateKeyPem).toString("base64"),
        "encryption.key": Buffer.from(generateEncryptionKey().privateKeyPem).toString("base64"),
      },
    });
    if (created) {
      applied.push(`Secret/${name}`);
      await ctx.kube.event(obj, "Normal", "GeneratedSigningKey", `generated an Ed25519 signing key into Secret ${name}; public key ${key.publicKey}`);
    }
    secret = created ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
    if (!secret) throw new Error(`Secret ${name} vanished right after it was created`);
  }
  const b64 = secret.data?.["signing.key"];
  if (!b64) return { blocker: { reason: "InvalidSigningKey", message: `Secret ${name} has no signing.key` }, applied };
  let publicKey: string;
  try {
    publicKey = rawPublicKey(privateKeyFromPem(Buffer.from(b64, "base64").toString()));
  } catch (err) {
    return { blocker: { reason: "InvalidSigningKey", message: `Secret ${name}: ${(err as Error).message}` }, applied };
  }
  const ts = secret.metadata?.creationTimestamp;
  const encryption = await ensureEncryptionKey(ctx, obj, secret, name, applied);
  return { secretName: name, publicKey, created: ts ? isoSeconds(new Date(ts)) : "", ...(encryption ? { encryption } : {}), applied };
}

/** The encryption key of the signing Secret: added once to a Secret the operator made, never replaced; undefined when there is none. */
async function ensureEncryptionKey(ctx: ReconcileContext, obj: CustomObject, secret: V1Secret, name: string, applied: string[]): Promise<{ keyId: string; publicKey: string } | undefined> {
  let pem = secret.data?.["encryption.key"];
  const ours = secret.metadata?.labels?.["app.kubernetes.io/managed-by"] === MANAGED_BY["app.kubernetes.io/managed-by"];
  if (!pem && ours) {
    const added = Buffer.from(generateEncryptionKey().privateKeyPem).toString("base64");
    try {
      // Optimistic concurrency (resourceVersion): a Secret changed meanwhile is looked at again on the next reconcile.
      await ctx.kube.replace<V1Secret>({ ...secret, apiVersion: "v1", kind: "Secret", data: { ...secret.data, "encryption.key": added } });
      pem = added;
      applied.push(`Secret/${name}`);
      await ctx.kube.event(obj, "Normal", "GeneratedEncryptionKey", `added an X25519 encryption key to Secret ${name}`);
    } catch (err) {
      ctx.log.warn({ secret: name, err: (err as Error).message }, "could not add the encryption key; trying again on the next reconcile");
      return undefined;
    }
  }
  if (!pem) return undefined;
  try {
    const k = encryptionKeyFromPem(Buffer.from(pem, "base64").toString());
    return { keyId: k.keyId, publicKey: k.publicKey };
  } catch (err) {
    await ctx.kube.event(obj, "Warning", "InvalidEncryptionKey", `Secret ${name}: encryption.key is not usable (${(err as Error).message}); the agent runs without an encryption key`);
    return undefined;
  }
}
