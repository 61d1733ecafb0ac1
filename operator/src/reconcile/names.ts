// Pure: what a resource's children are called and how they say whose they are — deterministic
// child names, labels, owner references, child metadata, the runtime's ports and DNS names.
import type { V1ObjectMeta, V1OwnerReference } from "@kubernetes/client-node";
import { API_VERSION } from "../../../runtime/src/resources/schema.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY, managedByOperator } from "../kube/metadata.ts";
import type { Owner } from "./settings.ts";

export const HTTPS_PORT = 8443;
/** The A2A face's gRPC binding (--a2a-grpc-port), container and Service port `a2a-grpc`, while spec.a2a.enabled. */
export const A2A_GRPC_PORT = 8444;
/** The runtime's plain-HTTP Prometheus listener (--metrics-port), container port `metrics`; never on a Service. */
export const METRICS_PORT = 9090;

/** Deterministic names of a resource's children. */
export function childNames(name: string) {
  return {
    configMap: `${name}-manifest`,
    service: name,
    deployment: name,
    signingSecret: `${name}-signing`,
    tlsSecret: `${name}-tls`,
    certificate: `${name}-tls`,
    trust: `${name}-trust`,
  };
}

export function labels(owner: Owner): Record<string, string> {
  return {
    "app.kubernetes.io/name": "ifp-runtime",
    [INSTANCE_LABEL]: owner.metadata.name,
    [COMPONENT_LABEL]: owner.kind.toLowerCase(),
    "app.kubernetes.io/part-of": "ifp-operator",
    ...MANAGED_BY,
  };
}

export function selectorLabels(owner: Owner): Record<string, string> {
  return { "app.kubernetes.io/name": "ifp-runtime", [INSTANCE_LABEL]: owner.metadata.name };
}

/** The Agent or Relay a managed object belongs to, by its controller reference or its labels. */
export function ownerOf(obj: {
  metadata?: { ownerReferences?: V1OwnerReference[]; labels?: Record<string, string> };
}): { kind: "Agent" | "Relay"; name: string } | undefined {
  const ref = obj.metadata?.ownerReferences?.find((r) => r.controller && r.apiVersion === API_VERSION);
  if (ref && (ref.kind === "Agent" || ref.kind === "Relay")) return { kind: ref.kind, name: ref.name };
  const l = obj.metadata?.labels ?? {};
  const name = l[INSTANCE_LABEL];
  if (name && managedByOperator(obj)) {
    if (l[COMPONENT_LABEL] === "agent") return { kind: "Agent", name };
    if (l[COMPONENT_LABEL] === "relay") return { kind: "Relay", name };
  }
  return undefined;
}

export function ownerReference(owner: Owner): V1OwnerReference {
  return {
    apiVersion: API_VERSION,
    kind: owner.kind,
    name: owner.metadata.name,
    uid: owner.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** Metadata of a child: labels and a controller owner reference (garbage-collected with the owner). */
export function childMeta(owner: Owner, name: string, extra: Partial<V1ObjectMeta> = {}): V1ObjectMeta {
  return {
    name,
    namespace: owner.metadata.namespace,
    labels: labels(owner),
    ownerReferences: [ownerReference(owner)],
    ...extra,
  };
}

/** The in-cluster DNS names of a resource's Service. */
export function serviceDnsNames(owner: Owner): string[] {
  const { name, namespace } = owner.metadata;
  return [name, `${name}.${namespace}`, `${name}.${namespace}.svc`, `${name}.${namespace}.svc.cluster.local`];
}

/** The names a serving certificate must cover: the Service's, the public URL's host, and any extra. */
export function certificateDnsNames(
  owner: Owner,
  publicUrl: string | undefined,
  extra: string[] | undefined,
): string[] {
  const names = [...serviceDnsNames(owner)];
  if (publicUrl) names.push(new URL(publicUrl).hostname);
  names.push(...(extra ?? []));
  return [...new Set(names)];
}
