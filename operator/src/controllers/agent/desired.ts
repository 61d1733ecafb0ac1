import type { KubernetesObject, V1ConfigMap, V1Deployment, V1Role, V1RoleBinding, V1Service, V1ServiceAccount } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { ANNOTATIONS } from "../../../../runtime/src/agent/documents.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import { childMeta, childNames, hashOf, HTTPS_PORT, runtimeDeployment, selectorLabels, type OperatorSettings, type Owner } from "../runtime.ts";

export interface AgentInputs {
  settings: OperatorSettings;
  /** The Secret with the signing key and when it was created. */
  signing: { secretName: string; created: string };
  tlsSecret: string;
}

/** The manifest the runtime reads: the resource as the API server holds it, minus server bookkeeping. */
export function renderedManifest(agent: Agent & { metadata: Owner["metadata"] }, signingCreated: string): string {
  const m = agent.metadata;
  return stringify({
    apiVersion: agent.apiVersion,
    kind: agent.kind,
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      creationTimestamp: m.creationTimestamp,
      annotations: { ...(m.annotations ?? {}), [ANNOTATIONS.signingKeyCreated]: signingCreated },
    },
    spec: agent.spec,
  });
}

/** Pure: the children of an Agent. */
export function desiredAgentChildren(agent: Agent & { metadata: Owner["metadata"] }, inputs: AgentInputs): KubernetesObject[] {
  const owner: Owner = { kind: "Agent", metadata: agent.metadata };
  const n = childNames(agent.metadata.name);
  const manifest = renderedManifest(agent, inputs.signing.created);
  const configMap: V1ConfigMap = { apiVersion: "v1", kind: "ConfigMap", metadata: childMeta(owner, n.configMap), data: { "manifest.yaml": manifest } };
  const service: V1Service = {
    apiVersion: "v1",
    kind: "Service",
    metadata: childMeta(owner, n.service),
    spec: { selector: selectorLabels(owner), ports: [{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }] },
  };
  const sa: V1ServiceAccount = { apiVersion: "v1", kind: "ServiceAccount", metadata: childMeta(owner, n.serviceAccount), automountServiceAccountToken: true };
  // The runtime records Events on its Agent (undeliverable messages, dead letters).
  const role: V1Role = {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: childMeta(owner, n.role),
    rules: [{ apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] }],
  };
  const binding: V1RoleBinding = {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: childMeta(owner, n.role),
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: n.role },
    subjects: [{ kind: "ServiceAccount", name: n.serviceAccount, namespace: agent.metadata.namespace }],
  };
  const deployment: V1Deployment = runtimeDeployment({
    owner,
    mode: "agent",
    replicas: agent.spec.replicas,
    image: agent.spec.image,
    settings: inputs.settings,
    configMap: n.configMap,
    tlsSecret: inputs.tlsSecret,
    signingSecret: inputs.signing.secretName,
    serviceAccount: n.serviceAccount,
    configHash: hashOf({ manifest, tls: inputs.tlsSecret, signing: inputs.signing.secretName, settings: inputs.settings }),
  });
  return [configMap, sa, role, binding, service, deployment];
}

export function agentEndpoint(agent: { metadata: Owner["metadata"]; spec: { baseUrl?: string } }): string {
  return agent.spec.baseUrl ?? `https://${agent.metadata.name}.${agent.metadata.namespace}.svc`;
}

export { HTTPS_PORT };
