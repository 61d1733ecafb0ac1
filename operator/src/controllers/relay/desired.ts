import type { KubernetesObject, V1ConfigMap, V1Service } from "@kubernetes/client-node";
import type { StreamConfig } from "@nats-io/jetstream";
import { stringify } from "yaml";
import type { Relay } from "../../../../runtime/src/resources/relay.ts";
import { childMeta, childNames, hashOf, runtimeDeployment, selectorLabels, type OperatorSettings, type Owner } from "../runtime.ts";

export const STREAM_FINALIZER = "ifp.dev/stream";

/** Pure: the children of a Relay. */
export function desiredRelayChildren(relay: Relay & { metadata: Owner["metadata"] }, inputs: { settings: OperatorSettings; tlsSecret: string }): KubernetesObject[] {
  const owner: Owner = { kind: "Relay", metadata: relay.metadata };
  const n = childNames(relay.metadata.name);
  const m = relay.metadata;
  const manifest = stringify({
    apiVersion: relay.apiVersion,
    kind: relay.kind,
    metadata: { name: m.name, namespace: m.namespace, uid: m.uid, creationTimestamp: m.creationTimestamp, annotations: m.annotations ?? {} },
    spec: relay.spec,
  });
  const configMap: V1ConfigMap = { apiVersion: "v1", kind: "ConfigMap", metadata: childMeta(owner, n.configMap), data: { "manifest.yaml": manifest } };
  const service: V1Service = {
    apiVersion: "v1",
    kind: "Service",
    metadata: childMeta(owner, n.service),
    spec: { selector: selectorLabels(owner), ports: [{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }] },
  };
  const deployment = runtimeDeployment({
    owner,
    mode: "relay",
    replicas: relay.spec.replicas,
    image: relay.spec.image,
    settings: inputs.settings,
    configMap: n.configMap,
    tlsSecret: inputs.tlsSecret,
    serviceAccount: "default",
    configHash: hashOf({ manifest, tls: inputs.tlsSecret, settings: inputs.settings }),
  });
  return [configMap, service, deployment];
}

/** What lowering the retention limits would throw away, for a warning before it happens. */
export function retentionLoss(current: Partial<StreamConfig> | undefined, state: { messages: number; bytes: number; first_ts?: string } | undefined, want: Partial<StreamConfig>): string | undefined {
  if (!current || !state) return undefined;
  const lost: string[] = [];
  if (want.max_age && (current.max_age === 0 || (current.max_age ?? 0) > want.max_age)) {
    const oldest = state.first_ts ? Date.now() - Date.parse(state.first_ts) : 0;
    if (oldest * 1e6 > want.max_age) lost.push(`messages older than ${Math.round(want.max_age / 3.6e12)}h are removed`);
    else lost.push(`messages will now be kept at most ${Math.round(want.max_age / 3.6e12)}h instead of ${current.max_age ? `${Math.round(current.max_age / 3.6e12)}h` : "without limit"}`);
  }
  if (want.max_msgs !== undefined && want.max_msgs >= 0 && state.messages > want.max_msgs) lost.push(`${state.messages} messages exceed maxMessages ${want.max_msgs}; new ones are refused until acknowledged`);
  if (want.max_bytes !== undefined && want.max_bytes >= 0 && state.bytes > want.max_bytes) lost.push(`${state.bytes} bytes exceed maxBytes ${want.max_bytes}; new messages are refused until acknowledged`);
  return lost.length ? lost.join("; ") : undefined;
}
