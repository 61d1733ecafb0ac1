// Pure building blocks shared by the Agent and Relay controllers: deterministic child names,
// labels, owner references, and the runtime Deployment that runs the start contract.
import type {
  V1Deployment,
  V1EnvVar,
  V1ObjectMeta,
  V1OwnerReference,
  V1Service,
  V1Volume,
  V1VolumeMount,
} from "@kubernetes/client-node";
import { stringify } from "yaml";
import { ANNOTATION_PREFIX } from "../../../runtime/src/contract/annotations.ts";
import { API_VERSION } from "../../../runtime/src/resources/common.ts";
import { COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_BY, managedByOperator } from "../kube/metadata.ts";
import type { DeploymentSettings } from "../../../runtime/src/resources/common.ts";
import { DEFAULT_RUNTIME_MEMORY_LIMIT } from "../../../runtime/src/contract/node-options.ts";
import { withNodeHeap, withPodSettings } from "./pod.ts";
import type { TolerationEntry } from "./pod-policy.ts";
import { podServiceAccount, runtimeNeedsToken, runtimeTokenVolume } from "./identity.ts";
import type { RuntimeNetworkPolicies } from "./network-policy.ts";

/** Everything the operator was told at start that shapes the children. */
export interface OperatorSettings {
  runtimeImage: string;
  runtimeImagePullPolicy: string;
  /** What spec.image may name: exact references or prefixes ending in "*" (none: only runtimeImage). */
  allowedImages?: string[];
  /** cert-manager issuers spec.tls.issuerRef may name besides the resource namespace's Issuers: `<Kind>[.<group>]/<name or *>`. */
  allowedIssuers?: string[];
  /** DNS names spec.tls.dnsNames may list besides the resource's own: exact, `*.<domain>`, or `*`. */
  allowedDnsNames?: string[];
  /** By namespace, the hosts (exact or `*.<domain>`) its resources may name in a certificate and as an https agent id. */
  allowedHosts?: Record<string, string[]>;
  /** Node label keys spec.deployment may place pods by (nodeSelector, nodeAffinity, podAffinity's topologyKey); `*` any. */
  allowedNodeLabels?: string[];
  /** Tolerations spec.deployment may list (pod-policy.ts); none by default. */
  allowedTolerations?: TolerationEntry[];
  /** PriorityClasses spec.deployment.priorityClassName may name; `*` any. */
  allowedPriorityClasses?: string[];
  natsUrl: string;
  /** A Secret (in each resource's namespace) holding a NATS credentials file under `key`. */
  natsCredsSecret?: { name: string; key: string };
  /** A Secret (in each resource's namespace) with optional keys `user`, `password`, `token`. */
  natsAuthSecret?: string;
  /** Each runtime mounts its own credential, the Secret `<name>-nats` the operator issues (nats-creds.ts). */
  natsPerResourceCreds?: boolean;
  /** NATS serves TLS with a certificate of the install's trust: each runtime verifies it with its trust bundle. */
  natsTlsVerifyWithTrust?: boolean;
  /** UID/GID of the runtime pods: a number, null to leave it unset (OpenShift's restricted SCC), absent means 10001. */
  runtimeRunAsUser?: number | null;
  runtimeRunAsGroup?: number | null;
  /** Secrets (in each resource's namespace) rendered as the runtime pods' imagePullSecrets. */
  runtimeImagePullSecrets?: string[];
  /** The cluster's own networks, which runtimes may reach as peers, relays and webhooks (--allow-private-targets). */
  clusterNetworks?: string[];
  /** OpenTelemetry tracing of the runtimes (docs/tracing.md): rendered as their OTEL_* environment. */
  runtimeTracing?: RuntimeTracing;
  /** A NetworkPolicy per Agent and Relay (network-policy.ts); undefined renders none. */
  runtimeNetworkPolicies?: RuntimeNetworkPolicies;
}

export interface RuntimeTracing {
  /** OTLP/HTTP endpoint of a collector, rendered as OTEL_EXPORTER_OTLP_ENDPOINT. */
  otlpEndpoint?: string;
  /** More OTEL_* variables, by name (sampler, headers, resource attributes, ...). */
  env?: Record<string, string>;
}

/**
 * The OTEL_* environment of a runtime when the operator was given tracing settings, none
 * otherwise: OTEL_SERVICE_NAME is the resource's name and OTEL_RESOURCE_ATTRIBUTES names its
 * namespace and kind, unless the settings' env sets them; then the endpoint and that env, by
 * name (a stable order, so that the pod template does not change between passes). A resource's
 * own spec.deployment.env replaces any of them (pod.ts).
 */
export function tracingEnv(owner: Owner, tracing: RuntimeTracing | undefined): V1EnvVar[] {
  const extra = tracing?.env ?? {};
  if (!tracing || (!tracing.otlpEndpoint && !Object.keys(extra).length)) return [];
  const vars: Record<string, string> = {
    OTEL_SERVICE_NAME: owner.metadata.name,
    OTEL_RESOURCE_ATTRIBUTES: `k8s.namespace.name=${owner.metadata.namespace},ifp.kind=${owner.kind.toLowerCase()}`,
    ...(tracing.otlpEndpoint ? { OTEL_EXPORTER_OTLP_ENDPOINT: tracing.otlpEndpoint } : {}),
    ...extra,
  };
  return Object.keys(vars)
    .sort()
    .map((name) => ({ name, value: vars[name]! }));
}

/** The runtime pods' UID and GID unless the operator was told otherwise. */
export const RUNTIME_DEFAULT_ID = 10001;

/** Pod template annotation: a hash of what the runtime reads at start, so that a change rolls the pods. */
export const CONFIG_HASH = "ifp.dev/config-hash";
export const HTTPS_PORT = 8443;
/** The runtime's plain-HTTP Prometheus listener (--metrics-port), container port `metrics`; never on a Service. */
export const METRICS_PORT = 9090;
/** Where the runtime pods find their trust bundle (`ca.crt`). */
export const TRUST_DIR = "/etc/ifp/trust";

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

/** The Service: the HTTPS port only (the agent's local application API stays on loopback). */
export function runtimeService(owner: Owner): V1Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: childMeta(owner, childNames(owner.metadata.name).service),
    spec: {
      selector: selectorLabels(owner),
      ports: [{ name: "https", port: 443, targetPort: "https", protocol: "TCP" }],
    },
  };
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
  tlsSecret: string;
  signingSecret?: string;
  /** Whether the signing Secret holds encryption.key (mounted beside signing.key). */
  encryptionKey?: boolean;
  configHash: string;
  /** The resource's spec.deployment: the user's containers and pod settings (pod.ts). */
  pod?: DeploymentSettings;
  /** spec.expose.trustedProxies: proxies whose X-Forwarded-For the runtime believes. */
  trustedProxies?: string[];
  /** spec.logLevel. */
  logLevel?: string;
}): V1Deployment {
  const { owner, settings } = opts;
  const n = childNames(owner.metadata.name);
  const args = [
    opts.mode,
    "--manifest=/etc/ifp/manifest/manifest.yaml",
    `--port=${HTTPS_PORT}`,
    `--metrics-port=${METRICS_PORT}`,
    "--tls-cert=/etc/ifp/tls/tls.crt",
    "--tls-key=/etc/ifp/tls/tls.key",
    `--nats=${settings.natsUrl}`,
    // The trust bundle (trust.ts), added to the system roots; the runtime reloads it when it changes.
    `--ca-file=${TRUST_DIR}/ca.crt`,
  ];
  if (settings.natsTlsVerifyWithTrust) args.push(`--nats-ca=${TRUST_DIR}/ca.crt`);
  if (opts.signingSecret) args.push("--signing-key=/etc/ifp/signing/signing.key");
  if (opts.signingSecret && opts.encryptionKey) args.push("--encryption-key=/etc/ifp/signing/encryption.key");
  if (opts.trustedProxies?.length) args.push(`--trusted-proxies=${opts.trustedProxies.join(",")}`);
  if (settings.clusterNetworks?.length) args.push(`--allow-private-targets=${settings.clusterNetworks.join(",")}`);
  const env: V1EnvVar[] = [
    { name: "IFP_LOG_LEVEL", value: opts.logLevel ?? "info" },
    ...tracingEnv(owner, settings.runtimeTracing),
  ];
  const mounts: V1VolumeMount[] = [
    { name: "manifest", mountPath: "/etc/ifp/manifest", readOnly: true },
    { name: "tls", mountPath: "/etc/ifp/tls", readOnly: true },
    { name: "tmp", mountPath: "/tmp" },
    { name: "trust", mountPath: TRUST_DIR, readOnly: true },
  ];
  const volumes: V1Volume[] = [
    { name: "manifest", configMap: { name: n.configMap } },
    {
      name: "tls",
      secret: {
        secretName: opts.tlsSecret,
        items: [
          { key: "tls.crt", path: "tls.crt" },
          { key: "tls.key", path: "tls.key" },
        ],
      },
    },
    { name: "tmp", emptyDir: {} },
    // Mounted whole (no subPath), so that the kubelet brings a changed bundle into the pod.
    { name: "trust", configMap: { name: n.trust, items: [{ key: "ca.crt", path: "ca.crt" }] } },
  ];
  if (opts.signingSecret) {
    mounts.push({ name: "signing", mountPath: "/etc/ifp/signing", readOnly: true });
    volumes.push({ name: "signing", secret: { secretName: opts.signingSecret } }); // signing.key, keys.json and retired keys of a rotation
  }
  if (settings.natsPerResourceCreds) {
    env.push({ name: "IFP_NATS_CREDS", value: "/etc/ifp/nats/nats.creds" });
    mounts.push({ name: "nats", mountPath: "/etc/ifp/nats", readOnly: true });
    volumes.push({
      name: "nats",
      secret: { secretName: `${owner.metadata.name}-nats`, items: [{ key: "nats.creds", path: "nats.creds" }] },
    });
  } else if (settings.natsCredsSecret) {
    env.push({ name: "IFP_NATS_CREDS", value: "/etc/ifp/nats/nats.creds" });
    mounts.push({ name: "nats", mountPath: "/etc/ifp/nats", readOnly: true });
    volumes.push({
      name: "nats",
      secret: {
        secretName: settings.natsCredsSecret.name,
        items: [{ key: settings.natsCredsSecret.key, path: "nats.creds" }],
      },
    });
  }
  if (settings.natsAuthSecret) {
    for (const [name, key] of [
      ["IFP_NATS_USER", "user"],
      ["IFP_NATS_PASSWORD", "password"],
      ["IFP_NATS_TOKEN", "token"],
    ] as const) {
      env.push({ name, valueFrom: { secretKeyRef: { name: settings.natsAuthSecret, key, optional: true } } });
    }
  }
  if (runtimeNeedsToken(owner.kind)) {
    // The runtime's own token, in its container only (identity.ts).
    const token = runtimeTokenVolume();
    mounts.push(token.mount);
    volumes.push(token.volume);
  }
  const runAsUser = settings.runtimeRunAsUser === undefined ? RUNTIME_DEFAULT_ID : settings.runtimeRunAsUser;
  const runAsGroup = settings.runtimeRunAsGroup === undefined ? RUNTIME_DEFAULT_ID : settings.runtimeRunAsGroup;
  const pullSecrets = settings.runtimeImagePullSecrets ?? [];
  const probe = (path: string) => ({
    httpGet: { path, port: "https", scheme: "HTTPS" },
    periodSeconds: 10,
    timeoutSeconds: 3,
  });
  return withNodeHeap(
    withPodSettings(
      {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: childMeta(owner, n.deployment),
        spec: {
          replicas: opts.replicas,
          selector: { matchLabels: selectorLabels(owner) },
          template: {
            metadata: { labels: labels(owner), annotations: { [CONFIG_HASH]: opts.configHash } },
            spec: {
              // The resource's own ServiceAccount, or the one it names (identity.ts); no token in
              // the sidecars unless it asks for one.
              serviceAccountName: podServiceAccount(owner, opts.pod),
              automountServiceAccountToken: opts.pod?.automountServiceAccountToken ?? false,
              securityContext: {
                runAsNonRoot: true,
                ...(runAsUser === null ? {} : { runAsUser }),
                ...(runAsGroup === null ? {} : { runAsGroup }),
                seccompProfile: { type: "RuntimeDefault" },
              },
              ...(pullSecrets.length ? { imagePullSecrets: pullSecrets.map((name) => ({ name })) } : {}),
              containers: [
                {
                  name: "runtime",
                  image: opts.image ?? settings.runtimeImage,
                  imagePullPolicy: settings.runtimeImagePullPolicy,
                  args,
                  env,
                  ports: [
                    { name: "https", containerPort: HTTPS_PORT, protocol: "TCP" },
                    { name: "metrics", containerPort: METRICS_PORT, protocol: "TCP" },
                  ],
                  readinessProbe: probe("/readyz"),
                  livenessProbe: probe("/healthz"),
                  resources: {
                    requests: { cpu: "50m", memory: "128Mi" },
                    limits: { memory: DEFAULT_RUNTIME_MEMORY_LIMIT },
                  },
                  securityContext: {
                    allowPrivilegeEscalation: false,
                    readOnlyRootFilesystem: true,
                    capabilities: { drop: ["ALL"] },
                  },
                  volumeMounts: mounts,
                },
              ],
              volumes,
            },
          },
        },
      },
      opts.pod,
    ),
    opts.mode,
  );
}

function withoutReplicas(spec: unknown): unknown {
  if (!spec || typeof spec !== "object" || !("replicas" in spec)) return spec;
  const { replicas: _, ...rest } = spec as Record<string, unknown>;
  return rest;
}

/** The manifest the runtime reads: the resource as the API server holds it, minus server bookkeeping and spec.replicas. */
export function renderManifest(
  obj: { apiVersion: string; kind: string; metadata: OwnerMeta; spec: unknown },
  annotations: Record<string, string> = {},
): string {
  const m = obj.metadata;
  // Only the project's own annotations: the runtime reads nothing else, and others (kubectl's
  // last-applied-configuration, tooling's) must not roll the pods.
  const own = Object.fromEntries(Object.entries(m.annotations ?? {}).filter(([k]) => k.startsWith(ANNOTATION_PREFIX)));
  return stringify(
    {
      apiVersion: obj.apiVersion,
      kind: obj.kind,
      metadata: {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        ...(m.creationTimestamp ? { creationTimestamp: m.creationTimestamp } : {}),
        annotations: { ...own, ...annotations },
      },
      // spec.replicas is the Deployment's alone: the runtime never reads it, and scaling (kubectl
      // scale, a HorizontalPodAutoscaler) must not change the config hash and so roll the pods.
      spec: withoutReplicas(obj.spec),
    },
    // An object met twice (a key list two peers share) is written out twice: people read this
    // ConfigMap, and anchors and aliases there would only puzzle them.
    { lineWidth: 0, aliasDuplicateObjects: false },
  );
}
