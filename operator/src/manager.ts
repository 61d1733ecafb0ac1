import { hostname } from "node:os";
import { KubeConfig, type KubernetesObject } from "@kubernetes/client-node";
import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { Nats, type NatsOptions } from "../../runtime/src/nats/connection.ts";
import { reconcileAgent } from "./controllers/agent/reconcile.ts";
import { describe } from "./controllers/reconciler.ts";
import { reconcileRelay, type RelayContext } from "./controllers/relay/reconcile.ts";
import type { OperatorSettings } from "./controllers/runtime.ts";
import { Caches, type CachedKind } from "./kube/caches.ts";
import { Kube } from "./kube/client.ts";
import { WorkQueue } from "./kube/workqueue.ts";
import { LeaderElector } from "./leader.ts";
import { createOperatorMetrics } from "./metrics.ts";

export interface ManagerOptions {
  kubeconfig?: string;
  settings: OperatorSettings;
  nats?: Omit<NatsOptions, "name">;
  watchNamespaces: string[];
  leaderElection?: { namespace: string; name?: string };
  healthPort?: number;
  metricsPort?: number;
  /** How often every resource is reconciled even without a change. */
  resyncMs?: number;
  workers?: number;
  log: Logger;
}

export interface RunningManager {
  metrics: ReturnType<typeof createOperatorMetrics>;
  caches: Caches;
  healthUrl: string | undefined;
  stop(): Promise<void>;
}

/**
 * The operator: informers feed two keyed work queues (Agents, Relays); children and status
 * changes map back to their owner; every resource is also resynced periodically. Controllers
 * run only while this replica holds the leader lease.
 */
export async function startManager(opts: ManagerOptions): Promise<RunningManager> {
  const log = opts.log;
  const kc = new KubeConfig();
  if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
  else kc.loadFromDefault();
  const metrics = createOperatorMetrics();
  const kube = new Kube(kc, log, (verb, kind) => metrics.writes.inc({ verb, kind }));
  const queues: Record<"Agent" | "Relay", WorkQueue> = { Agent: new WorkQueue(), Relay: new WorkQueue() };
  const enqueue = (kind: CachedKind, obj: KubernetesObject) => {
    const ns = obj.metadata?.namespace;
    if (!ns) return;
    if (kind === "Agent" || kind === "Relay") return queues[kind].add(`${ns}/${obj.metadata!.name}`);
    const owner = obj.metadata?.ownerReferences?.find((r) => r.controller && r.apiVersion === "ifp.dev/v1alpha1");
    if (owner && (owner.kind === "Agent" || owner.kind === "Relay")) queues[owner.kind].add(`${ns}/${owner.name}`);
  };
  const caches = new Caches(kc, opts.watchNamespaces, log, enqueue);
  const nats = opts.nats ? new Nats({ ...opts.nats, name: "ifp-operator" }, log) : undefined;
  const abort = new AbortController();
  void nats?.start(abort.signal).catch(() => {});
  const ctx: RelayContext = { kube, caches, settings: opts.settings, log, nats };

  let leading = !opts.leaderElection;
  const health = await serveHealth(opts, () => caches.synced && leading, metrics.registry);

  const elector = opts.leaderElection
    ? new LeaderElector(kc, { namespace: opts.leaderElection.namespace, name: opts.leaderElection.name ?? "ifp-operator", identity: `${hostname()}-${process.pid}`, log })
    : undefined;
  if (elector) {
    await elector.run(() => {
      // Another replica leads now; stop at once rather than race it.
      log.error("exiting after losing leadership");
      process.exit(1);
    });
    leading = true;
  }
  metrics.leader.set(1);
  await caches.start();

  const run = (kind: "Agent" | "Relay", fn: (ns: string, name: string) => Promise<{ requeueAfterMs?: number }>) =>
    queues[kind].run(opts.workers ?? 2, async (key) => {
      const [ns, name] = key.split("/") as [string, string];
      const end = metrics.duration.startTimer({ kind });
      try {
        const result = await fn(ns, name);
        queues[kind].forget(key);
        metrics.reconciles.inc({ kind, result: "ok" });
        if (result.requeueAfterMs) queues[kind].addAfter(key, result.requeueAfterMs);
      } catch (err) {
        metrics.reconciles.inc({ kind, result: "error" });
        const conflict = describe(err).startsWith("409");
        const delay = queues[kind].addRateLimited(key);
        if (conflict) log.debug({ kind, key }, "conflict; requeued");
        else log.warn({ kind, key, err: describe(err), retryInMs: Math.round(delay) }, "reconcile failed");
      } finally {
        end();
        metrics.queueDepth.set({ kind }, queues[kind].depth);
      }
    });
  const loops = [run("Agent", (ns, name) => reconcileAgent(ctx, ns, name)), run("Relay", (ns, name) => reconcileRelay(ctx, ns, name))];
  const resync = setInterval(() => {
    for (const kind of ["Agent", "Relay"] as const) for (const o of caches.list(kind)) enqueue(kind, o);
  }, opts.resyncMs ?? 5 * 60_000);
  resync.unref();
  log.info({ namespaces: opts.watchNamespaces.length ? opts.watchNamespaces : "all" }, "operator started");

  return {
    metrics,
    caches,
    healthUrl: health.url,
    async stop() {
      clearInterval(resync);
      for (const q of Object.values(queues)) q.shutDown();
      await Promise.all(loops);
      await caches.stop();
      await elector?.stop();
      abort.abort();
      await nats?.close();
      await health.close();
    },
  };
}

async function serveHealth(opts: ManagerOptions, ready: () => boolean, registry: ReturnType<typeof createOperatorMetrics>["registry"]) {
  const servers: FastifyInstance[] = [];
  const make = () => Fastify({ logger: false, logController: new LogController({ disableRequestLogging: true }) });
  let url: string | undefined;
  if (opts.healthPort !== undefined) {
    const app = make();
    app.get("/healthz", async () => ({ status: "ok" }));
    app.get("/readyz", async (_req, reply) => (ready() ? { status: "ok" } : reply.code(503).send({ status: "error", code: "unavailable", message: "caches not synced or not the leader" })));
    if (opts.metricsPort === undefined || opts.metricsPort === opts.healthPort) {
      app.get("/metrics", async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
    }
    await app.listen({ port: opts.healthPort, host: "0.0.0.0" });
    const a = app.server.address();
    url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : opts.healthPort}`;
    servers.push(app);
  }
  if (opts.metricsPort !== undefined && opts.metricsPort !== opts.healthPort) {
    const app = make();
    app.get("/metrics", async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
    await app.listen({ port: opts.metricsPort, host: "0.0.0.0" });
    servers.push(app);
  }
  return { url, close: () => Promise.all(servers.map((s) => s.close())).then(() => {}) };
}
