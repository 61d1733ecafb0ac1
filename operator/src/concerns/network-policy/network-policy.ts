// The NetworkPolicy of a runtime's pods (--runtime-network-policies, chart value
// networkPolicy.runtimes.enabled): ingress only to the protocol's TLS port (and the A2A gRPC port of an Agent with spec.a2a) from anywhere (peers,
// relays' clients, ingress controllers, other namespaces' applications), to the metrics port only
// from the namespaces the install names (--metrics-namespaces), to the agent's local API port
// (spec.localApi.service) only from pods of the Agent's own namespace, and to the ports the
// user's sidecars declare from anywhere (the user's own application, which they chose to serve).
// Egress is not restricted. A rule's `from` is `_from` in client-node's types and serializer (the
// cache holds it so too, caches.ts). Pure parts are table-tested in network-policy.test.ts.
import type { V1NetworkPolicy, V1NetworkPolicyIngressRule, V1NetworkPolicyPort } from "@kubernetes/client-node";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { controlledBy } from "../../kube/apply.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import {
  A2A_GRPC_PORT,
  childMeta,
  childNames,
  HTTPS_PORT,
  METRICS_PORT,
  selectorLabels,
} from "../../reconcile/names.ts";
import type { Owner, RuntimeNetworkPolicies } from "../../reconcile/settings.ts";

/** The label the API server gives every namespace: its name. */
export const NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name";

export function networkPolicyName(owner: Owner): string {
  return childNames(owner.metadata.name).deployment;
}

/** The ports the sidecars declare, but none of the runtime's own. */
function sidecarPorts(pod: DeploymentSettings | undefined, runtimePorts: number[]): V1NetworkPolicyPort[] {
  const out: V1NetworkPolicyPort[] = [];
  const seen = new Set<string>();
  for (const c of pod?.sidecars ?? []) {
    for (const p of (c as { ports?: { containerPort?: unknown; protocol?: unknown }[] }).ports ?? []) {
      const port = p.containerPort;
      const protocol = typeof p.protocol === "string" ? p.protocol : "TCP";
      if (typeof port !== "number" || !Number.isInteger(port) || runtimePorts.includes(port)) continue;
      const key = `${protocol}/${port}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ port, protocol });
    }
  }
  return out;
}

/** The runtime pods' NetworkPolicy (pure). `localApiPort`: spec.localApi.service's port, when enabled. */
export function runtimeNetworkPolicy(
  owner: Owner,
  policies: RuntimeNetworkPolicies,
  opts: { localApiPort?: number; a2aGrpc?: boolean; pod?: DeploymentSettings } = {},
): V1NetworkPolicy {
  const ingress: V1NetworkPolicyIngressRule[] = [
    { ports: [{ port: "https", protocol: "TCP" }, ...(opts.a2aGrpc ? [{ port: "a2a-grpc", protocol: "TCP" }] : [])] },
  ];
  const metricsFrom = [...new Set(policies.metricsNamespaces)].sort();
  if (metricsFrom.length) {
    ingress.push({
      _from: [
        {
          namespaceSelector: { matchExpressions: [{ key: NAMESPACE_NAME_LABEL, operator: "In", values: metricsFrom }] },
        },
      ],
      ports: [{ port: "metrics", protocol: "TCP" }],
    });
  }
  // An empty podSelector without a namespaceSelector: every pod of the policy's own namespace.
  if (opts.localApiPort !== undefined)
    ingress.push({ _from: [{ podSelector: {} }], ports: [{ port: "local-api", protocol: "TCP" }] });
  const own = [
    HTTPS_PORT,
    METRICS_PORT,
    ...(opts.localApiPort !== undefined ? [opts.localApiPort] : []),
    ...(opts.a2aGrpc ? [A2A_GRPC_PORT] : []),
  ];
  const sidecars = sidecarPorts(opts.pod, own);
  if (sidecars.length) ingress.push({ ports: sidecars });
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: childMeta(owner, networkPolicyName(owner)),
    spec: { podSelector: { matchLabels: selectorLabels(owner) }, policyTypes: ["Ingress"], ingress },
  };
}

/** The NetworkPolicy as a child when the install renders them, else none. */
export function networkPolicyChildren(
  owner: Owner,
  policies: RuntimeNetworkPolicies | undefined,
  opts: { localApiPort?: number; a2aGrpc?: boolean; pod?: DeploymentSettings } = {},
): V1NetworkPolicy[] {
  return policies ? [runtimeNetworkPolicy(owner, policies, opts)] : [];
}

/**
 * With runtime NetworkPolicies turned off, the one the operator made for this resource is
 * deleted. Returns "NetworkPolicy/name" when one was.
 */
export async function pruneNetworkPolicy(
  ctx: Pick<ReconcileContext, "kube" | "caches" | "settings">,
  owner: Owner,
): Promise<string[]> {
  if (ctx.settings.runtimeNetworkPolicies) return [];
  const name = networkPolicyName(owner);
  const live = ctx.caches.get<V1NetworkPolicy>("NetworkPolicy", owner.metadata.namespace, name);
  if (!live || !controlledBy(live, owner.metadata.uid) || live.metadata?.deletionTimestamp) return [];
  await ctx.kube.remove({
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name, namespace: owner.metadata.namespace },
  });
  return [`NetworkPolicy/${name}`];
}
