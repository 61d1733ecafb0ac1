// The operator process: informers feed one controller (keyed work queue and workers, in
// kube/controller.ts) per kind; children map back to their Agent or Relay; every resource is
// also resynced periodically. Controllers run only while this replica holds the leader lease
// (when leader election is on).
import { hostname } from "node:os";
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { Nats, type NatsOptions } from "../../runtime/src/nats/connection.ts";
import { OPERATOR_INBOX_PREFIX, operatorPermissions } from "../../runtime/src/contract/nats-permissions.ts";
import { loadNatsIssuer } from "./controllers/runtime-nats-credential.ts";
import { deleteRuntimeData, inRuntimeAccount } from "./controllers/runtime-account.ts";
import { NatsAccounts } from "./nats-accounts.ts";
import { reconcileAgent } from "./controllers/agent-controller.ts";
import { NamespaceLabels } from "./controllers/namespace-labels.ts";
import { reconcileRelay } from "./controllers/relay-controller.ts";
import type { ReconcileContext } from "./controllers/context.ts";
import { ownerOf } from "./controllers/names.ts";
import type { OperatorSettings } from "./controllers/settings.ts";
import { InstallTrust, joinBundle, type CertManagerMode, type TrustLifetimes } from "./controllers/trust.ts";
import { NatsServerTls } from "./controllers/nats-tls.ts";
import { issuerEntry } from "./controllers/references.ts";
import { serveHealth } from "./health.ts";
import { Caches, type CachedKind } from "./kube/caches.ts";
import { errorMessage, Kube } from "./kube/client.ts";
import { ObservedKubeConfig } from "./kube/rest-client.ts";
import { Controller, type Reconcile } from "./kube/controller.ts";
import { LeaderElector } from "./leader.ts";
import { DEFAULT_ROLLOUT_LIMIT, parseRolloutLimit, RolloutGate, type RolloutLimit } from "./controllers/rollout.ts";
import { DEFAULT_FINALIZER_TIMEOUT_MS, Deletions, releaseAllFinalizers } from "./controllers/finalizers.ts";
import { createOperatorMetrics } from "./metrics.ts";
import { SummaryCollector } from "./controllers/summary.ts";

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
  /** The pool of connections into the runtimes' accounts (defaults: 8 connections, closed after 30 s unused). */
  natsAccountPool?: { maxConnections?: number; idleMs?: number };
  /**
   * The installed NATS's server certificate: issued by the install CA into this Secret for these
   * names and kept current (controllers/nats-tls.ts).
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

export async function startManager(opts: ManagerOptions): Promise<RunningManager> {
  const log = opts.log;
  const metrics = createOperatorMetrics();
  const kc = new ObservedKubeConfig((method, host, code) => metrics.shared.restRequests.inc({ code, method, host }));
  if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
  else kc.loadFromDefault();
  const kube = new Kube(kc, log, (verb, kind) => metrics.writes.inc({ verb, kind }));
  const enqueue = (kind: CachedKind, obj: KubernetesObject) => {
    const ns = obj.metadata?.namespace;
    if (!ns) return;
    if (kind === "Agent") {
      // The Agents that may select this one (spec.peerSelector) look again: its keys or endpoint
      // may have changed, or it may match now or no more.
      // So do those claiming its agent id: the one the install vouches for takes it from one it does not.
      const agentId = (obj as { spec?: { agentId?: unknown } }).spec?.agentId;
      for (const o of caches.list<KubernetesObject & { spec?: { peerSelector?: unknown; agentId?: unknown } }>(
        "Agent",
      )) {
        if ((o.spec?.peerSelector || o.spec?.agentId === agentId) && o.metadata?.uid !== obj.metadata?.uid)
          controllers.Agent.enqueue(o.metadata!.namespace!, o.metadata!.name!);
      }
    }
    if (kind === "Agent" || kind === "Relay") return controllers[kind].enqueue(ns, obj.metadata!.name!);
    const owner = ownerOf(obj);
    if (owner) controllers[owner.kind].enqueue(ns, owner.name);
  };
  const caches = new Caches(kc, opts.watchNamespaces, log, enqueue);
  const abort = new AbortController();
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
  const trust = new InstallTrust(kube, {
    namespace: opts.trust?.namespace ?? opts.leaderElection?.namespace ?? process.env.POD_NAMESPACE ?? "default",
    secretName: opts.trust?.secretName ?? "ifp-operator-ca",
    lifetimes: opts.trust?.lifetimes,
    extraCas: opts.trust?.extraCas,
    certManager: opts.trust?.certManager,
    log,
  });
  // With NATS behind the install's trust, the operator connects once it holds the install CAs
  // (as leader, below); otherwise at once.
  const natsTlsFromTrust = !!opts.natsTlsVerifyWithTrust;
  const nats = opts.nats
    ? new Nats(
        {
          inboxPrefix: OPERATOR_INBOX_PREFIX,
          ...opts.nats,
          ...(selfIssued ? { creds: () => ownCreds! } : {}),
          ...(natsTlsFromTrust ? { tls: { ca: () => joinBundle(trust.bundleCerts()) } } : {}),
          name: "ifp-operator",
        },
        log,
      )
    : undefined;
  if (!natsTlsFromTrust) void nats?.start(abort.signal).catch(() => {});
  // One NATS account per runtime, when the operator holds the operator and system keys: it makes
  // each, and reaches each through a small pool of connections of its own user there.
  const natsAccounts =
    natsIssuer?.accountPerRuntime && opts.nats
      ? new NatsAccounts({
          url: opts.nats.url,
          tls: natsTlsFromTrust ? { ca: () => joinBundle(trust.bundleCerts()) } : opts.nats.tls,
          issuer: natsIssuer,
          log,
          ...opts.natsAccountPool,
        })
      : undefined;
  const natsServerTls = opts.natsServerTls ? new NatsServerTls(kube, trust, { ...opts.natsServerTls, log }) : undefined;
  // The install's own issuer may also be named in spec.tls.issuerRef (with spec.tls.dnsNames, say).
  const installIssuer = opts.trust?.certManager?.issuerRef;
  const allowed = installIssuer
    ? {
        ...opts.settings,
        allowedIssuers: [...new Set([...(opts.settings.allowedIssuers ?? []), issuerEntry(installIssuer)])],
      }
    : opts.settings;
  const settings = {
    ...allowed,
    ...(natsIssuer ? { natsPerResourceCreds: true } : {}),
    ...(natsTlsFromTrust ? { natsTlsVerifyWithTrust: true } : {}),
  };
  const summaries = nats
    ? new SummaryCollector({
        nats,
        caches,
        enqueue,
        log,
        intervalMs: opts.summaryIntervalMs,
        ...(natsAccounts ? { inAccount: (obj, read) => inRuntimeAccount(ctx, obj, read) } : {}),
      })
    : undefined;
  const ctx: ReconcileContext = {
    kube,
    caches,
    settings,
    log,
    nats,
    trust,
    natsIssuer,
    natsAccounts,
    deletions: new Deletions(opts.finalizerTimeoutMs ?? DEFAULT_FINALIZER_TIMEOUT_MS),
    rollouts: new RolloutGate(opts.rolloutLimit ?? parseRolloutLimit(DEFAULT_ROLLOUT_LIMIT)),
    agentIds: new Map(),
    namespaceLabels: new NamespaceLabels(kube, log),
    summaries,
  };
  const controller = (kind: Kind, reconcile: Reconcile) =>
    new Controller({ kind, reconcile, exists: (ns, name) => !!caches.get(kind, ns, name), metrics, log });
  const controllers: Record<Kind, Controller> = {
    Agent: controller("Agent", (ns, name) => reconcileAgent(ctx, ns, name)),
    Relay: controller("Relay", (ns, name) => reconcileRelay(ctx, ns, name)),
  };

  const elector = opts.leaderElection
    ? new LeaderElector(kc, {
        namespace: opts.leaderElection.namespace,
        name: opts.leaderElection.name ?? "ifp-operator",
        identity: opts.leaderElection.identity ?? `${hostname()}_${process.pid}`,
        leaseSeconds: opts.leaderElection.leaseSeconds,
        log,
      })
    : undefined;
  let leading = !elector;
  let stopping = false;
  let trustLoaded = false;
  // Ready: a standby is ready (it waits for the lease); a leader once its caches hold a first list.
  const health = await serveHealth(
    { healthPort: opts.healthPort, metricsPort: opts.metricsPort },
    () =>
      stopping
        ? "shutting down"
        : leading && !trustLoaded
          ? "install CA not loaded yet"
          : leading && !caches.synced
            ? "caches not synced yet"
            : undefined,
    metrics.registry,
  );
  const depth = setInterval(() => {
    for (const c of Object.values(controllers)) c.recordQueueDepth();
    metrics.informerRestarts.set(caches.restarts);
  }, 1000);
  depth.unref();

  let loops: Promise<void>[] = [];
  let resync: NodeJS.Timeout | undefined;
  const started = (async () => {
    if (elector) {
      await elector.run(() => {
        leading = false;
        metrics.leader.set(0);
        metrics.shared.leader.set({ name: "ifp-operator" }, 0);
        if (stopping) return;
        if (opts.onLostLeadership) opts.onLostLeadership();
        else {
          log.error("exiting after losing leadership");
          process.exit(1);
        }
      });
      if (stopping) return;
      leading = true;
    }
    metrics.leader.set(1);
    metrics.shared.leader.set({ name: "ifp-operator" }, 1);
    // The install CA before any reconcile: every default certificate and bundle comes from it.
    // A change of its CAs (a rotation step) brings every resource to its bundle and certificate.
    // Until it loads (the API server away, an unusable Secret) the replica says why and is not ready.
    for (let attempt = 1; !stopping; attempt++) {
      try {
        await trust.start(() => {
          natsServerTls?.changed();
          for (const kind of ["Agent", "Relay"] as const) for (const o of caches.list(kind)) enqueue(kind, o);
        });
        trustLoaded = true;
        break;
      } catch (err) {
        log.error({ err: errorMessage(err), attempt }, "could not load the install CA; retrying");
        await new Promise((r) => setTimeout(r, Math.min(30_000, 1000 * attempt)));
      }
    }
    if (stopping) return;
    natsServerTls?.start();
    if (natsTlsFromTrust) void nats?.start(abort.signal).catch(() => {});
    await caches.start(abort.signal);
    if (stopping) return;
    loops = Object.values(controllers).map((c) => c.run(opts.workers ?? 4));
    resync = setInterval(
      () => {
        for (const kind of ["Agent", "Relay"] as const) for (const o of caches.list(kind)) enqueue(kind, o);
      },
      opts.resyncMs ?? 5 * 60_000,
    );
    resync.unref();
    summaries?.start();
    log.info({ namespaces: opts.watchNamespaces.length ? opts.watchNamespaces : "all" }, "operator started");
  })();
  started.catch((err) => log.error({ err: errorMessage(err) }, "operator could not start"));

  return {
    metrics,
    caches,
    trust,
    healthUrl: health.url,
    metricsUrl: health.metricsUrl,
    started,
    get leading() {
      return leading;
    },
    async stop() {
      if (stopping) return;
      stopping = true;
      clearInterval(depth);
      if (resync) clearInterval(resync);
      await summaries?.stop();
      trust.stop();
      natsServerTls?.stop();
      abort.abort();
      // Finish the reconciles in flight, then let go of everything else.
      for (const c of Object.values(controllers)) c.shutDown();
      await Promise.all(loops);
      if (leading && opts.operatorDeployment && (await beingUninstalled(kube, opts.operatorDeployment, log))) {
        await releaseAllFinalizers({
          kube,
          caches,
          jsm: nats?.isConnected ? nats.jsm : undefined,
          ...(natsAccounts ? { deleteData: (obj, named) => deleteRuntimeData(ctx, obj, named) } : {}),
          log,
        });
      }
      await caches.stop();
      await elector?.stop();
      await natsAccounts?.close();
      await nats?.close();
      if (renewOwn) clearInterval(renewOwn);
      await health.close();
      log.info("operator stopped");
    },
  };
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
