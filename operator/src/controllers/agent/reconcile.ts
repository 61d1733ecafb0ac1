import type { KubernetesObject, V1Secret } from "@kubernetes/client-node";
import { capabilitiesHash } from "../../../../runtime/src/agent/documents.ts";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { describeIssues } from "../../../../runtime/src/protocol/message.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { isStatus } from "../../kube/client.ts";
import { readyFromDeployment, type ConditionInput } from "../conditions.ts";
import { applyChildren, asObject, deploymentOf, ensureTls, TerminalError, writeStatus, type ReconcileContext } from "../reconciler.ts";
import { childMeta, childNames, type Owner } from "../runtime.ts";
import { agentEndpoint, desiredAgentChildren } from "./desired.ts";

type AgentObject = KubernetesObject & { spec?: unknown; status?: Record<string, unknown> };

/**
 * Level-triggered: read the Agent, make the children match it, report what is observed. The
 * result says when to look again (undefined: only on change).
 */
export async function reconcileAgent(ctx: ReconcileContext, namespace: string, name: string): Promise<{ requeueAfterMs?: number }> {
  const obj = ctx.caches.get<AgentObject>("Agent", namespace, name);
  if (!obj || obj.metadata?.deletionTimestamp) return {}; // children go by garbage collection
  const owner = { kind: "Agent", metadata: obj.metadata as unknown as Owner["metadata"] } as Owner;
  const parsed = Agent.safeParse(obj);
  if (!parsed.success) {
    await writeStatus(ctx, "agents", obj, {}, [{ type: "Ready", status: "False", reason: "InvalidSpec", message: describeIssues(parsed.error) }]);
    return {};
  }
  const agent = { ...parsed.data, metadata: owner.metadata };
  try {
    const signing = await ensureSigningKey(ctx, owner, agent.spec.signing.secretName);
    const tls = await ensureTls(ctx, owner, agent.spec.tls);
    const changed = await applyChildren(ctx, desiredAgentChildren(agent, { settings: ctx.settings, signing, tlsSecret: tls.secretName }));
    if (changed.length) await ctx.kube.event(obj, "Normal", "Applied", `applied ${changed.join(", ")}`);
    const dep = deploymentOf(ctx, owner);
    const ready = readyFromDeployment(dep);
    const conditions: ConditionInput[] = [ready];
    if (changed.length) conditions.push({ type: "Reconciling", status: "True", reason: "ChildrenApplied", message: `applied ${changed.join(", ")}` });
    await writeStatus(
      ctx,
      "agents",
      obj,
      {
        endpoint: agentEndpoint(agent),
        capabilitiesHash: capabilitiesHash(agent),
        signingKey: { keyId: agent.spec.signing.keyId, publicKey: signing.publicKey, secretName: signing.secretName },
        tlsSecretName: tls.secretName,
        replicas: dep?.status?.replicas ?? 0,
        readyReplicas: dep?.status?.readyReplicas ?? 0,
      },
      conditions,
    );
    return ready.status === "True" ? {} : { requeueAfterMs: 30_000 };
  } catch (err) {
    if (err instanceof TerminalError) {
      await writeStatus(ctx, "agents", obj, {}, [{ type: "Ready", status: "False", reason: err.reason, message: err.message }]);
      await ctx.kube.event(obj, "Warning", err.reason, err.message);
      return {};
    }
    throw err;
  }
}

/** The signing key's Secret: created once with a new Ed25519 key, never overwritten. */
async function ensureSigningKey(ctx: ReconcileContext, owner: Owner, secretName: string | undefined): Promise<{ secretName: string; publicKey: string; created: string }> {
  const name = secretName ?? childNames(owner.metadata.name).signingSecret;
  let secret = ctx.caches.get<V1Secret>("Secret", owner.metadata.namespace, name);
  if (!secret) {
    try {
      secret = await ctx.kube.core.readNamespacedSecret({ name, namespace: owner.metadata.namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
  }
  if (!secret) {
    const key = generateSigningKey();
    await ctx.kube.createIfAbsent<V1Secret>({
      apiVersion: "v1",
      kind: "Secret",
      type: "Opaque",
      metadata: childMeta(owner, name),
      stringData: { "signing.key": key.privateKeyPem },
    });
    await ctx.kube.event(asObject(owner), "Normal", "GeneratedSigningKey", `generated an Ed25519 signing key in Secret ${name}; public key ${key.publicKey}`);
    secret = await ctx.kube.core.readNamespacedSecret({ name, namespace: owner.metadata.namespace });
  }
  const pem = secret.data?.["signing.key"] ? Buffer.from(secret.data["signing.key"], "base64").toString() : secret.stringData?.["signing.key"];
  if (!pem) throw new TerminalError("InvalidSigningKey", `Secret ${name} has no signing.key`);
  let publicKey: string;
  try {
    publicKey = rawPublicKey(privateKeyFromPem(pem));
  } catch (err) {
    throw new TerminalError("InvalidSigningKey", `Secret ${name}: ${(err as Error).message}`);
  }
  const created = secret.metadata?.creationTimestamp ? new Date(secret.metadata.creationTimestamp).toISOString().replace(/\.\d{3}Z$/, "Z") : "";
  return { secretName: name, publicKey, created };
}
