// More than one core (spec.runtime.workers, docs/scale.md#more-than-one-core): how many event loops
// serve the agent's HTTPS port, and the pool of worker threads beside the main one — their shared
// inbox limits and readiness, their metrics, a crash, and their drain on the way out.
import { readFileSync } from "node:fs";
import { Worker } from "node:worker_threads";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { Counter } from "prom-client";
import { type AdmissionBuckets, admissionSizes } from "../a2a/admission.ts";
import { LOOKUP_DEFAULTS, type LookupBudgets } from "../discovery/keys.ts";
import type { Agent } from "../resources/agent.ts";
import type { MetricsJson, RuntimeMetrics } from "../server/metrics.ts";
import { type SharedBuckets, SharedNonces, SharedRateLimiter } from "../server/shared-ratelimit.ts";
import type { InboxLimits } from "./inbound/routes/inbox.ts";

/** Most event loops one pod runs. */
export const MAX_WORKERS = 64;
/** How often each event loop writes whether it is ready, for every other one's /readyz. */
const READY_EVERY_MS = 250;
/** How long a worker has to answer for its metrics, and to drain and stop. */
const METRICS_TIMEOUT_MS = 2_000;
const STOP_TIMEOUT_MS = 20_000;

/**
 * The number of event loops: `auto` is the CPU limit of the container (cgroup v2 cpu.max, rounded
 * down, at least 1), or 1 without a limit (a pod without one has no claim to more than its
 * request); unset is 1.
 */
export function workerCount(asked: unknown, cpus: () => number | undefined = cpuLimit): number {
  if (asked === undefined) return 1;
  if (asked === "auto") return Math.min(MAX_WORKERS, cpus() ?? 1);
  if (typeof asked !== "number" || !Number.isInteger(asked) || asked < 1 || asked > MAX_WORKERS)
    throw new Error(`workers must be a whole number from 1 to ${MAX_WORKERS} or "auto", not ${JSON.stringify(asked)}`);
  return asked;
}

/** The CPU limit of this container in whole CPUs (cgroup v2 cpu.max, at least 1); undefined without one. */
export function cpuLimit(cpuMax = "/sys/fs/cgroup/cpu.max"): number | undefined {
  try {
    const [quota, period] = readFileSync(cpuMax, "utf8").trim().split(/\s+/);
    if (quota !== "max" && Number(quota) > 0 && Number(period) > 0)
      return Math.max(1, Math.floor(Number(quota) / Number(period)));
  } catch {
    // No cgroup v2 file: not in a container, or cgroup v1.
  }
  return undefined;
}

/** What a worker thread is given (structured clone; the buffers stay shared). */
export interface WorkerData {
  kind: "ifp-inbox-worker";
  /** 1 … count-1; the main event loop is 0. */
  index: number;
  port: number;
  logLevel: string;
  /** The agent's options without what cannot be cloned (the logger). */
  opts: Record<string, unknown>;
  /** Every shared bucket table of SharedState, by name. */
  buckets: Partial<Record<BucketName, SharedBuckets>>;
  /** The A2A face's signature nonces (spec.a2a). */
  nonces?: SharedBuckets;
  /** The port of the A2A face's gRPC binding, served by the main loop. */
  a2aGrpcPort?: number;
  /** One word per event loop: 1 while it is ready. */
  ready: SharedArrayBuffer;
}

/** The budgets (tokens per minute, or per `windowMs`) every event loop of the pod takes from, by name. */
function bucketSizes(spec: Agent["spec"]) {
  const { rateLimit } = spec.inbox;
  return {
    perAddress: { perMinute: rateLimit.perAddressPerMinute },
    perSender: { perMinute: rateLimit.perSenderPerMinute },
    perSenderBytes: { perMinute: rateLimit.perSenderBytesPerHour, windowMs: 3_600_000 },
    lookupsPerAddress: { perMinute: LOOKUP_DEFAULTS.perAddressPerMinute },
    // The A2A face's (spec.a2a), named a2a…
    ...admissionSizes(rateLimit),
  };
}
type BucketName = keyof ReturnType<typeof bucketSizes>;
type Buckets = Record<BucketName, SharedRateLimiter>;

/** The limits and readiness every event loop of the pod shares. */
export class SharedState {
  readonly limits: InboxLimits & {
    perAddress: SharedRateLimiter;
    perSender: SharedRateLimiter;
    perSenderBytes: SharedRateLimiter;
  };
  /** The budget of identity lookups of new senders (the inbox's and the A2A face's). */
  readonly lookups: LookupBudgets;
  /** The A2A face's limits and signature nonces (spec.a2a). */
  readonly a2a: { admission: AdmissionBuckets; nonces: SharedNonces } | undefined;
  readonly buckets: Partial<Buckets>;
  readonly ready: Int32Array;

  constructor(buckets: Partial<Buckets>, nonces: SharedNonces | undefined, ready: SharedArrayBuffer) {
    this.buckets = buckets;
    const { perAddress, perSender, perSenderBytes, lookupsPerAddress } = buckets as Buckets;
    this.limits = { perAddress, perSender, perSenderBytes };
    this.lookups = { perAddress: lookupsPerAddress };
    this.a2a = nonces && { admission: buckets as AdmissionBuckets, nonces };
    this.ready = new Int32Array(ready);
  }

  /** The shared state of `count` event loops: the A2A face's buckets and nonces only with spec.a2a. */
  static create(spec: Agent["spec"], count: number): SharedState {
    const a2a = spec.a2a.enabled;
    const sizes = Object.entries(bucketSizes(spec))
      .filter(([name]) => a2a || !name.startsWith("a2a"))
      .map(([name, { perMinute, ...opts }]) => [name, SharedRateLimiter.create(perMinute, opts)]);
    return new SharedState(
      Object.fromEntries(sizes) as Partial<Buckets>,
      a2a ? new SharedNonces() : undefined,
      new SharedArrayBuffer(4 * count),
    );
  }

  static attach(data: Pick<WorkerData, "buckets" | "nonces" | "ready">): SharedState {
    const attached = Object.entries(data.buckets).map(([name, shared]) => [name, new SharedRateLimiter(shared)]);
    return new SharedState(
      Object.fromEntries(attached) as Partial<Buckets>,
      data.nonces && new SharedNonces({ shared: data.nonces }),
      data.ready,
    );
  }

  /** What a worker thread is given of these buckets. */
  shared(): Pick<WorkerData, "buckets" | "nonces"> {
    const buckets = Object.entries(this.buckets).map(([name, b]) => [name, b.shared]);
    return {
      buckets: Object.fromEntries(buckets) as WorkerData["buckets"],
      ...(this.a2a ? { nonces: this.a2a.nonces.buckets.shared } : {}),
    };
  }

  /** Write this loop's readiness now and every READY_EVERY_MS; the returned function stops it. */
  report(index: number, ready: () => boolean): () => void {
    const write = () => Atomics.store(this.ready, index, ready() ? 1 : 0);
    write();
    const timer = setInterval(write, READY_EVERY_MS);
    timer.unref();
    return () => {
      clearInterval(timer);
      Atomics.store(this.ready, index, 0);
    };
  }

  /** Whether event loop `index` said it is ready. */
  loopReady(index: number): boolean {
    return Atomics.load(this.ready, index) === 1;
  }

  /** The pod is ready when every one of its event loops is (/readyz of each loop says the same). */
  podReady(): boolean {
    for (let i = 0; i < this.ready.length; i++) if (!this.loopReady(i)) return false;
    return true;
  }
}

/** Requests each event loop took on the HTTPS port, labelled with its index (0 is the main loop). */
export function countRequests(app: FastifyInstance, metrics: RuntimeMetrics, index: number): void {
  const counter = new Counter({
    name: "ifp_worker_requests_total",
    help: "Requests taken on the HTTPS port by each event loop (spec.runtime.workers; 0 is the main one)",
    labelNames: ["worker"],
    registers: [metrics.registry],
  });
  const worker = String(index);
  app.addHook("onRequest", async () => counter.inc({ worker }));
}

/** What a worker sends the main thread. */
export type FromWorker =
  | { type: "listening" }
  | { type: "metrics"; id: number; metrics: MetricsJson }
  | { type: "start-failed"; error: string };
/** What the main thread sends a worker. */
export type ToWorker = { type: "metrics"; id: number } | { type: "close" };

/**
 * The worker threads beside the main event loop: each serves the agent's HTTPS port (SO_REUSEPORT)
 * with its own NATS connection. A worker that ends without being asked to is the pod's failure
 * (`failed`): the process stops (the Deployment starts it again), as it would with one loop.
 */
export class InboxWorkers {
  readonly shared: SharedState;
  private readonly count: number;
  private readonly log: Logger;
  private readonly workers: Worker[] = [];
  private closing = false;
  private nextId = 1;
  private readonly answers = new Map<number, (m: MetricsJson) => void>();
  private fail!: (err: Error) => void;
  /** Resolves with the reason when a worker ended without being asked to. */
  readonly failed = new Promise<Error>((resolve) => (this.fail = resolve));

  constructor(count: number, spec: Agent["spec"], log: Logger) {
    this.count = count;
    this.log = log;
    this.shared = SharedState.create(spec, count);
  }

  /** Start the workers on `port` (the main loop listens on it already) and wait until each listens. */
  async start(
    entry: string | URL,
    port: number,
    opts: Record<string, unknown>,
    a2aGrpcPort: number | undefined,
  ): Promise<void> {
    const shared = this.shared.shared();
    const starts: Promise<void>[] = [];
    for (let index = 1; index < this.count; index++) {
      const workerData: WorkerData = {
        kind: "ifp-inbox-worker",
        index,
        port,
        logLevel: this.log.level,
        opts,
        ...shared,
        ...(a2aGrpcPort !== undefined ? { a2aGrpcPort } : {}),
        ready: this.shared.ready.buffer as SharedArrayBuffer,
      };
      const worker = new Worker(typeof entry === "string" ? new URL(entry) : entry, { workerData });
      this.workers.push(worker);
      starts.push(this.watch(worker, index));
    }
    await Promise.all(starts);
    this.log.info({ workers: this.count, port }, "event loops serving the HTTPS port");
  }

  /** Follow one worker: its start, its answers, and an end nobody asked for. */
  private watch(worker: Worker, index: number): Promise<void> {
    return new Promise((resolve, reject) => {
      let started = false;
      worker.on("message", (m: FromWorker) => {
        if (m.type === "listening") {
          started = true;
          resolve();
        } else if (m.type === "start-failed") reject(new Error(`event loop ${index} could not start: ${m.error}`));
        else if (m.type === "metrics") this.answers.get(m.id)?.(m.metrics);
      });
      worker.on("error", (err) => this.log.error({ worker: index, err: err.message }, "event loop failed"));
      worker.on("exit", (code) => {
        if (!started) reject(new Error(`event loop ${index} ended (code ${code}) before it listened`));
        else if (!this.closing) this.fail(new Error(`event loop ${index} ended (code ${code})`));
      });
    });
  }

  /** The counters and histograms of every worker, for the main loop's /metrics to add to its own. */
  async metrics(): Promise<MetricsJson[]> {
    return Promise.all(
      this.workers.map(
        (worker) =>
          new Promise<MetricsJson>((resolve) => {
            const id = this.nextId++;
            const done = (m: MetricsJson) => {
              clearTimeout(timer);
              this.answers.delete(id);
              resolve(m);
            };
            // A worker too busy to answer in time is left out of this scrape.
            const timer = setTimeout(() => done([]), METRICS_TIMEOUT_MS);
            this.answers.set(id, done);
            worker.postMessage({ type: "metrics", id } satisfies ToWorker);
          }),
      ),
    );
  }

  /** Drain every worker (each closes its listener, finishes its requests, closes NATS) and wait for it to end. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(
      this.workers.map(async (worker, i) => {
        if (worker.threadId < 0) return;
        const ended = new Promise<number>((resolve) => worker.once("exit", resolve));
        worker.postMessage({ type: "close" } satisfies ToWorker);
        const timer = setTimeout(() => void worker.terminate(), STOP_TIMEOUT_MS);
        // Logged here: a worker's own last lines may not reach stdout before the process ends.
        // Code 0 is a worker that drained and stopped itself; 1, one stopped after STOP_TIMEOUT_MS.
        this.log.info({ worker: i + 1, code: await ended }, "event loop stopped");
        clearTimeout(timer);
      }),
    );
  }
}

/** Only what a worker's metrics add to the main loop's: its ifp_* counters and histograms (the process's own are the main loop's). */
export function workerMetrics(all: MetricsJson): MetricsJson {
  return all.filter((m) => m.name.startsWith("ifp_") && ["counter", "histogram"].includes(String(m.type)));
}
