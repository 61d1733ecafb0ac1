// The keyed work queue the controllers run on (kube/controller.ts), in the manner of client-go's:
// collapsing adds, one worker per key, per-key exponential backoff, timed adds, and the hooks for
// the workqueue metrics.
import { exponentialDelay } from "../../../runtime/src/util/backoff.ts";

/**
 * A keyed work queue in the manner of client-go's: adds of a queued key collapse, a key is
 * never processed by two workers at once (an add during processing requeues it once after),
 * failures back off per key exponentially with jitter, and addAfter schedules timed work.
 */
/** What a queue reports for the client-go workqueue metrics (workqueue_depth, _adds_total, ...). */
export interface WorkQueueObserver {
  /** A key asked for (once while it waits, once while it is processed), and the depth after it. */
  added(depth: number): void;
  /** A key asked for during its pass queued again once the pass is done (counted when it was asked for). */
  requeued(depth: number): void;
  taken(depth: number, waitedSeconds: number): void;
  worked(seconds: number): void;
  retried(): void;
  /** Keys being processed now, told when one is taken and when one is done (after a dirty key is queued again). */
  active(workers: number): void;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private waiters: (() => void)[] = [];
  private shuttingDown = false;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;

  private readonly observer: WorkQueueObserver | undefined;
  private readonly addedAt = new Map<string, number>();

  constructor(opts: { baseDelayMs?: number; maxDelayMs?: number; observer?: WorkQueueObserver } = {}) {
    this.baseDelayMs = opts.baseDelayMs ?? 500;
    this.maxDelayMs = opts.maxDelayMs ?? 5 * 60_000;
    this.observer = opts.observer;
  }

  get depth(): number {
    return this.queue.length;
  }

  /** Keys scheduled for later (addAfter, backoff), not yet in the queue. */
  get scheduled(): number {
    return this.timers.size;
  }

  add(key: string): void {
    if (this.shuttingDown) return;
    if (this.processing.has(key)) {
      // Counted now, as client-go counts it: the pass it asks for runs once the one in flight is done.
      if (!this.dirty.has(key)) this.observer?.added(this.queue.length);
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.observer?.added(this.queue.length + 1);
    this.enqueue(key);
  }

  private enqueue(key: string): void {
    this.queued.add(key);
    this.queue.push(key);
    this.addedAt.set(key, performance.now());
    this.waiters.shift()?.();
  }

  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    const existing = this.timers.get(key);
    if (existing) clearTimeout(existing);
    const t = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, ms);
    t.unref();
    this.timers.set(key, t);
  }

  /** Requeue after this key's next backoff delay. */
  addRateLimited(key: string): number {
    const n = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, n);
    this.observer?.retried();
    const delay = exponentialDelay(n, { initialMs: this.baseDelayMs, maxMs: this.maxDelayMs, jitter: 0.2 });
    this.addAfter(key, delay);
    return delay;
  }

  forget(key: string): void {
    this.failures.delete(key);
  }

  private async next(): Promise<string | undefined> {
    while (!this.queue.length) {
      if (this.shuttingDown) return undefined;
      await new Promise<void>((r) => this.waiters.push(r));
    }
    const key = this.queue.shift()!;
    this.queued.delete(key);
    this.processing.add(key);
    const at = this.addedAt.get(key);
    this.addedAt.delete(key);
    this.observer?.taken(this.queue.length, at === undefined ? 0 : (performance.now() - at) / 1000);
    this.observer?.active(this.processing.size);
    return key;
  }

  private done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.delete(key) && !this.shuttingDown) {
      this.enqueue(key);
      this.observer?.requeued(this.queue.length);
    }
    this.observer?.active(this.processing.size);
  }

  /** Run `workers` loops until shutDown(); `handle` throws to back off. */
  async run(workers: number, handle: (key: string) => Promise<void>): Promise<void> {
    await Promise.all(
      Array.from({ length: workers }, async () => {
        for (let key = await this.next(); key !== undefined; key = await this.next()) {
          const started = performance.now();
          try {
            await handle(key);
          } finally {
            this.observer?.worked((performance.now() - started) / 1000);
            this.done(key);
          }
        }
      }),
    );
  }

  shutDown(): void {
    this.shuttingDown = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    for (const w of this.waiters.splice(0)) w();
  }
}
