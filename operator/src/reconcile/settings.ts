// What the operator was told at start and what every part names a resource by: types only, no
// imports, so that every module of the controllers can depend on it and it on none of them.

/** Everything the operator was told at start that shapes the children. */
export interface OperatorSettings {
  runtimeImage: string;
  /**
   * The version of runtimeImage, for a reference that names no tag (by digest alone): the chart's
   * runtimeImage.tag or appVersion. Runtime pods are labelled with their image's version.
   */
  runtimeVersion?: string;
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
  /** Each runtime mounts its own credential, the Secret `<name>-nats` the operator issues (concerns/nats/runtime-credential.ts). */
  natsPerResourceCreds?: boolean;
  /**
   * Where the Agents' JetStream objects are (--nats-layout): `per-agent` (default), each
   * runtime's own account; `isolated`, its tenant's data account through its account's imports
   * (the runtime is rendered with `--nats-layout=isolated`).
   */
  natsLayout?: "per-agent" | "isolated";
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

/** A toleration the install allows (pod-policy.ts): `key`, `key=value`, each optionally `:effect`, or `*` for any. */
export interface TolerationEntry {
  key: string;
  value?: string;
  effect?: string;
}

/** The install's runtime NetworkPolicies (network-policy.ts): undefined renders none. */
export interface RuntimeNetworkPolicies {
  /** Namespaces whose pods may reach the runtimes' metrics port (Prometheus's); none when empty. */
  metricsNamespaces: string[];
}
