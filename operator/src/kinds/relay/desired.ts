// Pure: the children of a Relay and what lowering its retention would cost. Table-tested in
// desired.test.ts. The stream's own config comes from runtime/src/contract/relay-stream.ts,
// which the relay runtime uses too.
import type { KubernetesObject, V1ConfigMap } from "@kubernetes/client-node";
import type { StreamConfig, StreamState } from "@nats-io/jetstream";
import type { Relay } from "../../../../runtime/src/resources/relay.ts";
import { hashOf } from "../../kube/metadata.ts";
import { exposureChildren, type ExposurePlanInput } from "../../concerns/exposure/expose.ts";
import { childMeta, childNames } from "../../reconcile/names.ts";
import { renderManifest, runtimeDeployment } from "../../concerns/workload/workload.ts";
import type { OperatorSettings, Owner } from "../../reconcile/settings.ts";
import { networkPolicyChildren } from "../../concerns/network-policy/network-policy.ts";

export type RelayResource = Relay & { metadata: Owner["metadata"] };

export function relayOwner(relay: { metadata: Owner["metadata"] }): Owner {
  return { kind: "Relay", metadata: relay.metadata };
}

/** The children of a Relay, in the order they are applied (the Deployment last). */
export function desiredRelayChildren(
  relay: RelayResource,
  inputs: { settings: OperatorSettings; tlsSecret: string; exposure?: ExposurePlanInput },
): KubernetesObject[] {
  const owner = relayOwner(relay);
  const n = childNames(relay.metadata.name);
  const manifest = renderManifest(relay);
  const configMap: V1ConfigMap = {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: childMeta(owner, n.configMap),
    data: { "manifest.yaml": manifest },
  };
  const deployment = runtimeDeployment({
    owner,
    mode: "relay",
    replicas: relay.spec.replicas,
    image: relay.spec.image,
    pod: relay.spec.deployment,
    settings: inputs.settings,
    tlsSecret: inputs.tlsSecret,
    configHash: hashOf({ manifest }),
    trustedProxies: relay.spec.expose?.trustedProxies,
    logLevel: relay.spec.logLevel,
  });
  // The pods run under the Relay's own ServiceAccount (concerns/workload/identity.ts), which mounts no token.
  return [
    configMap,
    ...exposureChildren(owner, relay.spec.expose, inputs.exposure),
    ...networkPolicyChildren(owner, inputs.settings.runtimeNetworkPolicies, { pod: relay.spec.deployment }),
    deployment,
  ];
}

const hours = (ns: number) => `${Math.round((ns / 3.6e12) * 10) / 10}h`;

/**
 * What applying `want` over the stream's `current` config would throw away, for a warning Event
 * before it happens; undefined when nothing is lost. With `discard: new`, lower count or size
 * limits refuse new messages rather than dropping stored ones; a shorter max_age expires them.
 */
export function retentionLoss(
  current: Partial<StreamConfig> | undefined,
  state: Pick<StreamState, "messages" | "bytes" | "first_ts"> | undefined,
  want: Partial<StreamConfig>,
  now = Date.now(),
): string | undefined {
  if (!current || !state) return undefined;
  const lost: string[] = [];
  if (want.max_age && (!current.max_age || current.max_age > want.max_age)) {
    const oldestNs = state.messages > 0 && state.first_ts ? (now - Date.parse(state.first_ts)) * 1e6 : 0;
    if (oldestNs > want.max_age)
      lost.push(`maxAge lowered to ${hours(want.max_age)}: stored messages older than that are deleted now`);
    else
      lost.push(
        `maxAge lowered from ${current.max_age ? hours(current.max_age) : "unlimited"} to ${hours(want.max_age)}: unacknowledged messages will expire sooner`,
      );
  }
  if (want.max_msgs !== undefined && want.max_msgs >= 0 && state.messages > want.max_msgs) {
    lost.push(
      `${state.messages} stored messages exceed maxMessages ${want.max_msgs}: new messages are refused until enough are acknowledged`,
    );
  }
  if (want.max_bytes !== undefined && want.max_bytes >= 0 && state.bytes > want.max_bytes) {
    lost.push(
      `${state.bytes} stored bytes exceed maxBytes ${want.max_bytes}: new messages are refused until enough are acknowledged`,
    );
  }
  return lost.length ? lost.join("; ") : undefined;
}
