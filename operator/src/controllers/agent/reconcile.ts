// The Agent controller's shell: read → parse → signing key and TLS → desired() → apply →
// observe → agentStatus() → write status. Level-triggered: it gets only namespace/name.
import type { V1Deployment, V1Secret } from "@kubernetes/client-node";
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
  try {
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
    if (!("blocker" in signing) && !localApi.blocker) {
      const pruned = await pruneExposure(ctx.kube, ctx.caches, owner, exposure);
      if (pruned.length) await ctx.kube.event(obj, "Normal", "Deleted", `deleted ${pruned.join(", ")}, no longer in spec.expose`);
      const changed = await applyChildren(ctx.kube, ctx.caches, owner, desiredAgentChildren(agent, { settings: ctx.settings, signing, tlsSecret: tls.secretName, exposure }));
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
      signing: "blocker" in signing ? undefined : signing,
      tlsSecret: tls.secretName,
    });
    const wrote = await writeStatus(ctx, "agents", obj, status, conditions);
    if (wrote && blocker) await ctx.kube.event(obj, "Warning", blocker.reason, blocker.message);
    return { requeueAfterMs: earliest(tls.requeueAfterMs, blocker ? 30_000 : undefined, natsCreds?.requeueAfterMs) };
  } catch (err) {
    return await reportFailure(ctx, "agents", obj, err);
  }
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
