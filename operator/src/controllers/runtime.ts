import { createHash } from "node:crypto";
import type { V1Deployment, V1ObjectMeta, V1OwnerReference } from "@kubernetes/client-node";
import canonicalize from "canonicalize";
import { API_VERSION } from "../../../runtime/src/resources/common.ts";

/** Everything the operator was told at start that shapes the children. */
export interface OperatorSettings {
  runtimeImage: string;
  runtimeImagePullPolicy: string;
  natsUrl: string;
  /** A Secret (in each resource's namespace) holding a NATS credentials file. */
  natsCredsSecret?: { name: string; key: string };
}

export const FIELD_MANAGER = "ifp-operator";
export const MANAGED_BY = { "app.kubernetes.io/managed-by": "ifp-operator" } as const;
export const MANAGED_SELECTOR = "app.kubernetes.io/managed-by=ifp-operator";
export const CONFIG_HASH = "ifp.dev/config-hash";
export const HTTPS_PORT = 8443;

/** The metadata of an Agent or Relay as the informer holds it (custom objects stay plain JSON). */
export interface OwnerMeta {
  name: string;
  namespace: string;
  uid: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  finalizers?: string[];
  resourceVersion?: string;
  [key: string]: unknown;
}

export interface Owner {
  kind: "Agent" | "Relay";
  metadata: OwnerMeta;
}

/** Deterministic names of a resource's children. */
export function childNames(name: string) {
  return {
    configMap: `${name}-manifest`,
    service: name,
    deployment: name,
    serviceAccount: `${name}-runtime`,
    role: `${name}-runtime`,
    signingSecret: `${name}-signing`,
    tlsSecret: `${name}-tls`,
    certificate: `${name}-tls`,
  };
}

export function labels(owner: Owner): Record<string, string> {
  return {
    "app.kubernetes.io/name": "ifp-runtime",
    "app.kubernetes.io/instance": owner.metadata.name,
    "app.kubernetes.io/component": owner.kind.toLowerCase(),
    "app.kubernetes.io/part-of": "ifp-operator",
    ...MANAGED_BY,
  };
}

export function selectorLabels(owner: Owner): Record<string, string> {
  return { "app.kubernetes.io/name": "ifp-runtime", "app.kubernetes.io/instance": owner.metadata.name };
}

export function ownerReference(owner: Owner): V1OwnerReference {
  return { apiVersion: API_VERSION, kind: owner.kind, name: owner.metadata.name, uid: owner.metadata.uid, controller: true, blockOwnerDeletion: true };
}

export function childMeta(owner: Owner, name: string, extra: Partial<V1ObjectMeta> = {}): V1ObjectMeta {
  return { name, namespace: owner.metadata.namespace, labels: labels(owner), ownerReferences: [ownerReference(owner)], ...extra };
}

export function hashOf(value: unknown): string {
  return createHash("sha256").update(canonicalize(value) ?? "").digest("hex").slice(0, 16);
}

/** The in-cluster DNS names of a resource's Service. */
export function serviceDnsNames(owner: Owner): string[] {
  const { name, namespace } = owner.metadata;
  return [name, `${name}.${namespace}`, `${name}.${namespace}.svc`, `${name}.${namespace}.svc.cluster.local`];
}

/**
 * The runtime Deployment: exactly the start contract a person uses outside Kubernetes, with the
 * manifest, TLS and (agents) signing key mounted from the ConfigMap and Secrets.
 */
export function runtimeDeployment(opts: {
  owner: Owner;
  mode: "agent" | "relay";
  replicas: number;
  image: string | undefined;
  settings: OperatorSettings;
  configMap: string;
  tlsSecret: string;
  signingSecret?: string;
  serviceAccount: string;
  configHash: string;
}): V1Deployment {
  const { owner, settings } = opts;
  const n = childNames(owner.metadata.name);
  const args = [
    opts.mode,
    "--manifest=/etc/ifp/manifest/manifest.yaml",
    `--port=${HTTPS_PORT}`,
    "--tls-cert=/etc/ifp/tls/tls.crt",
    "--tls-key=/etc/ifp/tls/tls.key",
    `--nats=${settings.natsUrl}`,
  ];
  if (opts.signingSecret) args.push("--signing-key=/etc/ifp/signing/signing.key");
  const env = [{ name: "IFP_LOG_LEVEL", value: "info" }];
  const mounts = [
    { name: "manifest", mountPath: "/etc/ifp/manifest", readOnly: true },
    { name: "tls", mountPath: "/etc/ifp/tls", readOnly: true },
    { name: "tmp", mountPath: "/tmp" },
  ];
  const volumes: object[] = [
    { name: "manifest", configMap: { name: opts.configMap } },
    { name: "tls", secret: { secretName: opts.tlsSecret } },
    { name: "tmp", emptyDir: {} },
  ];
  if (opts.signingSecret) {
    mounts.push({ name: "signing", mountPath: "/etc/ifp/signing", readOnly: true });
    volumes.push({ name: "signing", secret: { secretName: opts.signingSecret, items: [{ key: "signing.key", path: "signing.key" }] } });
  }
  if (settings.natsCredsSecret) {
    env.push({ name: "IFP_NATS_CREDS", value: `/etc/ifp/nats/${settings.natsCredsSecret.key}` });
    mounts.push({ name: "nats", mountPath: "/etc/ifp/nats", readOnly: true });
    volumes.push({ name: "nats", secret: { secretName: settings.natsCredsSecret.name } });
  }
  const probe = (path: string) => ({ httpGet: { path, port: "https", scheme: "HTTPS" }, periodSeconds: 10, timeoutSeconds: 3 });
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: childMeta(owner, n.deployment),
    spec: {
      replicas: opts.replicas,
      selector: { matchLabels: selectorLabels(owner) },
      template: {
        metadata: { labels: labels(owner), annotations: { [CONFIG_HASH]: opts.configHash } },
        spec: {
          serviceAccountName: opts.serviceAccount,
          securityContext: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
          containers: [
            {
              name: "runtime",
              image: opts.image ?? settings.runtimeImage,
              imagePullPolicy: settings.runtimeImagePullPolicy,
              args,
              env,
              ports: [{ name: "https", containerPort: HTTPS_PORT, protocol: "TCP" }],
              readinessProbe: probe("/readyz"),
              livenessProbe: probe("/healthz"),
              resources: { requests: { cpu: "50m", memory: "128Mi" }, limits: { memory: "512Mi" } },
              securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ["ALL"] } },
              volumeMounts: mounts,
            },
          ],
          volumes: volumes as never,
        },
      },
    },
  };
}
