// Pure: an Agent's status from what a reconcile observed. Tested in desired.test.ts.
import { a2aUrls } from "../../../../runtime/src/contract/a2a.ts";
import { capabilitiesHash } from "../../../../runtime/src/contract/capabilities.ts";
import type { AgentStatus } from "../../crd/status.ts";
import { runtimeConditions, type ConditionInput, type RuntimeObservation } from "../../reconcile/conditions.ts";
import { A2A_GRPC_PORT, selectorLabels } from "../../reconcile/names.ts";
import { agentEndpoint, agentOwner, type AgentResource } from "./desired.ts";

export interface AgentObservation extends RuntimeObservation {
  signing?: {
    secretName: string;
    publicKey: string;
    created: string;
    keyId?: string;
    keys?: NonNullable<AgentStatus["signingKeys"]>;
    encryption?: { keyId: string; publicKey: string };
  };
  tlsSecret?: string;
  /** Whether the install vouches for spec.agentId (directory.ts agentIdClaim): the DirectoryListed condition. */
  claim?: { vouched: boolean; message: string };
}

/** Status fields (besides conditions and observedGeneration) and the conditions. */
export function agentStatus(
  agent: AgentResource,
  o: AgentObservation,
): { status: Omit<AgentStatus, "conditions" | "observedGeneration">; conditions: ConditionInput[] } {
  const dep = o.deployment;
  return {
    status: {
      endpoint: agentEndpoint(agent),
      ...(agent.spec.a2a?.enabled ? { a2a: a2aUrls(agentEndpoint(agent), A2A_GRPC_PORT) } : {}),
      capabilitiesHash: capabilitiesHash(agent),
      ...(o.signing
        ? {
            signingKey: {
              keyId: o.signing.keyId ?? agent.spec.signing.keyId,
              publicKey: o.signing.publicKey,
              secretName: o.signing.secretName,
              ...(o.signing.created ? { created: o.signing.created } : {}),
            },
          }
        : {}),
      ...(o.signing?.encryption
        ? { encryptionKey: { keyId: o.signing.encryption.keyId, publicKey: o.signing.encryption.publicKey } }
        : {}),
      ...(o.signing?.keys
        ? {
            signingKeys: o.signing.keys.map(
              ({ file: _file, ...k }: { file?: string } & NonNullable<AgentStatus["signingKeys"]>[number]) => k,
            ),
          }
        : {}),
      ...(o.tlsSecret ? { tlsSecretName: o.tlsSecret } : {}),
      replicas: dep?.status?.replicas ?? 0,
      readyReplicas: dep?.status?.readyReplicas ?? 0,
      selector: labelSelector(selectorLabels(agentOwner(agent))),
    },
    conditions: [
      ...runtimeConditions(o),
      ...(o.claim
        ? [
            {
              type: "DirectoryListed",
              status: o.claim.vouched ? ("True" as const) : ("False" as const),
              reason: o.claim.vouched ? "AgentIdVouched" : "AgentIdNotVouched",
              message: o.claim.message,
            },
          ]
        : []),
    ],
  };
}

/** A label selector as the scale subresource reads it: key=value pairs joined by commas, keys sorted. */
export function labelSelector(labels: Record<string, string>): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(",");
}
