// Pure: the bearer tokens of spec.a2a.authentication.bearerTokenSecret, mounted from the Secret
// the Agent names and handed to the runtime as --a2a-token-file (docs/a2a.md). The JSON-RPC and
// HTTP+JSON bindings are served on the runtime's HTTPS port, which the Service exposes already;
// the gRPC binding has a port of its own (A2A_GRPC_PORT), on the container and the Service.
import type { KubernetesObject, V1Deployment, V1Service } from "@kubernetes/client-node";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import { A2A_GRPC_PORT } from "../../reconcile/names.ts";

export const A2A_TOKENS_DIR = "/etc/ifp/a2a";
export const A2A_TOKENS_FILE = `${A2A_TOKENS_DIR}/tokens`;
export const A2A_PEER_TOKENS_DIR = "/etc/ifp/a2a-peers";
export const A2A_PEER_TOKENS_FILE = `${A2A_PEER_TOKENS_DIR}/tokens`;

/**
 * The Deployment with the A2A bearer tokens mounted: those callers may present (while A2A is
 * on) and those the agent presents to A2A agents it sends to (spec.a2a.peerTokenSecret); it is
 * unchanged when spec.a2a names neither.
 */
export function withA2aTokens(deployment: V1Deployment, agent: Pick<Agent, "spec">): V1Deployment {
  return withPeerTokens(withCallerTokens(deployment, agent), agent);
}

function withPeerTokens(deployment: V1Deployment, agent: Pick<Agent, "spec">): V1Deployment {
  const ref = agent.spec.a2a?.peerTokenSecret;
  if (!ref) return deployment;
  const d = structuredClone(deployment);
  const pod = d.spec!.template.spec!;
  const c = pod.containers.find((x) => x.name === "runtime")!;
  c.args = [...(c.args ?? []), `--a2a-peer-token-file=${A2A_PEER_TOKENS_FILE}`];
  c.volumeMounts = [
    ...(c.volumeMounts ?? []),
    { name: "a2a-peer-tokens", mountPath: A2A_PEER_TOKENS_DIR, readOnly: true },
  ];
  pod.volumes = [
    ...(pod.volumes ?? []),
    { name: "a2a-peer-tokens", secret: { secretName: ref.name, items: [{ key: ref.key, path: "tokens" }] } },
  ];
  return d;
}

function withCallerTokens(deployment: V1Deployment, agent: Pick<Agent, "spec">): V1Deployment {
  const a2a = agent.spec.a2a;
  const ref = a2a?.enabled ? a2a.authentication.bearerTokenSecret : undefined;
  if (!ref) return deployment;
  const d = structuredClone(deployment);
  const pod = d.spec!.template.spec!;
  const c = pod.containers.find((x) => x.name === "runtime")!;
  c.args = [...(c.args ?? []), `--a2a-token-file=${A2A_TOKENS_FILE}`];
  c.volumeMounts = [...(c.volumeMounts ?? []), { name: "a2a-tokens", mountPath: A2A_TOKENS_DIR, readOnly: true }];
  // The runtime re-reads the file when the kubelet updates it: a new token needs no restart.
  pod.volumes = [
    ...(pod.volumes ?? []),
    { name: "a2a-tokens", secret: { secretName: ref.name, items: [{ key: ref.key, path: "tokens" }] } },
  ];
  return d;
}

/** The Deployment with the gRPC binding's flag and container port `a2a-grpc` while spec.a2a.enabled. */
export function withA2aGrpc(deployment: V1Deployment, agent: Pick<Agent, "spec">): V1Deployment {
  if (!agent.spec.a2a?.enabled) return deployment;
  const d = structuredClone(deployment);
  const c = d.spec!.template.spec!.containers.find((x) => x.name === "runtime")!;
  c.args = [...(c.args ?? []), `--a2a-grpc-port=${A2A_GRPC_PORT}`];
  c.ports = [...(c.ports ?? []), { name: "a2a-grpc", containerPort: A2A_GRPC_PORT, protocol: "TCP" }];
  return d;
}

/** The runtime's Service among `children` with the port `a2a-grpc` while spec.a2a.enabled (the card names that port). */
export function withA2aGrpcService(children: KubernetesObject[], agent: Pick<Agent, "spec">): KubernetesObject[] {
  if (!agent.spec.a2a?.enabled) return children;
  return children.map((child) => {
    if (child.kind !== "Service") return child;
    const svc = structuredClone(child) as V1Service;
    svc.spec!.ports = [
      ...(svc.spec!.ports ?? []),
      { name: "a2a-grpc", port: A2A_GRPC_PORT, targetPort: "a2a-grpc", protocol: "TCP" },
    ];
    return svc;
  });
}
