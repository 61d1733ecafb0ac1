// The chart's values, as a zod schema: the source of values.schema.json (npm run gen) and of
// the defaults in values.yaml, which a test keeps equal. Each value is documented by the
// comment before it in values.yaml (or, for a value without a default, by its description
// here); `npm run gen` turns both into the chart's README.
import { z } from "zod";

/** An image digest: the image's content address, which wins over its tag. */
const DIGEST = z
  .string()
  .regex(/^$|^sha256:[a-f0-9]{64}$/, "a digest: sha256: and 64 lowercase hexadecimal digits, or empty")
  .default("");

/** nats:2.12.15-alpine's image index on Docker Hub. */
/** A size in bytes: a whole number, or a quantity with a binary suffix (64Mi, 1Gi). */
const ByteSize = z.union([z.number().int().min(0), z.string().regex(/^[0-9]+(Ki|Mi|Gi|Ti)?$/)]);
/** A count of a runtime account's limits (its operator flag takes 1 to 1,000,000). */
const Count = z.number().int().min(1).max(1_000_000);

export const NATS_DIGEST = "sha256:b270f5e2428354c0335612694d7dd2fb588148e567a5757fdff325ef9c9332e6";

const Image = (repository: string, tag: string, digest = "") =>
  z
    .strictObject({
      repository: z
        .string()
        .min(1)
        .regex(/^[a-z0-9]([-a-z0-9._:/]*[a-z0-9])?$/, "an image repository without a tag or digest")
        .default(repository),
      tag: z
        .string()
        .regex(/^$|^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, "an image tag")
        .default(tag),
      digest: DIGEST.default(digest),
      pullPolicy: z.enum(["Always", "IfNotPresent", "Never"]).default("IfNotPresent"),
    })
    .prefault({});

/** A command-line flag of the operator or of NATS: --name or --name=value. */
const EXTRA_ARG = z.string().regex(/^--?[A-Za-z][-A-Za-z0-9_.]*(=.*)?$/s, "a flag: --name or --name=value");
/** Pod-level additions the chart has no value of its own for, checked by the API server. */
const extras = {
  extraArgs: z.array(EXTRA_ARG).max(64).default([]),
  extraEnv: z
    .array(
      z.looseObject({
        name: z.string().regex(/^[-._a-zA-Z][-._a-zA-Z0-9]*$/, "an environment variable's name"),
      }),
    )
    .max(64)
    .meta({ title: "[]EnvVar" })
    .default([]),
  extraVolumes: z
    .array(z.looseObject({ name: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a volume name") }))
    .max(64)
    .meta({ title: "[]Volume" })
    .default([]),
  extraVolumeMounts: z
    .array(
      z.looseObject({
        name: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a volume name"),
        mountPath: z.string().regex(/^\//, "an absolute path"),
      }),
    )
    .max(64)
    .meta({ title: "[]VolumeMount" })
    .default([]),
};

/** A Kubernetes API object, checked by the API server; its title names its type in the values reference. */
const Kube = (title: string) => z.record(z.string(), z.unknown()).meta({ title });

const Quantities = z.record(z.string(), z.union([z.string(), z.number()]));
const Resources = (requests: Record<string, string>, limits: Record<string, string>) =>
  z
    .strictObject({ requests: Quantities.optional(), limits: Quantities.optional() })
    .meta({ title: "ResourceRequirements" })
    .default({ requests, limits });

/** A duration in whole seconds, minutes or hours, as the operator's flags take it. */
const HOURS = z.string().regex(/^[1-9][0-9]*(s|m|h)$/);

const StringMap = z.record(z.string(), z.string()).default({});
const PullSecrets = z.array(z.strictObject({ name: z.string().min(1) }));

/**
 * The security contexts the chart's pods had before they were values: non-root as a fixed
 * user, the RuntimeDefault seccomp profile, no privilege escalation, a read-only root
 * filesystem, no capabilities. OpenShift's restricted SCC assigns the user itself and refuses
 * a fixed one: set runAsUser, runAsGroup and fsGroup to null there.
 */
const POD_SECURITY_CONTEXT = {
  runAsNonRoot: true,
  runAsUser: 10001,
  runAsGroup: 10001,
  fsGroup: 10001,
  seccompProfile: { type: "RuntimeDefault" },
};
const SECURITY_CONTEXT = {
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ["ALL"] },
};

/** Where a pod runs and how it is scheduled: the same values for the operator and for NATS. */
const scheduling = {
  podSecurityContext: Kube("PodSecurityContext").default(POD_SECURITY_CONTEXT),
  securityContext: Kube("SecurityContext").default(SECURITY_CONTEXT),
  priorityClassName: z.string().default(""),
  nodeSelector: StringMap,
  tolerations: z.array(Kube("Toleration")).default([]),
  affinity: Kube("Affinity").default({}),
  topologySpreadConstraints: z.array(Kube("TopologySpreadConstraint")).default([]),
};

export const Values = z.strictObject({
  global: z
    .looseObject({
      imagePullSecrets: PullSecrets.optional().describe(
        "global.imagePullSecrets, set by a parent chart, are added to imagePullSecrets for every pod of this chart.",
      ),
      imageRegistry: z
        .string()
        .regex(
          /^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]+)?(\/[a-z0-9]([-a-z0-9._/]*[a-z0-9])?)?$/,
          "a registry host[:port][/path]",
        )
        .optional()
        .describe(
          "global.imageRegistry replaces the registry of every image of this chart and of the runtimes (ghcr.io in ghcr.io/ifp-dev/ifp-runtime; an image without one, such as nats, gets it prepended), e.g. registry.example:5000/mirror.",
        ),
    })
    .default({}),
  enabled: z
    .boolean()
    .optional()
    .describe(
      "enabled is for a parent chart's dependency condition (`condition: ifp-operator.enabled`); this chart itself ignores it.",
    ),
  nameOverride: z.string().default(""),
  fullnameOverride: z.string().default(""),
  image: Image("ghcr.io/ifp-dev/ifp-operator", ""),
  runtimeImage: Image("ghcr.io/ifp-dev/ifp-runtime", ""),
  allowedImages: z
    .array(z.string().min(1).max(512))
    .max(64)
    .default([])
    .describe(
      "Images an Agent's or Relay's spec.image may name besides runtimeImage: exact references, or prefixes ending in * (empty: only runtimeImage)",
    ),
  allowedIssuers: z
    .array(
      z
        .string()
        .regex(/^[A-Za-z][A-Za-z0-9]*(\.[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?\/(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/),
    )
    .max(64)
    .default([])
    .describe(
      "cert-manager issuers spec.tls.issuerRef may name besides an Issuer of the resource's own namespace: Kind[.group]/name or Kind[.group]/* (e.g. ClusterIssuer/letsencrypt)",
    ),
  allowedDnsNames: z
    .array(
      z
        .string()
        .regex(/^(\*|(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*)$/),
    )
    .max(256)
    .default([])
    .describe(
      "DNS names a certificate of the install CA may carry besides the resource's own Service names (spec.tls.dnsNames, the host of spec.baseUrl or spec.url, exposure hosts), and the hosts an https spec.agentId may name: exact, *.domain, or * (empty: only its own)",
    ),
  allowedHosts: z
    .record(
      z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/),
      z
        .array(
          z
            .string()
            .regex(/^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$/),
        )
        .max(256),
    )
    .default({})
    .describe(
      "By namespace, the hosts (exact or *.domain) its Agents and Relays may name like allowedDnsNames: in a certificate of the install CA and as the host of an https spec.agentId the directory publishes (empty: none)",
    ),
  allowedNodeLabels: z
    .array(z.string().regex(/^(\*|([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/))
    .max(64)
    .default([])
    .describe(
      "Node label keys an Agent's or Relay's spec.deployment may place its pods by (nodeSelector, nodeAffinity, podAffinity's topologyKey), or * for any (empty: none)",
    ),
  allowedTolerations: z
    .array(
      z
        .string()
        .regex(
          /^(\*|[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?(=[-A-Za-z0-9_.]*)?(:(NoSchedule|PreferNoSchedule|NoExecute))?)$/,
        ),
    )
    .max(64)
    .default([])
    .describe(
      "Tolerations spec.deployment.tolerations may list: key, key=value, either with :effect, or * for any (empty: none)",
    ),
  allowedPriorityClasses: z
    .array(z.string().regex(/^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/))
    .max(64)
    .default([])
    .describe("PriorityClasses spec.deployment.priorityClassName may name, or * for any (empty: none)"),
  imagePullSecrets: PullSecrets.default([]),
  runtime: z
    .strictObject({
      runAsUser: z.number().int().min(0).max(2147483647).nullable().default(10001),
      runAsGroup: z.number().int().min(0).max(2147483647).nullable().default(10001),
      maxRollingAgents: z
        .union([z.number().int().min(1), z.string().regex(/^([1-9][0-9]{0,5}|[1-9][0-9]?%|100%)$/)])
        .default("25%"),
      finalizerTimeout: z
        .string()
        .regex(/^[1-9][0-9]*(s|m|h)$/)
        .default("5m"),
      natsAccountLimits: z
        .strictObject({
          dataBytes: ByteSize.default("64Mi").describe(
            "JetStream disk of every runtime's NATS account beside its inbox (an Agent's spec.inbox.maxBytes) or stream (a Relay's spec.retention.maxBytes): its outbox and KV buckets, per replica",
          ),
          memoryBytes: ByteSize.default(0).describe(
            "JetStream memory of every runtime's account besides a memory Relay's stream (0: no memory streams)",
          ),
          unboundedRelayBytes: ByteSize.default("1Gi").describe(
            "The disk (or memory) of a Relay whose spec.retention.maxBytes is -1",
          ),
          streams: Count.default(16).describe("Streams and KV buckets per runtime account"),
          consumers: Count.default(10000).describe(
            "Consumers per stream of a runtime account: a Relay has one per Agent it pushes to",
          ),
          connections: Count.default(256).describe("Client connections per runtime account"),
          subscriptions: Count.default(4096).describe("Subscriptions per runtime account"),
        })
        .prefault({})
        .describe(
          "What every runtime's NATS account may hold (docs/scale.md, Capacity per runtime); the disk also follows each Agent's spec.inbox.maxBytes and each Relay's spec.retention",
        ),
      natsLayout: z
        .enum(["isolated", "per-agent"])
        .default("isolated")
        .describe(
          "Where the Agents' JetStream objects are: isolated (the default: a data account per namespace, docs/scale.md) or per-agent (each runtime's own account); isolated needs nats.auth.enabled",
        ),
      natsTenantLimits: z
        .strictObject({
          diskBytes: z
            .union([z.number().int().min(1), z.string().regex(/^[1-9][0-9]*(Ki|Mi|Gi|Ti)?$/)])
            .default("1Gi")
            .describe("JetStream disk of each namespace's data account on the isolated layout, reserved in the store"),
          memoryBytes: ByteSize.default(0).describe("Its JetStream memory (0: none)"),
        })
        .prefault({})
        .describe("What each namespace's data account may hold on the isolated layout (docs/scale.md)"),
      clusterNetworks: z
        .array(z.string().min(1).max(64))
        .default(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"])
        .describe(
          "The cluster's Service and pod networks (CIDR blocks): agents and relays may reach peers, relays and webhooks there besides their spec.network.allowPrivateTargets; other private, loopback and link-local addresses stay refused. Narrow it to your cluster's CIDRs; [] allows none.",
        ),
    })
    .prefault({}),
  replicaCount: z.number().int().min(1).default(1),
  podDisruptionBudget: z
    .strictObject({
      enabled: z.boolean().default(true),
      maxUnavailable: z.union([z.number().int().min(1), z.string().regex(/^[1-9][0-9]?%$/)]).default(1),
    })
    .prefault({}),
  leaderElection: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  watchNamespaces: z.array(z.string().min(1)).default([]),
  clusterWide: z.boolean().default(false),
  logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
  nodeOptions: z.string().default("--max-old-space-size=192 --max-semi-space-size=2"),
  mallocArenaMax: z.number().int().min(0).max(64).default(2),
  crds: z.strictObject({ enabled: z.boolean().default(true), keep: z.boolean().default(true) }).prefault({}),
  rbac: z.strictObject({ create: z.boolean().default(true) }).prefault({}),
  trust: z
    .strictObject({
      caSecretName: z
        .string()
        .regex(/^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/)
        .max(253)
        .default(""),
      extraCAs: z.string().default(""),
      caValidity: HOURS.default("43800h"),
      caRotateBefore: HOURS.default("8760h"),
      caOverlap: HOURS.default("720h"),
      certValidity: HOURS.default("8760h"),
      certRenewBefore: HOURS.default("720h"),
      certManager: z
        .strictObject({
          issuerRef: z
            .strictObject({
              name: z
                .string()
                .regex(/^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/)
                .max(253)
                .default(""),
              kind: z
                .string()
                .regex(/^[A-Za-z][A-Za-z0-9]*$/)
                .default("ClusterIssuer"),
              group: z
                .string()
                .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/)
                .max(253)
                .default("cert-manager.io"),
            })
            .prefault({}),
          bundle: z
            .strictObject({
              configMapName: z
                .string()
                .regex(/^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/)
                .max(253)
                .default(""),
              key: z
                .string()
                .regex(/^[-._a-zA-Z0-9]+$/)
                .max(253)
                .default("ca.crt"),
            })
            .prefault({}),
        })
        .prefault({}),
    })
    .prefault({}),
  tracing: z
    .strictObject({
      otlpEndpoint: z
        .string()
        .regex(/^$|^https?:\/\/\S+$/)
        .default(""),
      env: z.record(z.string().regex(/^OTEL_[A-Z0-9_]{1,100}$/), z.string().max(4096)).default({}),
    })
    .prefault({}),
  serviceAccount: z
    .strictObject({ create: z.boolean().default(true), name: z.string().default(""), annotations: StringMap })
    .prefault({}),
  nats: z
    .strictObject({
      url: z.string().default(""),
      credentialsSecret: z
        .strictObject({ name: z.string().default(""), key: z.string().min(1).default("nats.creds") })
        .prefault({}),
      auth: z.strictObject({ enabled: z.boolean().default(true), accountSecret: z.string().default("") }).prefault({}),
      authSecret: z
        .string()
        .regex(/^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "a Secret's name")
        .max(253)
        .default(""),
      tls: z
        .strictObject({
          enabled: z.boolean().default(true),
          verifyOwnServer: z.boolean().default(false),
          reloader: z
            .strictObject({
              resources: Resources(
                { cpu: "5m", memory: "96Mi", "ephemeral-storage": "16Mi" },
                { memory: "160Mi", "ephemeral-storage": "64Mi" },
              ),
            })
            .prefault({}),
        })
        .prefault({}),
      networkPolicy: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
      repairStore: z
        .strictObject({
          resources: Resources(
            { cpu: "10m", memory: "64Mi", "ephemeral-storage": "16Mi" },
            { memory: "160Mi", "ephemeral-storage": "64Mi" },
          ),
        })
        .prefault({}),
      install: z.boolean().default(true),
      replicas: z.literal([1, 3]).default(1),
      // The image index of nats:2.12.15-alpine on Docker Hub (every platform), as
      // docker-library/repo-info records it.
      image: Image("nats", "2.12.15-alpine", NATS_DIGEST),
      ...extras,
      storage: z
        .strictObject({ size: z.string().min(1).default("10Gi"), storageClassName: z.string().default("") })
        .prefault({}),
      resources: Resources(
        { cpu: "100m", memory: "256Mi", "ephemeral-storage": "64Mi" },
        { memory: "1Gi", "ephemeral-storage": "256Mi" },
      ),
      ...scheduling,
    })
    .prefault({}),
  metrics: z
    .strictObject({
      port: z.number().int().min(1).max(65535).default(8080),
      networkPolicyNamespaces: z
        .array(z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a namespace name"))
        .default([]),
      serviceMonitor: z
        .strictObject({
          enabled: z.boolean().default(false),
          interval: z
            .string()
            .regex(/^[0-9]+(ms|s|m)$/)
            .default("30s"),
          labels: StringMap,
        })
        .prefault({}),
      podMonitor: z
        .strictObject({
          enabled: z.boolean().default(false),
          interval: z
            .string()
            .regex(/^[0-9]+(ms|s|m)$/)
            .default("30s"),
          labels: StringMap,
        })
        .prefault({}),
      dashboard: z
        .strictObject({
          enabled: z.boolean().default(false),
          labels: z.record(z.string(), z.string()).default({ grafana_dashboard: "1" }),
          namespace: z.string().default(""),
        })
        .prefault({}),
    })
    .prefault({}),
  prometheusRule: z
    .strictObject({
      enabled: z.boolean().default(false),
      labels: StringMap,
      additionalLabels: z
        .record(z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, "a Prometheus label name"), z.string())
        .default({}),
      runbookUrl: z
        .string()
        .regex(/^$|^https?:\/\/[^\s#]+$/, "an http(s) URL without a fragment")
        .default(""),
    })
    .prefault({}),
  networkPolicy: z
    .strictObject({
      runtimes: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
      operator: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
    })
    .prefault({}),
  health: z.strictObject({ port: z.number().int().min(1).max(65535).default(8081) }).prefault({}),
  resources: Resources(
    { cpu: "50m", memory: "128Mi", "ephemeral-storage": "64Mi" },
    { memory: "512Mi", "ephemeral-storage": "256Mi" },
  ),
  ...extras,
  workers: z.number().int().min(1).max(64).default(4),
  resync: z
    .string()
    .regex(/^[1-9][0-9]*(s|m|h)$/)
    .default("5m"),
  podAnnotations: StringMap,
  podLabels: StringMap,
  ...scheduling,
  tests: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
});
export type Values = z.infer<typeof Values>;

/** values.schema.json: the JSON Schema Helm checks values against (install, upgrade, lint, template). */
export function valuesJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(Values, { io: "input", target: "draft-7" }) as Record<string, unknown>;
  return {
    ...schema,
    title: "ifp-operator chart values",
    $comment: "Generated from charts/ifp-operator/values.schema.ts by npm run gen; do not edit.",
  };
}
