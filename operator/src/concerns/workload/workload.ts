// Pure: the runtime's workload — the Deployment that runs the start contract, its Service, the
// manifest it reads and its tracing environment.
import type { V1Container, V1Deployment, V1EnvVar, V1Volume, V1VolumeMount } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { ANNOTATION_PREFIX } from "../../../../runtime/src/contract/annotations.ts";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import { defaultRuntimeMemory } from "../../../../runtime/src/contract/node-options.ts";
import { eventLoops, withNodeHeap, withPodSettings } from "./pod.ts";
import { podServiceAccount, runtimeNeedsToken, runtimeTokenVolume } from "./identity.ts";
import { childMeta, childNames, HTTPS_PORT, labels, METRICS_PORT, selectorLabels } from "../../reconcile/names.ts";
import type { OperatorSettings, Owner, OwnerMeta, RuntimeTracing } from "../../reconcile/settings.ts";

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
/** Where the runtime pods find their trust bundle (`ca.crt`). */
export const TRUST_DIR = "/etc/ifp/trust";

/** What the runtime Deployment is rendered from. */
export interface RuntimeDeploymentInput {
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
  /** spec.runtime.workers of an Agent: the event loops serving its port (--workers). */
  workers?: number | "auto";
}

/** The label each runtime pod carries with its image's version (kubectl ifp status reads it). */
export const VERSION_LABEL = "app.kubernetes.io/version";
const LABEL_VALUE = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/**
 * The version of a runtime image: the tag its reference names (`repo:TAG` or `repo:TAG@sha256:…`),
 * else, for the install's own runtime image named by digest alone, --runtime-version; undefined
 * when neither says, or the tag cannot be a label value.
 */
export function runtimeImageVersion(
  image: string,
  settings: Pick<OperatorSettings, "runtimeImage" | "runtimeVersion">,
): string | undefined {
  const name = image.split("@")[0]!;
  const last = name.slice(name.lastIndexOf("/") + 1);
  const colon = last.indexOf(":");
  const version =
    colon >= 0 ? last.slice(colon + 1) : image === settings.runtimeImage ? settings.runtimeVersion : undefined;
  return version !== undefined && LABEL_VALUE.test(version) ? version : undefined;
}

/**
 * The runtime Deployment: exactly the start contract a person uses outside Kubernetes, with the
 * manifest, TLS and (agents) signing key mounted from the ConfigMap and Secrets; then the user's
 * pod settings (pod.ts) and the Node.js heap from the memory limit.
 */
function podLabels(opts: RuntimeDeploymentInput): Record<string, string> {
  const version = runtimeImageVersion(opts.image ?? opts.settings.runtimeImage, opts.settings);
  return { ...labels(opts.owner), ...(version ? { [VERSION_LABEL]: version } : {}) };
}

export function runtimeDeployment(opts: RuntimeDeploymentInput): V1Deployment {
  const { owner } = opts;
  const n = childNames(owner.metadata.name);
  const deployment: V1Deployment = {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: childMeta(owner, n.deployment),
    spec: {
      replicas: opts.replicas,
      selector: { matchLabels: selectorLabels(owner) },
      template: {
        metadata: { labels: podLabels(opts), annotations: { [CONFIG_HASH]: opts.configHash } },
        spec: {
          // The resource's own ServiceAccount, or the one it names (identity.ts); no token in
          // the sidecars unless it asks for one.
          serviceAccountName: podServiceAccount(owner, opts.pod),
          automountServiceAccountToken: opts.pod?.automountServiceAccountToken ?? false,
          ...podSecurity(opts.settings),
          containers: [runtimeContainer(opts)],
          volumes: runtimeFiles(opts).volumes,
        },
      },
    },
  };
  return withNodeHeap(
    withPodSettings(deployment, opts.pod),
    opts.mode,
    opts.mode === "agent" ? opts.workers : undefined,
  );
}

/** The pod's security context and image pull Secrets from the operator's settings. */
function podSecurity(settings: OperatorSettings) {
  const runAsUser = settings.runtimeRunAsUser === undefined ? RUNTIME_DEFAULT_ID : settings.runtimeRunAsUser;
  const runAsGroup = settings.runtimeRunAsGroup === undefined ? RUNTIME_DEFAULT_ID : settings.runtimeRunAsGroup;
  const pullSecrets = settings.runtimeImagePullSecrets ?? [];
  return {
    securityContext: {
      runAsNonRoot: true,
      ...(runAsUser === null ? {} : { runAsUser }),
      ...(runAsGroup === null ? {} : { runAsGroup }),
      seccompProfile: { type: "RuntimeDefault" },
    },
    ...(pullSecrets.length ? { imagePullSecrets: pullSecrets.map((name) => ({ name })) } : {}),
  };
}

/** How long a runtime container may take to serve /healthz before the kubelet restarts it. */
export const STARTUP_GRACE_SECONDS = 180;

/** The runtime's container: its arguments, environment, ports, probes, resources and mounts. */
function runtimeContainer(opts: RuntimeDeploymentInput): V1Container {
  const { settings } = opts;
  const files = runtimeFiles(opts);
  // The default memory grows with the event loops; the user's resources replace it (pod.ts).
  const memory = defaultRuntimeMemory(opts.mode === "agent" ? eventLoops(opts.workers) : 1);
  const probe = (path: string) => ({
    httpGet: { path, port: "https", scheme: "HTTPS" },
    periodSeconds: 10,
    timeoutSeconds: 3,
  });
  return {
    name: "runtime",
    image: opts.image ?? settings.runtimeImage,
    imagePullPolicy: settings.runtimeImagePullPolicy,
    args: runtimeArgs(opts),
    env: [
      { name: "IFP_LOG_LEVEL", value: opts.logLevel ?? "info" },
      ...tracingEnv(opts.owner, settings.runtimeTracing),
      ...files.env,
    ],
    ports: [
      { name: "https", containerPort: HTTPS_PORT, protocol: "TCP" },
      { name: "metrics", containerPort: METRICS_PORT, protocol: "TCP" },
    ],
    // Liveness begins once the process serves: a start slowed by a busy node (20 s and more on two
    // loaded cores) is given STARTUP_GRACE_SECONDS instead of being killed while it starts.
    startupProbe: { ...probe("/healthz"), periodSeconds: 2, failureThreshold: STARTUP_GRACE_SECONDS / 2 },
    readinessProbe: probe("/readyz"),
    livenessProbe: probe("/healthz"),
    resources: {
      requests: { cpu: "50m", memory: memory.request },
      limits: { memory: memory.limit },
    },
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    },
    volumeMounts: files.mounts,
  };
}

/** The start contract's command line. */
function runtimeArgs(opts: RuntimeDeploymentInput): string[] {
  const { settings } = opts;
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
  // An Agent of an install of the isolated layout: its tenant's data account through its account's imports.
  if (opts.mode === "agent" && settings.natsLayout === "isolated") args.push("--nats-layout=isolated");
  if (opts.signingSecret) args.push("--signing-key=/etc/ifp/signing/signing.key");
  if (opts.signingSecret && opts.encryptionKey) args.push("--encryption-key=/etc/ifp/signing/encryption.key");
  if (opts.trustedProxies?.length) args.push(`--trusted-proxies=${opts.trustedProxies.join(",")}`);
  if (settings.clusterNetworks?.length) args.push(`--allow-private-targets=${settings.clusterNetworks.join(",")}`);
  if (opts.mode === "agent" && opts.workers !== undefined) args.push(`--workers=${opts.workers}`);
  return args;
}

/** The files the runtime reads (volumes and their mounts) and the environment that points at them. */
function runtimeFiles(opts: RuntimeDeploymentInput): { env: V1EnvVar[]; mounts: V1VolumeMount[]; volumes: V1Volume[] } {
  const { owner, settings } = opts;
  const n = childNames(owner.metadata.name);
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
  const nats = natsCredentialFiles(owner, settings);
  if (runtimeNeedsToken(owner.kind)) {
    // The runtime's own token, in its container only (identity.ts).
    const token = runtimeTokenVolume();
    nats.mounts.push(token.mount);
    nats.volumes.push(token.volume);
  }
  return { env: nats.env, mounts: [...mounts, ...nats.mounts], volumes: [...volumes, ...nats.volumes] };
}

/** How the runtime authenticates to NATS: its own credential, a shared one, or a user and password or token. */
function natsCredentialFiles(
  owner: Owner,
  settings: OperatorSettings,
): { env: V1EnvVar[]; mounts: V1VolumeMount[]; volumes: V1Volume[] } {
  const env: V1EnvVar[] = [];
  const mounts: V1VolumeMount[] = [];
  const volumes: V1Volume[] = [];
  const creds = settings.natsPerResourceCreds
    ? { secretName: `${owner.metadata.name}-nats`, key: "nats.creds" }
    : settings.natsCredsSecret
      ? { secretName: settings.natsCredsSecret.name, key: settings.natsCredsSecret.key }
      : undefined;
  if (creds) {
    env.push({ name: "IFP_NATS_CREDS", value: "/etc/ifp/nats/nats.creds" });
    mounts.push({ name: "nats", mountPath: "/etc/ifp/nats", readOnly: true });
    volumes.push({
      name: "nats",
      secret: { secretName: creds.secretName, items: [{ key: creds.key, path: "nats.creds" }] },
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
  return { env, mounts, volumes };
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
