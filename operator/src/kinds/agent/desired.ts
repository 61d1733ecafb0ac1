// Pure: the children of an Agent, from the Agent and what the shell found (the signing key's
// Secret, the TLS Secret's name). Table-tested in desired.test.ts.
import type { KubernetesObject, V1ConfigMap, V1Deployment } from "@kubernetes/client-node";
import { ANNOTATIONS } from "../../../../runtime/src/contract/annotations.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl, type ExposeSpec } from "../../../../runtime/src/resources/expose.ts";
import { hashOf } from "../../kube/metadata.ts";
import { exposureChildren, type ExposurePlanInput } from "../../concerns/exposure/expose.ts";
import { childMeta, childNames } from "../../reconcile/names.ts";
import { renderManifest, runtimeDeployment } from "../../concerns/workload/workload.ts";
import type { OperatorSettings, Owner } from "../../reconcile/settings.ts";
import { withIntroductionTokens } from "./introduction.ts";
import { withA2aGrpc, withA2aGrpcService, withA2aTokens } from "./a2a.ts";
import { localApiChildren, localApiServicePort, withLocalApi } from "./local-api.ts";
import { withHandoffSecret } from "./handoff.ts";
import { withDirectoryPeers } from "./directory.ts";
import { networkPolicyChildren } from "../../concerns/network-policy/network-policy.ts";

export type AgentResource = Agent & { metadata: Owner["metadata"] };

export interface AgentInputs {
  settings: OperatorSettings;
  /** The Secret with the signing key, when it was created, and its public half. */
  signing: {
    secretName: string;
    created: string;
    publicKey: string;
    keysHash?: string;
    encryption?: { keyId: string; publicKey: string };
  };
  tlsSecret: string;
  /** The exposure children to render and the Gateway API versions served (default: all of spec.expose, newest versions). */
  exposure?: ExposurePlanInput;
  /** The peers spec.peerSelector selects (directory.ts), added to spec.peers in the manifest. */
  directory?: AgentResource["spec"]["peers"];
}

export function agentOwner(agent: { metadata: Owner["metadata"] }): Owner {
  return { kind: "Agent", metadata: agent.metadata };
}

/** The manifest the runtime reads, with the signing key's creation time for the identity document. */
export function agentManifest(
  agent: AgentResource,
  signingCreated: string,
  directory: AgentResource["spec"]["peers"] = [],
): string {
  // spec.baseUrl always set: given, else from spec.expose, else the Service's DNS name, so that
  // the identity document, the A2A card and the @authority signatures must name come from the
  // names the operator configured, never from a request's Host. The directory's peers after the
  // Agent's own.
  const baseUrl = agentEndpoint(agent);
  const peers = withDirectoryPeers(agent.spec.peers, directory);
  const rendered =
    baseUrl !== agent.spec.baseUrl || peers.length !== agent.spec.peers.length
      ? { ...agent, spec: { ...agent.spec, peers, baseUrl } }
      : agent;
  return renderManifest(rendered, signingCreated ? { [ANNOTATIONS.signingKeyCreated]: signingCreated } : {});
}

/**
 * The children of an Agent, in the order they are applied (the Deployment last). The runtime's
 * ServiceAccount, Role and RoleBinding are applied before them (concerns/workload/identity.ts).
 */
export function desiredAgentChildren(agent: AgentResource, inputs: AgentInputs): KubernetesObject[] {
  const owner = agentOwner(agent);
  const n = childNames(agent.metadata.name);
  const manifest = agentManifest(agent, inputs.signing.created, inputs.directory);
  const configMap: V1ConfigMap = {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: childMeta(owner, n.configMap),
    data: { "manifest.yaml": manifest },
  };
  const deployment = runtimeDeployment({
    owner,
    mode: "agent",
    replicas: agent.spec.replicas,
    image: agent.spec.image,
    pod: agent.spec.deployment,
    settings: inputs.settings,
    tlsSecret: inputs.tlsSecret,
    signingSecret: inputs.signing.secretName,
    encryptionKey: inputs.signing.encryption !== undefined,
    // What the runtime reads only at start: the manifest, the signing keys (a rotation or
    // revocation restarts it) and the encryption key.
    configHash: hashOf({
      manifest,
      signingKey: inputs.signing.publicKey,
      ...(inputs.signing.keysHash ? { keys: inputs.signing.keysHash } : {}),
      ...(inputs.signing.encryption ? { encryptionKey: inputs.signing.encryption.publicKey } : {}),
    }),
    trustedProxies: agent.spec.expose?.trustedProxies,
    logLevel: agent.spec.logLevel,
    workers: agent.spec.runtime?.workers,
  });
  const exposure = exposureChildren(owner, agent.spec.expose, inputs.exposure);
  const localApiPort = localApiServicePort(agent);
  return [
    configMap,
    ...withA2aGrpcService(exposure, agent),
    ...localApiChildren(owner, agent),
    ...networkPolicyChildren(owner, inputs.settings.runtimeNetworkPolicies, {
      localApiPort,
      a2aGrpc: agent.spec.a2a.enabled,
      pod: agent.spec.deployment,
    }),
    withHandoff(
      withA2aTokens(
        withA2aGrpc(
          withIntroductionTokens(
            localApiPort === undefined ? deployment : withLocalApi(deployment, owner, localApiPort),
            agent,
          ),
          agent,
        ),
        agent,
      ),
      owner,
      agent,
    ),
  ];
}

/** With spec.handler, the hand-off secret mounted into the runtime and given to the sidecars. */
function withHandoff(deployment: KubernetesObject, owner: Owner, agent: AgentResource): KubernetesObject {
  return agent.spec.handler ? withHandoffSecret(deployment as V1Deployment, owner) : deployment;
}

/** The URL peers reach the agent at: spec.baseUrl, else https://<spec.expose host>, else its Service inside the cluster. */
export function agentEndpoint(agent: {
  metadata: Owner["metadata"];
  spec: { baseUrl?: string; expose?: ExposeSpec };
}): string {
  return (
    defaultBaseUrl(agent.spec.baseUrl, agent.spec.expose) ??
    `https://${agent.metadata.name}.${agent.metadata.namespace}.svc`
  );
}
