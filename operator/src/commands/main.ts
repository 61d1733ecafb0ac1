// `ifp-operator`: flags → startManager, with a graceful shutdown on SIGTERM/SIGINT; and
// `ifp-operator prepare-uninstall`, the chart's pre-delete hook (uninstall.ts).
// `ifp-operator reload-nats`, the sidecar of the chart's NATS servers (reload-nats.ts).
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { parseCaBundle } from "../concerns/tls/certs.ts";
import { checkLifetimes, DEFAULT_LIFETIMES, type CertManagerMode } from "../concerns/tls/trust.ts";
import type { RuntimeTracing, TolerationEntry } from "../reconcile/settings.ts";
import { startManager, type ManagerOptions } from "./manager.ts";
import { DEFAULT_ROLLOUT_LIMIT, parseRolloutLimit, type RolloutLimit } from "../concerns/workload/rollout.ts";
import { isCidrOrIp } from "../../../runtime/src/resources/network.ts";
import { createLogger } from "../../../runtime/src/telemetry/log-format.ts";
import { buildInfo, versionLine } from "../../../runtime/src/util/version.ts";
import { errorMessage, Kube } from "../kube/client.ts";
import { prepareUninstall } from "./uninstall.ts";
import { RELOAD_NATS_USAGE } from "./reload-nats.ts";
import { DEFAULT_ACCOUNT_LIMITS, type AccountLimitSettings } from "../concerns/nats/account-limits.ts";
import { bytesOf } from "../../../runtime/src/resources/quantity.ts";
import { DEFAULT_TENANT_LIMITS, INSTALL_NATS_LAYOUTS } from "../concerns/nats/data-accounts.ts";
import { duration, list, readFlags, subcommand, UsageError } from "./flags.ts";
import { parseTolerationEntry } from "../concerns/pod-policy/pod-policy.ts";

const USAGE = `usage: ifp-operator [flags]
       ifp-operator --version       the version and the commit it was built from

Runs the Agent and Relay controllers against the current kubeconfig (in a pod: its service
account). Every flag also reads the environment variable in brackets.

  --kubeconfig FILE               kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config)
  --nats-url URL                  NATS server(s) of the runtimes and relay streams [IFP_NATS_URL]
  --nats-creds FILE               NATS credentials file of the operator itself [IFP_NATS_CREDS]
  --nats-user USER                NATS user of the operator [IFP_NATS_USER]
  --nats-password PASSWORD        NATS password of the operator [IFP_NATS_PASSWORD]
  --nats-token TOKEN              NATS token of the operator [IFP_NATS_TOKEN]
  --nats-account-secret NAME      Secret (operator's namespace) with the NATS account signing key;
                                  generated at first start when absent. Each runtime then gets its
                                  own credential, the Secret <name>-nats [IFP_NATS_ACCOUNT_SECRET]
  --nats-account-secret-namespace NS  its namespace (default: POD_NAMESPACE, else default)
  --nats-creds-secret NAME        Secret in each resource's namespace whose credentials file the
                                  runtime pods mount (IFP_NATS_CREDS)
  --nats-creds-secret-key KEY     its key (default: the file name of --nats-creds, else nats.creds)
  --nats-auth-secret NAME         Secret in each resource's namespace with optional keys user,
                                  password, token, given to the runtime pods as IFP_NATS_USER …
  --nats-account-data-bytes Q     JetStream disk of every runtime's account beside its inbox (an
                                  Agent's spec.inbox.maxBytes) or stream (a Relay's
                                  spec.retention.maxBytes): its outbox and KV buckets, per replica
                                  (quantity, default 64Mi)
  --nats-account-memory-bytes Q   JetStream memory of every runtime's account besides a memory
                                  Relay's stream (default 0: no memory streams)
  --nats-account-unbounded-relay-bytes Q  the disk (or memory) of a Relay whose
                                  spec.retention.maxBytes is -1 (default 1Gi)
  --nats-account-streams N        streams and KV buckets per runtime account (default 16)
  --nats-account-consumers N      consumers per stream of a runtime account (default 10000)
  --nats-account-connections N    client connections per runtime account (default 256)
  --nats-account-subscriptions N  subscriptions per runtime account (default 4096)
  --nats-layout NAME              where the Agents' JetStream objects are: per-agent (default), six
                                  streams and two consumers in each runtime's own account; or
                                  isolated, per namespace a data account of the operator's holding
                                  six shared streams, per Agent an account without JetStream
                                  importing its own subjects and two consumers the operator makes
                                  (docs/scale.md); needs --nats-account-secret [IFP_NATS_LAYOUT]
  --nats-tenant-disk-bytes Q      on the isolated layout, the JetStream disk of each namespace's
                                  data account, reserved in the servers' store (quantity, default 1Gi)
  --nats-tenant-memory-bytes Q    its JetStream memory (default 0)
  --nats-tls MODE                 off (default: TLS as the server offers it, verified with the system
                                  roots) or trust: TLS required, the server's certificate verified with
                                  the install CAs and --extra-cas (the operator) and each runtime's
                                  trust bundle (--nats-ca) [IFP_NATS_TLS]
  --nats-tls-secret NAME          issue the installed NATS's server certificate from the install CA
                                  into this Secret (operator's namespace) and keep it current; implies
                                  --nats-tls=trust [IFP_NATS_TLS_SECRET]
  --nats-tls-dns-names A,B        the names in that certificate: the NATS Services' names
                                  [IFP_NATS_TLS_DNS_NAMES]
  --runtime-image IMAGE           image of the runtime pods [IFP_RUNTIME_IMAGE]
  --runtime-version V             the version of --runtime-image when it names no tag (by digest
                                  alone); runtime pods carry their image's version as the label
                                  app.kubernetes.io/version [IFP_RUNTIME_VERSION]
  --runtime-image-pull-policy P   IfNotPresent (default), Always or Never
  --allowed-images A,B            images an Agent's or Relay's spec.image may name: exact references, or
                                  prefixes ending in * (default: only --runtime-image)
  --allowed-issuers A,B           cert-manager issuers spec.tls.issuerRef may name besides an Issuer
                                  of the resource's namespace: Kind[.group]/name or Kind[.group]/*
                                  (e.g. ClusterIssuer/letsencrypt; default: none)
  --allowed-dns-names A,B         names a certificate of the install CA may carry besides the
                                  resource's own Service names (spec.tls.dnsNames, the host of
                                  spec.baseUrl or spec.url, exposure hosts), and hosts an https
                                  spec.agentId may name: exact, *.domain, or * (default: none)
  --allowed-hosts NS/HOST,...     the same, for the resources of one namespace: NS/host or
                                  NS/*.domain, repeated per host (default: none)
  --allowed-node-labels A,B       node label keys spec.deployment may place pods by (nodeSelector,
                                  nodeAffinity, podAffinity's topologyKey), or * (default: none)
  --allowed-tolerations A,B       tolerations spec.deployment may list: key, key=value, either with
                                  :effect (e.g. dedicated=ifp:NoSchedule), or * (default: none)
  --allowed-priority-classes A,B  PriorityClasses spec.deployment.priorityClassName may name, or *
                                  (default: none)
  --runtime-run-as-user N|none    UID of the runtime pods (default 10001; none leaves it to the
                                  cluster, e.g. OpenShift's restricted SCC)
  --runtime-run-as-group N|none   GID of the runtime pods (default 10001; none leaves it unset)
  --runtime-image-pull-secrets A,B  Secrets in each runtime's namespace used to pull its image
  --cluster-networks CIDRS|none   the cluster's own networks (Service and pod CIDRs), which every
                                  runtime may reach as peers, relays and webhooks besides
                                  spec.network.allowPrivateTargets (--allow-private-targets; default
                                  10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fd00::/8)
  --runtime-network-policies[=true|false]  a NetworkPolicy per Agent and Relay: its TLS port from
                                  anywhere, its metrics port from --metrics-namespaces, an Agent's
                                  local API Service port from its own namespace (default false)
  --metrics-namespaces A,B        namespaces whose pods may reach the runtimes' metrics port under
                                  those NetworkPolicies (default: none)
  --watch-namespaces A,B          watch only these namespaces (default: all) [IFP_WATCH_NAMESPACES]
  --leader-elect[=true|false]     hold a Lease so that one replica acts at a time (default false)
  --leader-election-namespace NS  namespace of the Lease (default: POD_NAMESPACE, else default)
  --health-port N                 /healthz and /readyz (default 8081)
  --metrics-port N                /metrics (default 8080; the health port when equal)
  --resync DURATION               reconcile everything this often without a change (default 5m)
  --workers N                     reconciles in flight per kind (default 4)
  --ca-secret NAME                Secret of the install CA (default ifp-operator-ca)
  --ca-namespace NS               its namespace, the operator's own (default: POD_NAMESPACE, else
                                  default)
  --ca-validity DURATION          validity of an install CA (default 43800h, 5 years)
  --ca-rotate-before DURATION     make and publish the next CA this long before the current one
                                  expires (default 8760h)
  --ca-overlap DURATION           publish the next CA this long before certificates are issued
                                  from it (default 720h)
  --cert-validity DURATION        validity of a default serving certificate (default 8760h)
  --cert-renew-before DURATION    re-issue it this long before it expires (default 720h)
  --extra-ca-file FILE            PEM CA certificates added to every trust bundle [IFP_EXTRA_CA_FILE]
  --cert-manager-issuer KIND[.GROUP]/NAME  cert-manager mode: this issuer (e.g. ClusterIssuer/ifp-ca)
                                  issues the serving certificate of every resource that names none
                                  (spec.tls.secretName, spec.tls.issuerRef), instead of the install
                                  CA; spec.tls.issuerRef may name it too (default: none)
  --cert-manager-bundle NAME      cert-manager mode: a ConfigMap in each resource's namespace (a
                                  trust-manager Bundle's target) whose key joins every trust bundle
  --cert-manager-bundle-key KEY   its key (default ca.crt)
  --max-rolling-agents N|P%       at most this many Agents (or this share of all Agents) have
                                  their pods changed by the operator at once, e.g. for a new
                                  runtime image; the next wait until those are available
                                  (default 25%) [IFP_MAX_ROLLING_AGENTS]
  --finalizer-timeout DURATION    how long a deleted Agent or Relay waits for NATS to clean its
                                  streams up before it goes anyway, with a Warning Event (default 5m)
  --operator-deployment NS/NAME   the operator's own Deployment: when it is gone as the operator
                                  stops (an uninstall), every finalizer is removed first
                                  [IFP_OPERATOR_DEPLOYMENT]
  --runtime-otlp-endpoint URL     OTLP/HTTP collector of the runtimes' traces, rendered as their
                                  OTEL_EXPORTER_OTLP_ENDPOINT (default: no tracing)
                                  [IFP_RUNTIME_OTLP_ENDPOINT]
  --runtime-otel-env JSON         more OTEL_* variables of the runtimes, a JSON object of names and
                                  string values [IFP_RUNTIME_OTEL_ENV]
  --log-level LEVEL               info (default), debug, warn, error [IFP_LOG_LEVEL]

usage: ifp-operator prepare-uninstall --operator-deployment NS/NAME [flags]

The chart's pre-delete hook (a Job with the operator's ServiceAccount, before Helm deletes its
RBAC): deletes the operator's Deployment and waits until its pods are gone (they release their
finalizers as they stop), then removes every ifp.dev/jetstream and ifp.dev/stream finalizer still
held, with a Warning Event on each. Exits 1 when one could not be removed.

  --kubeconfig FILE               as above
  --operator-deployment NS/NAME   the operator's Deployment [IFP_OPERATOR_DEPLOYMENT]
  --watch-namespaces A,B          the namespaces the operator watches (default: all)
                                  [IFP_WATCH_NAMESPACES]
  --timeout DURATION              how long to wait for the Deployment to be gone before releasing
                                  anyway (default 2m)
  --log-level LEVEL               info (default), debug, warn, error [IFP_LOG_LEVEL]
${RELOAD_NATS_USAGE}`;

const PREPARE_UNINSTALL_OPTIONS = {
  kubeconfig: { type: "string" },
  "operator-deployment": { type: "string", env: "IFP_OPERATOR_DEPLOYMENT" },
  "runtime-network-policies": { type: "string" },
  "metrics-namespaces": { type: "string" },
  "watch-namespaces": { type: "string", env: "IFP_WATCH_NAMESPACES" },
  timeout: { type: "string" },
  "log-level": { type: "string", env: "IFP_LOG_LEVEL" },
} as const;

const OPTIONS = {
  kubeconfig: { type: "string" },
  "nats-url": { type: "string", env: "IFP_NATS_URL" },
  "nats-creds": { type: "string", env: "IFP_NATS_CREDS" },
  "nats-user": { type: "string", env: "IFP_NATS_USER" },
  "nats-password": { type: "string", env: "IFP_NATS_PASSWORD" },
  "nats-token": { type: "string", env: "IFP_NATS_TOKEN" },
  "nats-creds-secret": { type: "string" },
  "nats-account-secret": { type: "string", env: "IFP_NATS_ACCOUNT_SECRET" },
  "nats-account-secret-namespace": { type: "string" },
  "nats-creds-secret-key": { type: "string" },
  "nats-account-data-bytes": { type: "string" },
  "nats-account-memory-bytes": { type: "string" },
  "nats-account-unbounded-relay-bytes": { type: "string" },
  "nats-account-streams": { type: "string" },
  "nats-account-consumers": { type: "string" },
  "nats-account-connections": { type: "string" },
  "nats-account-subscriptions": { type: "string" },
  "nats-auth-secret": { type: "string" },
  "nats-layout": { type: "string", env: "IFP_NATS_LAYOUT" },
  "nats-tenant-disk-bytes": { type: "string" },
  "nats-tenant-memory-bytes": { type: "string" },
  "nats-tls": { type: "string", env: "IFP_NATS_TLS" },
  "nats-tls-secret": { type: "string", env: "IFP_NATS_TLS_SECRET" },
  "nats-tls-dns-names": { type: "string", env: "IFP_NATS_TLS_DNS_NAMES" },
  "runtime-image": { type: "string", env: "IFP_RUNTIME_IMAGE" },
  "runtime-version": { type: "string", env: "IFP_RUNTIME_VERSION" },
  "runtime-image-pull-policy": { type: "string" },
  "allowed-images": { type: "string" },
  "allowed-issuers": { type: "string" },
  "allowed-dns-names": { type: "string" },
  "allowed-hosts": { type: "string" },
  "allowed-node-labels": { type: "string" },
  "allowed-tolerations": { type: "string" },
  "allowed-priority-classes": { type: "string" },
  "runtime-run-as-user": { type: "string" },
  "runtime-run-as-group": { type: "string" },
  "runtime-image-pull-secrets": { type: "string" },
  "cluster-networks": { type: "string" },
  "runtime-network-policies": { type: "string" },
  "metrics-namespaces": { type: "string" },
  "watch-namespaces": { type: "string", env: "IFP_WATCH_NAMESPACES" },
  "leader-elect": { type: "string" },
  "leader-election-namespace": { type: "string" },
  "health-port": { type: "string" },
  "metrics-port": { type: "string" },
  resync: { type: "string" },
  workers: { type: "string" },
  "ca-secret": { type: "string" },
  "ca-namespace": { type: "string" },
  "ca-validity": { type: "string" },
  "ca-rotate-before": { type: "string" },
  "ca-overlap": { type: "string" },
  "cert-validity": { type: "string" },
  "cert-renew-before": { type: "string" },
  "extra-ca-file": { type: "string", env: "IFP_EXTRA_CA_FILE" },
  "cert-manager-issuer": { type: "string" },
  "cert-manager-bundle": { type: "string" },
  "cert-manager-bundle-key": { type: "string" },
  "finalizer-timeout": { type: "string" },
  "max-rolling-agents": { type: "string", env: "IFP_MAX_ROLLING_AGENTS" },
  "operator-deployment": { type: "string", env: "IFP_OPERATOR_DEPLOYMENT" },
  "runtime-otlp-endpoint": { type: "string", env: "IFP_RUNTIME_OTLP_ENDPOINT" },
  "runtime-otel-env": { type: "string", env: "IFP_RUNTIME_OTEL_ENV" },
  "log-level": { type: "string", env: "IFP_LOG_LEVEL" },
} as const;

function integer(name: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new UsageError(`--${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(text)}`);
  return n;
}

/** A UID/GID flag: a whole number, or `none` (null) to leave it unset. */
function podId(name: string, text: string): number | null {
  if (text === "none") return null;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n > 2_147_483_647)
    throw new UsageError(`--${name} is a whole number from 0 to 2147483647 or none, not ${JSON.stringify(text)}`);
  return n;
}

/** The runtimes' tracing settings: an http(s) endpoint and OTEL_* variables with string values. */
export function runtimeTracing(endpoint: string | undefined, envJson: string | undefined): RuntimeTracing | undefined {
  if (endpoint !== undefined) {
    let url: URL;
    try {
      url = new URL(endpoint);
    } catch {
      throw new UsageError(`--runtime-otlp-endpoint is an http or https URL, not ${JSON.stringify(endpoint)}`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new UsageError(`--runtime-otlp-endpoint is an http or https URL, not ${JSON.stringify(endpoint)}`);
  }
  let env: Record<string, string> | undefined;
  if (envJson !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(envJson);
    } catch {
      throw new UsageError("--runtime-otel-env is a JSON object of OTEL_* names and string values");
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed))
      throw new UsageError("--runtime-otel-env is a JSON object of OTEL_* names and string values");
    env = {};
    for (const [name, value] of Object.entries(parsed)) {
      if (!/^OTEL_[A-Z0-9_]{1,100}$/.test(name))
        throw new UsageError(
          `--runtime-otel-env sets only OTEL_* variables (upper case, digits, _), not ${JSON.stringify(name)}`,
        );
      if (typeof value !== "string" || value.length > 4096)
        throw new UsageError(`--runtime-otel-env: ${name} is a string of at most 4096 characters`);
      env[name] = value;
    }
  }
  if (endpoint === undefined && !env) return undefined;
  return { ...(endpoint !== undefined ? { otlpEndpoint: endpoint } : {}), ...(env ? { env } : {}) };
}

/** --allowed-issuers: each entry Kind[.group]/name, the name possibly `*`. */
function issuerList(text: string | undefined): string[] {
  const entries = list(text);
  for (const e of entries)
    if (!/^[A-Za-z][A-Za-z0-9]*(\.[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?\/(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.test(e))
      throw new UsageError(
        `--allowed-issuers takes Kind[.group]/name entries such as ClusterIssuer/letsencrypt, not ${JSON.stringify(e)}`,
      );
  return entries;
}

/** The cert-manager mode from --cert-manager-issuer (Kind[.group]/name) and --cert-manager-bundle[-key]; undefined when off. */
export function certManagerMode(
  issuer: string | undefined,
  bundle: string | undefined,
  bundleKey: string | undefined,
): CertManagerMode | undefined {
  const mode: CertManagerMode = {};
  if (issuer !== undefined) {
    const m =
      /^([A-Za-z][A-Za-z0-9]*)(?:\.([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?))?\/([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)$/.exec(
        issuer,
      );
    if (!m)
      throw new UsageError(
        `--cert-manager-issuer takes Kind[.group]/name such as ClusterIssuer/ifp-ca, not ${JSON.stringify(issuer)}`,
      );
    mode.issuerRef = { name: m[3]!, kind: m[1]!, group: m[2] ?? "cert-manager.io" };
  }
  if (bundleKey !== undefined && bundle === undefined)
    throw new UsageError("--cert-manager-bundle-key needs --cert-manager-bundle");
  if (bundle !== undefined) {
    if (bundle.length > 253 || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(bundle))
      throw new UsageError(`--cert-manager-bundle takes a ConfigMap name, not ${JSON.stringify(bundle)}`);
    const key = bundleKey ?? "ca.crt";
    if (key.length > 253 || !/^[-._a-zA-Z0-9]+$/.test(key))
      throw new UsageError(`--cert-manager-bundle-key takes a ConfigMap key, not ${JSON.stringify(key)}`);
    mode.bundle = { configMapName: bundle, key };
  }
  return mode.issuerRef || mode.bundle ? mode : undefined;
}

/** --allowed-dns-names: each entry a DNS name, `*.` and a domain, or `*`. */
function dnsNameList(text: string | undefined): string[] {
  const entries = list(text);
  for (const e of entries)
    if (!/^(\*|(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*)$/.test(e))
      throw new UsageError(`--allowed-dns-names takes DNS names, *.domain or *, not ${JSON.stringify(e)}`);
  return entries;
}

/** --allowed-node-labels: label keys, or `*`. */
function nodeLabelList(text: string | undefined): string[] {
  const entries = list(text);
  for (const e of entries)
    if (!/^(\*|([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/.test(e))
      throw new UsageError(
        `--allowed-node-labels takes node label keys such as topology.kubernetes.io/zone, or *, not ${JSON.stringify(e)}`,
      );
  return entries;
}

/** --allowed-tolerations: key[=value][:effect], or `*`. */
function tolerationList(text: string | undefined): TolerationEntry[] {
  return list(text).map((e) => {
    const entry = parseTolerationEntry(e);
    if (!entry)
      throw new UsageError(
        `--allowed-tolerations takes key, key=value, either with :NoSchedule, :PreferNoSchedule or :NoExecute, or *, not ${JSON.stringify(e)}`,
      );
    return entry;
  });
}

/** --allowed-priority-classes: PriorityClass names, or `*`. */
function priorityClassList(text: string | undefined): string[] {
  const entries = list(text);
  for (const e of entries)
    if (!/^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.test(e) || e.length > 253)
      throw new UsageError(`--allowed-priority-classes takes PriorityClass names, or *, not ${JSON.stringify(e)}`);
  return entries;
}

/** --allowed-hosts: NS/host entries (host exact or `*.<domain>`), gathered by namespace. */
function namespaceHosts(text: string | undefined): Record<string, string[]> {
  const hosts: Record<string, string[]> = {};
  for (const e of list(text)) {
    const m =
      /^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/((\*\.)?[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*)$/.exec(
        e,
      );
    if (!m)
      throw new UsageError(
        `--allowed-hosts takes namespace/host entries (the host exact or *.domain), such as team/shop.example.com, not ${JSON.stringify(e)}`,
      );
    const ns = m[1]!;
    hosts[ns] = [...(Object.hasOwn(hosts, ns) ? hosts[ns]! : []), m[3]!];
  }
  return hosts;
}

/** A list of namespace names. */
function namespaceList(flag: string, text: string | undefined): string[] {
  const entries = list(text);
  for (const e of entries)
    if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(e))
      throw new UsageError(`--${flag} takes namespace names, not ${JSON.stringify(e)}`);
  return entries;
}

/** The networks runtimes may reach inside the cluster: private ranges unless told which. */
export const DEFAULT_CLUSTER_NETWORKS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"];

function clusterNetworks(text: string | undefined): string[] {
  if (text === undefined) return DEFAULT_CLUSTER_NETWORKS;
  if (text.trim() === "none") return [];
  const blocks = list(text);
  const bad = blocks.filter((b) => !isCidrOrIp(b));
  if (bad.length)
    throw new UsageError(
      `--cluster-networks takes IP addresses or CIDR blocks such as 10.96.0.0/12, or none, not ${bad.map((b) => JSON.stringify(b)).join(", ")}`,
    );
  return blocks;
}

/** --operator-deployment: NAMESPACE/NAME. */
function deploymentRef(text: string | undefined): { namespace: string; name: string } | undefined {
  if (text === undefined) return undefined;
  const m = /^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)$/.exec(text);
  if (!m) throw new UsageError(`--operator-deployment takes NAMESPACE/NAME, not ${JSON.stringify(text)}`);
  return { namespace: m[1]!, name: m[3]! };
}

/** The flags of `ifp-operator prepare-uninstall` (throws UsageError on bad input). */
export function parsePrepareUninstallFlags(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): {
  help: boolean;
  kubeconfig?: string;
  deployment: { namespace: string; name: string };
  namespaces: string[];
  timeoutMs: number;
  logLevel: string;
} {
  const { values, str } = readFlags(PREPARE_UNINSTALL_OPTIONS, argv, env);
  const deployment = deploymentRef(str("operator-deployment"));
  if (!deployment && !values.help) throw new UsageError("prepare-uninstall needs --operator-deployment NAMESPACE/NAME");
  return {
    help: Boolean(values.help),
    kubeconfig: str("kubeconfig"),
    deployment: deployment ?? { namespace: "", name: "" },
    namespaces: list(str("watch-namespaces")),
    timeoutMs: duration(str("timeout") ?? "2m", "timeout"),
    logLevel: str("log-level") ?? "info",
  };
}

function prepareUninstallMain(argv: string[]): Promise<void> {
  return subcommand("prepare-uninstall", USAGE, argv, parsePrepareUninstallFlags, async (parsed, log) => {
    const kc = new KubeConfig();
    if (parsed.kubeconfig) kc.loadFromFile(parsed.kubeconfig);
    else kc.loadFromDefault();
    try {
      const result = await prepareUninstall({
        kube: new Kube(kc, log),
        deployment: parsed.deployment,
        namespaces: parsed.namespaces,
        timeoutMs: parsed.timeoutMs,
        log,
      });
      process.exitCode = result.held.length ? 1 : 0;
    } catch (err) {
      log.error({ err: errorMessage(err) }, "could not prepare the uninstall");
      process.exitCode = 1;
    }
  });
}

/** One flag's value, from the command line or its environment variable. */
type Flag = (name: keyof typeof OPTIONS) => string | undefined;

/** Manager options from the command line and environment (throws UsageError on bad input). */
export function parseFlags(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): { help: boolean; logLevel: string; options: Omit<ManagerOptions, "log"> } {
  // A bare --leader-elect means true.
  const { values, str } = readFlags(
    OPTIONS,
    argv.map((a) =>
      a === "--leader-elect"
        ? "--leader-elect=true"
        : a === "--runtime-network-policies"
          ? "--runtime-network-policies=true"
          : a,
    ),
    env,
  );
  const leaderElect = choice(str, "leader-elect", ["true", "false"], "true or false");
  const settings = runtimeSettings(str);
  const nats = natsOptions(str, env);
  const trust = trustOptions(str, env);
  let rolloutLimit: RolloutLimit;
  try {
    rolloutLimit = parseRolloutLimit(str("max-rolling-agents") ?? DEFAULT_ROLLOUT_LIMIT);
  } catch (err) {
    throw new UsageError(`--max-rolling-agents ${(err as Error).message}`);
  }
  return {
    help: Boolean(values.help),
    logLevel: str("log-level") ?? "info",
    options: {
      kubeconfig: str("kubeconfig"),
      settings,
      ...nats,
      natsAccountLimits: accountLimits(str),
      ...natsLayout(str),
      watchNamespaces: list(str("watch-namespaces")),
      leaderElection:
        leaderElect === "true"
          ? { namespace: str("leader-election-namespace") ?? env.POD_NAMESPACE ?? "default", identity: env.POD_NAME }
          : undefined,
      healthPort: integer("health-port", str("health-port") ?? "8081", 0, 65535),
      metricsPort: integer("metrics-port", str("metrics-port") ?? "8080", 0, 65535),
      resyncMs: duration(str("resync") ?? "5m"),
      workers: integer("workers", str("workers") ?? "4", 1, 64),
      rolloutLimit,
      finalizerTimeoutMs: duration(str("finalizer-timeout") ?? "5m", "finalizer-timeout"),
      operatorDeployment: deploymentRef(str("operator-deployment")),
      trust,
    },
  };
}

/** A flag with one of a few values (by default the last of `allowed`, unless `fallback`). */
function choice(str: Flag, name: keyof typeof OPTIONS, allowed: string[], words: string, fallback?: string): string {
  const value = str(name) ?? fallback ?? allowed[allowed.length - 1]!;
  if (!allowed.includes(value)) throw new UsageError(`--${name} is ${words}, not ${JSON.stringify(value)}`);
  return value;
}

/** What shapes the runtimes' children: image, what their specs may ask for, NATS for the pods, tracing, policies. */
function runtimeSettings(str: Flag): ManagerOptions["settings"] {
  const networkPolicies = choice(str, "runtime-network-policies", ["true", "false"], "true or false");
  const pullPolicy = choice(
    str,
    "runtime-image-pull-policy",
    ["IfNotPresent", "Always", "Never"],
    "IfNotPresent, Always or Never",
    "IfNotPresent",
  );
  const credsSecret = str("nats-creds-secret");
  const credsFile = str("nats-creds");
  return {
    runtimeImage: str("runtime-image") ?? `ghcr.io/ifp-dev/ifp-runtime:${buildInfo().version}`,
    ...(str("runtime-version") ? { runtimeVersion: str("runtime-version") } : {}),
    runtimeImagePullPolicy: pullPolicy,
    allowedImages: list(str("allowed-images")),
    allowedIssuers: issuerList(str("allowed-issuers")),
    allowedDnsNames: dnsNameList(str("allowed-dns-names")),
    allowedHosts: namespaceHosts(str("allowed-hosts")),
    allowedNodeLabels: nodeLabelList(str("allowed-node-labels")),
    allowedTolerations: tolerationList(str("allowed-tolerations")),
    allowedPriorityClasses: priorityClassList(str("allowed-priority-classes")),
    natsUrl: str("nats-url") ?? "nats://nats:4222",
    natsCredsSecret: credsSecret
      ? { name: credsSecret, key: str("nats-creds-secret-key") ?? (credsFile ? basename(credsFile) : "nats.creds") }
      : undefined,
    natsAuthSecret: str("nats-auth-secret"),
    runtimeRunAsUser: podId("runtime-run-as-user", str("runtime-run-as-user") ?? "10001"),
    runtimeRunAsGroup: podId("runtime-run-as-group", str("runtime-run-as-group") ?? "10001"),
    runtimeImagePullSecrets: list(str("runtime-image-pull-secrets")),
    clusterNetworks: clusterNetworks(str("cluster-networks")),

    runtimeTracing: runtimeTracing(str("runtime-otlp-endpoint"), str("runtime-otel-env")),
    runtimeNetworkPolicies:
      networkPolicies === "true"
        ? { metricsNamespaces: namespaceList("metrics-namespaces", str("metrics-namespaces")) }
        : undefined,
  };
}

/** A byte size flag: a whole number of bytes, or a quantity (64Mi, 1Gi). */
function byteSize(name: string, text: string): number {
  const bytes = bytesOf(text);
  if (bytes === undefined)
    throw new UsageError(
      `--${name} must be a whole number of bytes or a quantity such as 64Mi, not ${JSON.stringify(text)}`,
    );
  return bytes;
}

/** What every runtime's NATS account may hold (concerns/nats/account-limits.ts). */
function accountLimits(str: Flag): AccountLimitSettings {
  const d = DEFAULT_ACCOUNT_LIMITS;
  const count = (name: keyof typeof OPTIONS, fallback: number) =>
    integer(name, str(name) ?? String(fallback), 1, 1_000_000);
  const size = (name: keyof typeof OPTIONS, fallback: number) => byteSize(name, str(name) ?? String(fallback));
  return {
    dataBytes: size("nats-account-data-bytes", d.dataBytes),
    memoryBytes: size("nats-account-memory-bytes", d.memoryBytes),
    unboundedRelayBytes: size("nats-account-unbounded-relay-bytes", d.unboundedRelayBytes),
    streams: count("nats-account-streams", d.streams),
    consumers: count("nats-account-consumers", d.consumers),
    connections: count("nats-account-connections", d.connections),
    subscriptions: count("nats-account-subscriptions", d.subscriptions),
  };
}

/** The install's NATS layout and, on the isolated one, what each tenant's data account may hold. */
function natsLayout(str: Flag): Pick<ManagerOptions, "natsLayout" | "natsTenantLimits"> {
  const layout = choice(str, "nats-layout", [...INSTALL_NATS_LAYOUTS], INSTALL_NATS_LAYOUTS.join(" or "), "per-agent");
  if (layout !== "isolated") {
    for (const flag of ["nats-tenant-disk-bytes", "nats-tenant-memory-bytes"] as const)
      if (str(flag) !== undefined) throw new UsageError(`--${flag} needs --nats-layout isolated`);
    return {};
  }
  if (!str("nats-account-secret"))
    throw new UsageError("--nats-layout isolated needs --nats-account-secret: the operator makes the data accounts");
  const d = DEFAULT_TENANT_LIMITS;
  const diskBytes = byteSize("nats-tenant-disk-bytes", str("nats-tenant-disk-bytes") ?? String(d.diskBytes));
  // A data account without disk would have no JetStream (a limit of 0), and none without a limit may exist.
  if (diskBytes < 1) throw new UsageError("--nats-tenant-disk-bytes must be at least one byte");
  return {
    natsLayout: "isolated",
    natsTenantLimits: {
      diskBytes,
      memBytes: byteSize("nats-tenant-memory-bytes", str("nats-tenant-memory-bytes") ?? String(d.memBytes)),
    },
  };
}

/** The operator's own NATS: its connection, the account Secret, TLS from the install's trust, the NATS servers' certificate. */
function natsOptions(
  str: Flag,
  env: NodeJS.ProcessEnv,
): Pick<ManagerOptions, "natsAccount" | "nats" | "natsTlsVerifyWithTrust" | "natsServerTls"> {
  const natsUrl = str("nats-url");
  const natsTlsSecret = str("nats-tls-secret");
  const natsTls = choice(str, "nats-tls", ["off", "trust"], "off or trust", natsTlsSecret ? "trust" : "off");
  if (natsTlsSecret && natsTls !== "trust")
    throw new UsageError(
      "--nats-tls-secret issues a certificate of the install CA: it needs --nats-tls=trust (or no --nats-tls)",
    );
  const natsTlsDnsNames = list(str("nats-tls-dns-names"));
  if (natsTlsSecret && !natsTlsDnsNames.length)
    throw new UsageError("--nats-tls-secret needs --nats-tls-dns-names: the names clients reach the NATS servers by");
  return {
    natsAccount: str("nats-account-secret")
      ? {
          name: str("nats-account-secret")!,
          namespace: str("nats-account-secret-namespace") ?? env.POD_NAMESPACE ?? "default",
        }
      : undefined,
    nats: natsUrl
      ? {
          url: natsUrl,
          credsFile: str("nats-creds"),
          user: str("nats-user"),
          pass: str("nats-password"),
          token: str("nats-token"),
        }
      : undefined,
    natsTlsVerifyWithTrust: natsTls === "trust" || undefined,
    natsServerTls: natsTlsSecret
      ? {
          secretName: natsTlsSecret,
          dnsNames: natsTlsDnsNames,
          namespace: str("ca-namespace") ?? env.POD_NAMESPACE ?? "default",
        }
      : undefined,
  };
}

/** The install CA: its Secret, lifetimes (checked together), extra CAs, and the cert-manager mode. */
function trustOptions(str: Flag, env: NodeJS.ProcessEnv): NonNullable<ManagerOptions["trust"]> {
  const lifetime = (name: keyof typeof OPTIONS, fallback: number) => {
    const text = str(name);
    return text === undefined ? fallback : duration(text, name);
  };
  const lifetimes = {
    caValidityMs: lifetime("ca-validity", DEFAULT_LIFETIMES.caValidityMs),
    caRotateBeforeMs: lifetime("ca-rotate-before", DEFAULT_LIFETIMES.caRotateBeforeMs),
    caOverlapMs: lifetime("ca-overlap", DEFAULT_LIFETIMES.caOverlapMs),
    certValidityMs: lifetime("cert-validity", DEFAULT_LIFETIMES.certValidityMs),
    certRenewBeforeMs: lifetime("cert-renew-before", DEFAULT_LIFETIMES.certRenewBeforeMs),
  };
  try {
    checkLifetimes(lifetimes);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const extraCaFile = str("extra-ca-file");
  let extraCas: string | undefined;
  if (extraCaFile) {
    try {
      extraCas = readFileSync(extraCaFile, "utf8");
      if (extraCas.trim()) parseCaBundle(extraCas);
    } catch (err) {
      throw new UsageError(`--extra-ca-file ${extraCaFile}: ${(err as Error).message}`);
    }
  }
  return {
    namespace: str("ca-namespace") ?? env.POD_NAMESPACE ?? "default",
    secretName: str("ca-secret") ?? "ifp-operator-ca",
    lifetimes,
    extraCas,
    certManager: certManagerMode(
      str("cert-manager-issuer"),
      str("cert-manager-bundle"),
      str("cert-manager-bundle-key"),
    ),
  };
}

export async function main(argv = process.argv.slice(2)): Promise<void> {
  if (argv[0] === "prepare-uninstall") return prepareUninstallMain(argv.slice(1));
  if (argv[0] === "--version" || argv[0] === "-V" || argv[0] === "version") {
    process.stdout.write(`${versionLine("ifp-operator")}\n`);
    return;
  }
  let parsed: ReturnType<typeof parseFlags>;
  try {
    parsed = parseFlags(argv);
  } catch (err) {
    process.stderr.write(`ifp-operator: ${(err as Error).message}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  if (parsed.help) {
    process.stdout.write(USAGE);
    return;
  }
  const log = createLogger({ level: parsed.logLevel, component: "ifp-operator" });
  log.info(buildInfo(), "operator starting");
  if (!parsed.options.nats)
    log.warn("no --nats-url: relays report StreamReady=False NatsUnavailable and runtimes get nats://nats:4222");
  let manager: Awaited<ReturnType<typeof startManager>>;
  try {
    manager = await startManager({ ...parsed.options, log });
  } catch (err) {
    log.error({ err: (err as Error).message }, "could not start");
    process.exitCode = 1;
    return;
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "shutting down");
    setTimeout(() => process.exit(1), 25_000).unref();
    manager.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
}
