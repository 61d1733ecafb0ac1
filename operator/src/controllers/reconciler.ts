import type { KubernetesObject, V1Deployment, V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { selfSignedServing } from "../certs.ts";
import type { Caches, CachedKind } from "../kube/caches.ts";
import { errorMessage, isStatus, type Kube } from "../kube/client.ts";
import { isSubset } from "../kube/subset.ts";
import { mergeConditions, type Condition, type ConditionInput } from "./conditions.ts";
import { childMeta, childNames, serviceDnsNames, type OperatorSettings, type Owner } from "./runtime.ts";

/** What a reconcile needs around it; the controllers are the pure parts plus this shell. */
export interface ReconcileContext {
  kube: Kube;
  caches: Caches;
  settings: OperatorSettings;
  log: Logger;
}

/** A spec that can never succeed: reported as Ready=False InvalidSpec, not retried. */
export class TerminalError extends Error {
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.reason = reason;
  }
}

/** Apply each child unless the cache shows it already has every field we own. */
export async function applyChildren(ctx: ReconcileContext, children: KubernetesObject[]): Promise<string[]> {
  const changed: string[] = [];
  for (const child of children) {
    const live = ctx.caches.get(child.kind as CachedKind, child.metadata!.namespace!, child.metadata!.name!);
    if (live && isSubset(child, live)) continue;
    await ctx.kube.apply(child);
    changed.push(`${child.kind}/${child.metadata!.name}`);
  }
  return changed;
}

/**
 * The serving certificate's Secret: the one the spec names, a cert-manager Certificate's when
 * an issuer is named, or one the operator issues itself (self-signed, created once).
 */
export async function ensureTls(
  ctx: ReconcileContext,
  owner: Owner,
  tls: { secretName?: string; issuerRef?: { name: string; kind: string; group: string }; dnsNames?: string[] } | undefined,
): Promise<{ secretName: string; children: KubernetesObject[] }> {
  const n = childNames(owner.metadata.name);
  const dnsNames = [...serviceDnsNames(owner), ...(tls?.dnsNames ?? [])];
  if (tls?.secretName) {
    try {
      await ctx.kube.core.readNamespacedSecret({ name: tls.secretName, namespace: owner.metadata.namespace });
    } catch (err) {
      if (isStatus(err, 404)) throw new TerminalError("TLSSecretMissing", `spec.tls.secretName ${tls.secretName} does not exist in ${owner.metadata.namespace}`);
      throw err;
    }
    return { secretName: tls.secretName, children: [] };
  }
  if (tls?.issuerRef) {
    const certificate = {
      apiVersion: "cert-manager.io/v1",
      kind: "Certificate",
      metadata: childMeta(owner, n.certificate),
      spec: { secretName: n.tlsSecret, dnsNames, issuerRef: tls.issuerRef, privateKey: { algorithm: "ECDSA", size: 256, rotationPolicy: "Always" } },
    };
    try {
      await ctx.kube.apply(certificate);
    } catch (err) {
      if (isStatus(err, 404)) throw new TerminalError("CertManagerMissing", "spec.tls.issuerRef needs cert-manager, whose Certificate API is not installed");
      throw err;
    }
    return { secretName: n.tlsSecret, children: [] };
  }
  if (!ctx.caches.get<V1Secret>("Secret", owner.metadata.namespace, n.tlsSecret)) {
    const pem = await selfSignedServing(`${owner.metadata.name}.${owner.metadata.namespace}.svc`, dnsNames);
    const created = await ctx.kube.createIfAbsent<V1Secret>({
      apiVersion: "v1",
      kind: "Secret",
      type: "kubernetes.io/tls",
      metadata: childMeta(owner, n.tlsSecret, { annotations: { "ifp.dev/self-signed": "true" } }),
      stringData: { "tls.crt": pem.cert, "tls.key": pem.key, "ca.crt": pem.ca },
    });
    if (created) await ctx.kube.event(asObject(owner), "Normal", "IssuedCertificate", `issued a self-signed serving certificate in Secret ${n.tlsSecret}`);
  }
  return { secretName: n.tlsSecret, children: [] };
}

export function asObject(owner: Owner): KubernetesObject {
  return { apiVersion: "ifp.dev/v1alpha1", kind: owner.kind, metadata: owner.metadata as KubernetesObject["metadata"] };
}

export function deploymentOf(ctx: ReconcileContext, owner: Owner): V1Deployment | undefined {
  return ctx.caches.get<V1Deployment>("Deployment", owner.metadata.namespace, childNames(owner.metadata.name).deployment);
}

/** Write status only when it differs (conditions keep their transition times). */
export async function writeStatus(
  ctx: ReconcileContext,
  plural: string,
  obj: KubernetesObject & { status?: Record<string, unknown> },
  status: Record<string, unknown>,
  conditions: ConditionInput[],
): Promise<boolean> {
  const generation = obj.metadata?.generation ?? 0;
  const previous = (obj.status?.conditions as Condition[] | undefined) ?? [];
  const next = { ...status, observedGeneration: generation, conditions: mergeConditions(previous, conditions, generation, new Date()) };
  if (obj.status && isSubset(next, obj.status) && isSubset(obj.status, next)) return false;
  await ctx.kube.replaceStatus(plural, { ...obj, status: next });
  return true;
}

export function describe(err: unknown): string {
  return errorMessage(err);
}
