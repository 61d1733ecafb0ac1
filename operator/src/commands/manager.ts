// The operator process: informers feed one controller (keyed work queue and workers, in
// kube/controller.ts) per kind; children map back to their Agent or Relay; every resource is
// also resynced periodically. Controllers run only while this replica holds the leader lease
// (when leader election is on).
import { hostname } from "node:os";
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { Nats, type NatsOptions } from "../../../runtime/src/nats/connection.ts";
import { ensureReplicatedStream, placementOf } from "../../../runtime/src/nats/streams.ts";
import { OPERATOR_INBOX_PREFIX, operatorPermissions } from "../../../runtime/src/contract/nats-permissions.ts";
import { holdNatsCredential, loadNatsIssuer } from "../concerns/nats/runtime-credential.ts";
import { deleteRuntimeData, inRuntimeAccount, readTenantAgent } from "../concerns/nats/runtime-account.ts";
import { NatsAccounts } from "../concerns/nats/accounts.ts";
import type { AccountLimitSettings } from "../concerns/nats/account-limits.ts";
import { DataAccounts, type InstallNatsLayout } from "../concerns/nats/data-accounts.ts";
import type { TenantLimits } from "../concerns/nats/shared-accounts.ts";
import type { CredentialIssuer } from "../concerns/nats/credential-issuer.ts";
import { reconcileAgent } from "../kinds/agent/controller.ts";
import { NamespaceLabels } from "../kube/namespace-labels.ts";
import { reconcileRelay } from "../kinds/relay/controller.ts";
import type { AgentContext } from "../kinds/agent/context.ts";
import type { RelayContext } from "../kinds/relay/context.ts";
import { ownerOf } from "../reconcile/names.ts";
import type { OperatorSettings } from "../reconcile/settings.ts";
import { InstallTrust, joinBundle, type CertManagerMode, type TrustLifetimes } from "../concerns/tls/trust.ts";
import { NatsServerTls } from "../concerns/tls/nats-tls.ts";
import { holdTlsValues } from "../concerns/tls/tls.ts";
import { issuerEntry } from "../reconcile/references.ts";
import { serveHealth } from "./health.ts";
import { type CacheHolds, Caches, type CachedKind } from "../kube/caches.ts";
import { errorMessage, Kube } from "../kube/client.ts";
import { ObservedKubeConfig } from "../kube/rest-client.ts";
import { Controller, type Reconcile } from "../kube/controller.ts";
import { LEADER_VERSION_ANNOTATION, LeaderElector } from "./leader.ts";
import {
  DEFAULT_ROLLOUT_LIMIT,
  parseRolloutLimit,
  RolloutGate,
  type RolloutLimit,
} from "../concerns/workload/rollout.ts";
import { DEFAULT_FINALIZER_TIMEOUT_MS, Deletions, releaseAllFinalizers } from "../reconcile/finalizers.ts";
import { createOperatorMetrics } from "./metrics.ts";
import { buildInfo } from "../../../runtime/src/util/version.ts";
import { SummaryCollector } from "../concerns/nats/traffic-summary.ts";

export interface ManagerOptions {
  /** A kubeconfig file; default: in-cluster inside a pod, else $KUBECONFIG or ~/.kube/config. */
  kubeconfig?: string;
  settings: OperatorSettings;
  /** The operator's own NATS connection (relay streams); without it relays report NatsUnavailable. */
  nats?: Omit<NatsOptions, "name">;
  /**
   * The Secret with the NATS account signing key (generated at first start when absent): the
   * operator then issues each runtime its own credential, and itself one for relay streams.
   */
  natsAccount?: { namespace: string; name: string };
  /** What every runtime's NATS account may hold (default DEFAULT_ACCOUNT_LIMITS). */
  natsAccountLimits?: AccountLimitSettings;
  /**
   * Where the Agents' JetStream objects are (default per-agent): `isolated` makes a data account
   * per namespace with Agents and each Agent's consumers there (concerns/nats/data-accounts.ts); it needs
   * one account per runtime (the operator and system keys) and `nats`.
   */
  natsLayout?: InstallNatsLayout;
  /** What each tenant's data account may hold on the isolated layout (default DEFAULT_TENANT_LIMITS). */
  natsTenantLimits?: TenantLimits;
  /** The pool of connections into the runtimes' accounts (defaults: 8 connections, closed after 30 s unused). */
  natsAccountPool?: { maxConnections?: number; idleMs?: number };
  /**
   * The installed NATS's server certificate: issued by the install CA into this Secret for these
   * names and kept current (concerns/tls/nats-tls.ts).
   */
  natsServerTls?: { namespace: string; secretName: string; dnsNames: string[] };
  /**
   * NATS serves TLS with a certificate of the install's trust (the install CA, or a CA of
   * trust.extraCas): the operator verifies it with the install CAs and the extra CAs, and each
   * runtime with its trust bundle (`--nats-ca`).
   */
  natsTlsVerifyWithTrust?: boolean;
  /** Namespaces to watch; empty: all. */
  watchNamespaces: string[];
  leaderElection?: { namespace: string; name?: string; identity?: string; leaseSeconds?: number };
  /** Called when leadership is lost; default: exit the process (a new one starts as a standby). */
  onLostLeadership?: () => void;
  healthPort?: number;
  metricsPort?: number;
  /** How often every resource is reconciled even without a change (default 5 minutes). */
  resyncMs?: number;
  /** Reconciles in flight per kind (never two for one key). */
  workers?: number;
  /**
   * The install CA: its Secret (default ifp-operator-ca in POD_NAMESPACE, else default), lifetimes,
   * extra CAs (PEM); and the cert-manager mode (an issuer of the default certificates, a bundle
   * ConfigMap in each namespace), off when absent.
   */
  trust?: {
    namespace?: string;
    secretName?: string;
    lifetimes?: Partial<TrustLifetimes>;
    extraCas?: string;
    certManager?: CertManagerMode;
  };
  /** How many Agents may have their Deployment changed by the operator at once (default 25%). */
  rolloutLimit?: RolloutLimit;
  /** How long a finalizer waits for NATS before it lets its resource go (default 5 minutes). */
  finalizerTimeoutMs?: number;
  /** How often the traffic summary in status is read from NATS (default 1 minute). */
  summaryIntervalMs?: number;
  /**
   * The operator's own Deployment. When it is gone or being deleted as this process stops, the
   * operator is being uninstalled: it removes every finalizer it set before it exits.
   */
  operatorDeployment?: { namespace: string; name: string };
  log: Logger;
}

export interface RunningManager {
  metrics: ReturnType<typeof createOperatorMetrics>;
  caches: Caches;
  trust: InstallTrust;
  healthUrl: string | undefined;
  metricsUrl: string | undefined;
  /** Resolves once this replica leads, its caches have synced and its workers run. */
  started: Promise<void>;
  readonly leading: boolean;
  stop(): Promise<void>;
}

type Kind = "Agent" | "Relay";

/**
 * What the caches hold of the Secrets, as the concerns that read them say: a TLS Secret's PEM as
 * digests (tls.ts), a NATS credential as its facts (runtime-credential.ts).
 */
export const CACHE_HOLDS: CacheHolds = {
  Secret: (secret) => {
    holdTlsValues(secret);
    holdNatsCredential(secret);
  },
};

/** What every reconcile runs in: the pass's own context and what the concerns of each kind declare. */
type OperatorContext = AgentContext & RelayContext;

export async function startManager(opts: ManagerOptions): Promise<RunningManager> {
  const log = opts.log;
  const metrics = createOperatorMetrics();
  const kc = kubeConfig(opts, metrics);
  const kube = new Kube(kc, log, (verb, kind) => metrics.writes.inc({ verb, kind }));
  const controllers = {} as Record<Kind, Controller>;
  const enqueue = (kind: CachedKind, obj: KubernetesObject) => enqueueFor(caches, controllers, kind, obj);
  const caches = new Caches(kc, opts.watchNamespaces, log, enqueue, { hold: CACHE_HOLDS });
  const abort = new AbortController();
  const trust = installTrust(opts, kube);
  // NATS back after a loss: what it no longer holds is made again (afterNatsReconnect).
  const natsSide = await connectNats(opts, kube, trust, abort.signal, () => afterNatsReconnect(run));
  const ctx = reconcileContext(opts, kube, caches, trust, natsSide);
  const pool = natsSide.natsAccounts;
  if (pool) metrics.readPoolFrom(() => ({ open: pool.size, opened: pool.opened }));
  const summaries = summaryCollector(opts, ctx, enqueue);
  ctx.summaries = summaries;
  Object.assign(controllers, kindControllers(ctx, caches, metrics, log));
  const run: ManagerRun = {
    opts,
    ctx,
    metrics,
    controllers,
    enqueue,
    abort,
    nats: natsSide,
    summaries,
    natsServerTls: opts.natsServerTls ? new NatsServerTls(kube, trust, { ...opts.natsServerTls, log }) : undefined,
    elector: opts.leaderElection ? leaderElector(opts, kc) : undefined,
    leading: !opts.leaderElection,
    stopping: false,
    trustLoaded: false,
    loops: [],
  };
  const health = await serveHealth(
    { healthPort: opts.healthPort, metricsPort: opts.metricsPort },
    () => notReady(run),
    metrics.registry,
  );
  const depth = recordQueueDepths(metrics, controllers, caches);
  const started = lead(run);
  started.catch((err) => log.error({ err: errorMessage(err) }, "operator could not start"));
  return runningManager(run, { caches, trust, health, depth, started });
}

/** The kubeconfig of the options (or the default one), each request counted by code, method and host. */
function kubeConfig(opts: ManagerOptions, metrics: ReturnType<typeof createOperatorMetrics>): ObservedKubeConfig {
  const kc = new ObservedKubeConfig((method, host, code) => metrics.shared.restRequests.inc({ code, method, host }));
  if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
  else kc.loadFromDefault();
  return kc;
}

/** One controller per kind, reconciling in `ctx`; a failure of a resource no longer in the cache is not retried. */
function kindControllers(
  ctx: OperatorContext,
  caches: Caches,
  metrics: ReturnType<typeof createOperatorMetrics>,
  log: Logger,
): Record<Kind, Controller> {
  const controller = (kind: Kind, reconcile: Reconcile) =>
    new Controller({ kind, reconcile, exists: (ns, name) => !!caches.get(kind, ns, name), metrics, log });
  return {
    Agent: controller("Agent", (ns, name) => reconcileAgent(ctx, ns, name)),
    Relay: controller("Relay", (ns, name) => reconcileRelay(ctx, ns, name)),
  };
}

/** The handle of a started manager: what it serves and holds, whether it leads, and its stop. */
function runningManager(
  run: ManagerRun,
  parts: {
    caches: Caches;
    trust: InstallTrust;
    health: Awaited<ReturnType<typeof serveHealth>>;
    depth: NodeJS.Timeout;
    started: Promise<void>;
  },
): RunningManager {
  const { caches, trust, health, depth, started } = parts;
  return {
    metrics: run.metrics,
    caches,
    trust,
    healthUrl: health.url,
    metricsUrl: health.metricsUrl,
    started,
    get leading() {
      return run.leading;
    },
    async stop() {
      if (run.stopping) return;
      clearInterval(depth);
      await stopManager(run);
      await health.close();
      run.opts.log.info("operator stopped");
    },
  };
}

/** What every reconcile runs in: the clients, the caches, the settings, the install trust, the NATS side, the bookkeeping. */
function reconcileContext(
  opts: ManagerOptions,
  kube: Kube,
  caches: Caches,
  trust: InstallTrust,
  natsSide: NatsSide,
): OperatorContext {
  return {
    kube,
    caches,
    settings: operatorSettings(opts, natsSide),
    log: opts.log,
    nats: natsSide.nats,
    trust,
    natsIssuer: natsSide.natsIssuer,
    natsAccounts: natsSide.natsAccounts,
    dataAccounts: natsSide.dataAccounts,
    deletions: new Deletions(opts.finalizerTimeoutMs ?? DEFAULT_FINALIZER_TIMEOUT_MS),
    rollouts: new RolloutGate(opts.rolloutLimit ?? parseRolloutLimit(DEFAULT_ROLLOUT_LIMIT)),
    agentIds: new Map(),
    namespaceLabels: new NamespaceLabels(kube, opts.log),
  };
}

/** The queue depths and informer restarts, each second. */
function recordQueueDepths(
  metrics: ReturnType<typeof createOperatorMetrics>,
  controllers: Record<Kind, Controller>,
  caches: Caches,
): NodeJS.Timeout {
  const depth = setInterval(() => {
    for (const c of Object.values(controllers)) c.recordQueueDepth();
    metrics.informerRestarts.set(caches.restarts);
  }, 1000);
  depth.unref();
  return depth;
}

/** What a running manager holds between its start and its stop. */
interface ManagerRun {
  opts: ManagerOptions;
  ctx: OperatorContext;
  metrics: ReturnType<typeof createOperatorMetrics>;
  controllers: Record<Kind, Controller>;
  enqueue: (kind: CachedKind, obj: KubernetesObject) => void;
  abort: AbortController;
  nats: NatsSide;
  summaries?: SummaryCollector;
  natsServerTls?: NatsServerTls;
  elector?: LeaderElector;
  leading: boolean;
  stopping: boolean;
  trustLoaded: boolean;
  loops: Promise<void>[];
  resync?: NodeJS.Timeout;
  /** The look at what NATS still holds after a reconnect, one at a time (afterNatsReconnect). */
  natsRecheck?: Promise<void>;
}

/**
 * A change of an object enqueues the Agent or Relay it belongs to; a change of an Agent also those
 * that may select it (spec.peerSelector: its keys or endpoint may have changed, or it may match
 * now or no more) and those claiming its agent id (the one the install vouches for takes it from
 * one it does not).
 */
function enqueueFor(caches: Caches, controllers: Record<Kind, Controller>, kind: CachedKind, obj: KubernetesObject) {
  const ns = obj.metadata?.namespace;
  if (!ns) return;
  if (kind === "Agent") {
    const agentId = (obj as { spec?: { agentId?: unknown } }).spec?.agentId;
    for (const o of caches.list<KubernetesObject & { spec?: { peerSelector?: unknown; agentId?: unknown } }>("Agent")) {
      if ((o.spec?.peerSelector || o.spec?.agentId === agentId) && o.metadata?.uid !== obj.metadata?.uid)
        controllers.Agent.enqueue(o.metadata!.namespace!, o.metadata!.name!);
    }
  }
  if (kind === "Agent" || kind === "Relay") return controllers[kind].enqueue(ns, obj.metadata!.name!);
  const owner = ownerOf(obj);
  if (owner) controllers[owner.kind].enqueue(ns, owner.name);
}

function installTrust(opts: ManagerOptions, kube: Kube): InstallTrust {
  return new InstallTrust(kube, {
    namespace: opts.trust?.namespace ?? opts.leaderElection?.namespace ?? process.env.POD_NAMESPACE ?? "default",
    secretName: opts.trust?.secretName ?? "ifp-operator-ca",
    lifetimes: opts.trust?.lifetimes,
    extraCas: opts.trust?.extraCas,
    certManager: opts.trust?.certManager,
    log: opts.log,
  });
}

/** The operator's side of NATS: its credential issuer, its own connection, the runtimes' accounts. */
interface NatsSide {
  natsIssuer?: CredentialIssuer;
  nats?: Nats;
  natsAccounts?: NatsAccounts;
  /** The tenants' data accounts, on the isolated layout. */
  dataAccounts?: DataAccounts;
  /** NATS is verified with the install's trust: the operator connects once it holds the install CAs. */
  fromTrust: boolean;
  /** The daily renewal of the credential the operator issued itself. */
  renewOwn?: NodeJS.Timeout;
}

async function connectNats(
  opts: ManagerOptions,
  kube: Kube,
  trust: InstallTrust,
  signal: AbortSignal,
  onReconnect: () => void,
): Promise<NatsSide> {
  const log = opts.log;
  const natsIssuer = opts.natsAccount
    ? await loadNatsIssuer(kube, opts.natsAccount.namespace, opts.natsAccount.name, log)
    : undefined;
  // With the signing key and no credential of its own, the operator issues itself one (relay
  // streams only), renewed daily and read at each (re)connect.
  let ownCreds: Uint8Array | undefined;
  const issueOwn = async () => {
    ownCreds = new TextEncoder().encode(await natsIssuer!.issue("ifp-operator", operatorPermissions()));
  };
  const selfIssued = natsIssuer && opts.nats && !opts.nats.credsFile && !opts.nats.user && !opts.nats.token;
  if (selfIssued) await issueOwn();
  const renewOwn = selfIssued
    ? setInterval(
        () =>
          void issueOwn().catch((err) =>
            log.error({ err: String(err) }, "renewing the operator's NATS credential failed"),
          ),
        24 * 3600_000,
      )
    : undefined;
  renewOwn?.unref();
  // With NATS behind the install's trust, the operator connects once it holds the install CAs
  // (as leader, lead()); otherwise at once.
  const fromTrust = !!opts.natsTlsVerifyWithTrust;
  const trustTls = { ca: () => joinBundle(trust.bundleCerts()) };
  const nats = opts.nats
    ? new Nats(
        {
          inboxPrefix: OPERATOR_INBOX_PREFIX,
          ...opts.nats,
          ...(selfIssued ? { creds: () => ownCreds! } : {}),
          ...(fromTrust ? { tls: trustTls } : {}),
          name: "ifp-operator",
          onReconnect,
        },
        log,
      )
    : undefined;
  if (!fromTrust) void nats?.start(signal).catch(() => {});
  // One NATS account per runtime, when the operator holds the operator and system keys: it makes
  // each, and reaches each through a small pool of connections of its own user there.
  const natsAccounts =
    natsIssuer?.accountPerRuntime && opts.nats
      ? new NatsAccounts({
          url: opts.nats.url,
          tls: fromTrust ? trustTls : opts.nats.tls,
          issuer: natsIssuer,
          log,
          ...(opts.natsAccountLimits ? { limits: opts.natsAccountLimits } : {}),
          ...opts.natsAccountPool,
        })
      : undefined;
  if (opts.natsLayout === "isolated" && !natsAccounts)
    throw new Error(
      "the isolated NATS layout (--nats-layout isolated) needs --nats-url and one NATS account per runtime: the operator and system account keys in --nats-account-secret",
    );
  const dataAccounts =
    opts.natsLayout === "isolated" && natsAccounts
      ? new DataAccounts({
          accounts: natsAccounts,
          limits: opts.natsTenantLimits,
          // A tenant's streams get the replicas "auto" gives: three on a JetStream cluster, else one.
          ensureStream: (jsm, nc, config) => ensureReplicatedStream(jsm, config, "auto", placementOf(nc)),
          log,
        })
      : undefined;
  return { natsIssuer, nats, natsAccounts, dataAccounts, fromTrust, renewOwn };
}

/** The settings the children are rendered with: the operator's, and what its NATS side implies. */
function operatorSettings(opts: ManagerOptions, natsSide: NatsSide): OperatorSettings {
  // The install's own issuer may also be named in spec.tls.issuerRef (with spec.tls.dnsNames, say).
  const installIssuer = opts.trust?.certManager?.issuerRef;
  const allowed = installIssuer
    ? {
        ...opts.settings,
        allowedIssuers: [...new Set([...(opts.settings.allowedIssuers ?? []), issuerEntry(installIssuer)])],
      }
    : opts.settings;
  return {
    ...allowed,
    ...(natsSide.natsIssuer ? { natsPerResourceCreds: true } : {}),
    ...(natsSide.dataAccounts ? { natsLayout: "isolated" as const } : {}),
    ...(natsSide.fromTrust ? { natsTlsVerifyWithTrust: true } : {}),
  };
}

function summaryCollector(
  opts: ManagerOptions,
  ctx: OperatorContext,
  enqueue: (kind: CachedKind, obj: KubernetesObject) => void,
): SummaryCollector | undefined {
  if (!ctx.nats) return undefined;
  return new SummaryCollector({
    nats: ctx.nats,
    caches: ctx.caches,
    enqueue,
    log: opts.log,
    intervalMs: opts.summaryIntervalMs,
    ...(ctx.natsAccounts ? { inAccount: (obj, read) => inRuntimeAccount(ctx, obj, read) } : {}),
    ...(ctx.dataAccounts ? { readAgent: (obj) => readTenantAgent(ctx, obj) } : {}),
  });
}

function leaderElector(opts: ManagerOptions, kc: ObservedKubeConfig): LeaderElector {
  const le = opts.leaderElection!;
  return new LeaderElector(kc, {
    namespace: le.namespace,
    name: le.name ?? "ifp-operator",
    identity: le.identity ?? `${hostname()}_${process.pid}`,
    leaseSeconds: le.leaseSeconds,
    annotations: { [LEADER_VERSION_ANNOTATION]: buildInfo().version },
    log: opts.log,
  });
}

/** Ready: a standby is ready (it waits for the lease); a leader once its caches hold a first list. */
function notReady(run: ManagerRun): string | undefined {
  if (run.stopping) return "shutting down";
  if (run.leading && !run.trustLoaded) return "install CA not loaded yet";
  if (run.leading && !run.ctx.caches.synced) return "caches not synced yet";
  return undefined;
}

function setLeader(run: ManagerRun, on: boolean): void {
  run.leading = on;
  run.metrics.leader.set(on ? 1 : 0);
  run.metrics.shared.leader.set({ name: "ifp-operator" }, on ? 1 : 0);
}

/** Wait for the lease (with leader election), then load the install CA, sync the caches and run the workers. */
async function lead(run: ManagerRun): Promise<void> {
  const { opts, ctx } = run;
  if (run.elector) {
    await run.elector.run(() => {
      setLeader(run, false);
      if (run.stopping) return;
      if (opts.onLostLeadership) opts.onLostLeadership();
      else {
        opts.log.error("exiting after losing leadership");
        process.exit(1);
      }
    });
    if (run.stopping) return;
  }
  setLeader(run, true);
  await loadTrust(run);
  if (run.stopping) return;
  run.natsServerTls?.start();
  if (run.nats.fromTrust) void ctx.nats?.start(run.abort.signal).catch(() => {});
  await ctx.caches.start(run.abort.signal);
  if (run.stopping) return;
  run.loops = Object.values(run.controllers).map((c) => c.run(opts.workers ?? 4));
  run.resync = setInterval(
    () => {
      enqueueAll(run);
      run.metrics.resyncs.inc();
    },
    opts.resyncMs ?? 5 * 60_000,
  );
  run.resync.unref();
  run.summaries?.start();
  opts.log.info({ namespaces: opts.watchNamespaces.length ? opts.watchNamespaces : "all" }, "operator started");
}

/**
 * The operator's connection to NATS is back after a loss: the accounts, data accounts, streams
 * and consumers this process made and the server no longer holds (a server started again with
 * an empty store, a cluster that lost them) are forgotten (NatsAccounts.recheck,
 * DataAccounts.recheck), and every resource is reconciled, which makes them again.
 */
function afterNatsReconnect(run: ManagerRun): void {
  const { natsAccounts, dataAccounts } = run.ctx;
  if (!natsAccounts) return;
  run.natsRecheck = (run.natsRecheck ?? Promise.resolve()).then(async () => {
    if (!run.leading || run.stopping) return;
    try {
      const { held, lost } = await natsAccounts.recheck();
      const forgotten = await dataAccounts?.recheck(held);
      if (lost.length || forgotten?.tenants.length || forgotten?.agents.length)
        run.opts.log.warn(
          { accounts: lost.length, tenants: forgotten?.tenants, consumers: forgotten?.agents.length },
          "NATS no longer holds what the operator made: making it again",
        );
      if (lost.length || forgotten?.tenants.length || forgotten?.agents.length || forgotten?.unknown.length)
        enqueueAll(run);
    } catch (err) {
      run.opts.log.error({ err: errorMessage(err) }, "could not look at what NATS holds after a reconnect");
    }
  });
}

function enqueueAll(run: ManagerRun): void {
  // A namespace's resources together: their passes share its NATS account's connection.
  for (const kind of ["Agent", "Relay"] as const)
    for (const o of run.ctx.caches.listByNamespace(kind)) run.enqueue(kind, o);
}

/**
 * The install CA before any reconcile: every default certificate and bundle comes from it. A
 * change of its CAs (a rotation step) brings every resource to its bundle and certificate. Until
 * it loads (the API server away, an unusable Secret) the replica says why and is not ready.
 */
async function loadTrust(run: ManagerRun): Promise<void> {
  for (let attempt = 1; !run.stopping; attempt++) {
    try {
      await run.ctx.trust.start(() => {
        run.natsServerTls?.changed();
        enqueueAll(run);
      });
      run.trustLoaded = true;
      return;
    } catch (err) {
      run.opts.log.error({ err: errorMessage(err), attempt }, "could not load the install CA; retrying");
      await new Promise((r) => setTimeout(r, Math.min(30_000, 1000 * attempt)));
    }
  }
}

/** Finish the reconciles in flight, release the finalizers when being uninstalled, then let go of everything. */
async function stopManager(run: ManagerRun): Promise<void> {
  const { opts, ctx } = run;
  run.stopping = true;
  if (run.resync) clearInterval(run.resync);
  await run.summaries?.stop();
  ctx.trust.stop();
  run.natsServerTls?.stop();
  run.abort.abort();
  for (const c of Object.values(run.controllers)) c.shutDown();
  await Promise.all(run.loops);
  if (run.leading && opts.operatorDeployment && (await beingUninstalled(ctx.kube, opts.operatorDeployment, opts.log))) {
    await releaseAllFinalizers({
      kube: ctx.kube,
      caches: ctx.caches,
      jsm: ctx.nats?.isConnected ? ctx.nats.jsm : undefined,
      ...(ctx.natsAccounts ? { deleteData: (obj, named) => deleteRuntimeData(ctx, obj, named) } : {}),
      log: opts.log,
    });
  }
  await ctx.caches.stop();
  await run.elector?.stop();
  await ctx.natsAccounts?.close();
  await ctx.nats?.close();
  if (run.nats.renewOwn) clearInterval(run.nats.renewOwn);
}

/**
 * Whether the operator's own Deployment is gone or being deleted: then this stop is an
 * uninstall (or the Deployment was deleted by hand), not a rolling update, an eviction or a
 * crash, and nothing will come back to finalize the resources. When the API server cannot be
 * asked, the answer is no: the finalizers stay, as for any other stop.
 */
export async function beingUninstalled(
  kube: Kube,
  dep: { namespace: string; name: string },
  log: Logger,
): Promise<boolean> {
  try {
    const d = await kube.read<KubernetesObject>("apps/v1", "Deployment", dep.namespace, dep.name);
    const gone = !d || !!d.metadata?.deletionTimestamp;
    if (gone)
      log.warn(
        { deployment: `${dep.namespace}/${dep.name}` },
        "the operator's Deployment is gone: releasing every finalizer",
      );
    return gone;
  } catch (err) {
    log.warn({ err: errorMessage(err) }, "could not read the operator's Deployment; finalizers stay");
    return false;
  }
}
