// One kind's control loop, in the manner of controller-runtime's Controller: a keyed work queue,
// workers that reconcile one `namespace/name` at a time, and a failed pass sorted by kind into
// the queue's requeue, the log and the metrics. What a pass does is the reconciler's business.
import type { Logger } from "pino";
import type { Counter, Gauge, Histogram } from "prom-client";
import { errorMessage, isStatus } from "./client.ts";
import { WorkQueue } from "./workqueue.ts";

/** What a reconcile asks of the queue: look again after this long (undefined: only on change). */
export interface ReconcileResult {
  requeueAfterMs?: number;
}

/** A level-triggered reconcile: it gets only the key, never the event that brought it. */
export type Reconcile = (namespace: string, name: string) => Promise<ReconcileResult>;

/** The metrics a controller keeps, labelled by kind. */
export interface ControllerMetrics {
  reconciles: Counter<"kind" | "result">;
  errors: Counter<"kind">;
  duration: Histogram<"kind">;
  queueDepth: Gauge<"kind">;
  /** The controller-runtime and client-go names (metrics.ts), labelled by the lower-case kind. */
  shared?: {
    reconcileTotal: Counter<"controller" | "result">;
    reconcileErrors: Counter<"controller">;
    reconcileTime: Histogram<"controller">;
    queueDepth: Gauge<"name">;
    queueAdds: Counter<"name">;
    queueDuration: Histogram<"name">;
    workDuration: Histogram<"name">;
    queueRetries: Counter<"name">;
    activeWorkers: Gauge<"controller">;
  };
}

/**
 * How a pass ended. `ok`: done, requeued only if it asked; `gone`: it failed but the resource
 * went away meanwhile, so there is nothing left to do; `conflict`: a write met a newer object
 * (the cache lags), requeued with backoff and quietly; `error`: requeued with backoff, logged.
 */
export type PassResult = "ok" | "gone" | "conflict" | "error";

/** The kind of a failed pass's error, given whether the resource is still there. */
export function classifyFailure(err: unknown, exists: boolean): Exclude<PassResult, "ok"> {
  if (!exists) return "gone";
  if (isStatus(err, 409)) return "conflict";
  return "error";
}

export interface ControllerOptions {
  kind: string;
  reconcile: Reconcile;
  /** Whether the resource still exists (from the cache): a failure of a deleted one is not retried. */
  exists: (namespace: string, name: string) => boolean;
  metrics: ControllerMetrics;
  log: Logger;
  queue?: WorkQueue;
}

export class Controller {
  readonly kind: string;
  readonly queue: WorkQueue;
  private readonly opts: ControllerOptions;

  constructor(opts: ControllerOptions) {
    this.opts = opts;
    this.kind = opts.kind;
    const shared = opts.metrics.shared;
    const name = opts.kind.toLowerCase();
    this.queue =
      opts.queue ??
      new WorkQueue({
        observer: shared && {
          added: (depth) => {
            shared.queueAdds.inc({ name });
            shared.queueDepth.set({ name }, depth);
          },
          requeued: (depth) => shared.queueDepth.set({ name }, depth),
          taken: (depth, waited) => {
            shared.queueDepth.set({ name }, depth);
            shared.queueDuration.observe({ name }, waited);
          },
          worked: (seconds) => shared.workDuration.observe({ name }, seconds),
          active: (workers) => shared.activeWorkers.set({ controller: name }, workers),
          retried: () => shared.queueRetries.inc({ name }),
        },
      });
  }

  /** controller_runtime_reconcile_total's result: success, error, requeue_after. */
  private shared(result: "success" | "error" | "requeue_after", seconds: number): void {
    const shared = this.opts.metrics.shared;
    if (!shared) return;
    const controller = this.kind.toLowerCase();
    shared.reconcileTotal.inc({ controller, result });
    if (result === "error") shared.reconcileErrors.inc({ controller });
    shared.reconcileTime.observe({ controller }, seconds);
  }

  enqueue(namespace: string, name: string): void {
    this.queue.add(`${namespace}/${name}`);
  }

  /** One pass over one key: reconcile, then forget, requeue or back off by the outcome. */
  async process(key: string): Promise<{ result: PassResult; requeueAfterMs?: number }> {
    const { kind, metrics, log } = this.opts;
    const [ns, name] = key.split("/") as [string, string];
    const end = metrics.duration.startTimer({ kind });
    const started = performance.now();
    const took = () => (performance.now() - started) / 1000;
    try {
      const { requeueAfterMs } = await this.opts.reconcile(ns, name);
      this.queue.forget(key);
      metrics.reconciles.inc({ kind, result: "ok" });
      log.debug({ kind, key, tookMs: Math.round(took() * 1000) }, "reconciled");
      this.shared(requeueAfterMs ? "requeue_after" : "success", took());
      if (requeueAfterMs) this.queue.addAfter(key, requeueAfterMs);
      return { result: "ok", requeueAfterMs };
    } catch (err) {
      const result = classifyFailure(err, this.opts.exists(ns, name));
      if (result === "gone") {
        this.queue.forget(key);
        metrics.reconciles.inc({ kind, result: "ok" });
        this.shared("success", took());
        log.debug({ kind, key, err: errorMessage(err) }, "gone while reconciling");
        return { result };
      }
      const delay = this.queue.addRateLimited(key);
      metrics.reconciles.inc({ kind, result });
      this.shared("error", took());
      if (result === "conflict") {
        log.debug({ kind, key }, "conflict (the cache lags a write); requeued");
      } else {
        metrics.errors.inc({ kind });
        log.warn({ kind, key, err: errorMessage(err), retryInMs: Math.round(delay) }, "Reconcile failed");
      }
      return { result, requeueAfterMs: delay };
    } finally {
      end();
    }
  }

  /** Run `workers` loops (never two for one key) until shutDown(). */
  run(workers: number): Promise<void> {
    return this.queue.run(workers, async (key) => {
      await this.process(key);
    });
  }

  /** Set the queue-depth gauge (called on a timer). */
  recordQueueDepth(): void {
    this.opts.metrics.queueDepth.set({ kind: this.kind }, this.queue.depth);
  }

  /** Stop taking keys; run() resolves once the passes in flight end. */
  shutDown(): void {
    this.queue.shutDown();
  }
}
