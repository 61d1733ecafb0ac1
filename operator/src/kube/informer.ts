// client-node's informers stop for good on an unexpected error; this one restarts with backoff
// and keeps its cached objects lean.
import {
  makeInformer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { Backoff } from "../../../runtime/src/util/backoff.ts";
import { errorMessage } from "./client.ts";

/**
 * Drops what no controller reads from a cached object: `metadata.managedFields` (server-side
 * apply's bookkeeping, often larger than the object itself). The cache keeps the object it
 * hands to the handlers, so stripping it there is stripping it in the cache.
 */
export function lean<T extends KubernetesObject>(obj: T): T {
  if (obj?.metadata && "managedFields" in obj.metadata) delete obj.metadata.managedFields;
  return obj;
}

/**
 * An informer that keeps going: restarted with exponential backoff (1 s … 30 s) whenever its
 * list or watch fails, resuming from the last resourceVersion (a full relist when that is too
 * old), and synced only once a first list has been stored.
 */
export class ResilientInformer<T extends KubernetesObject> {
  private readonly inner: ReturnType<typeof makeInformer<T>>;
  private readonly log: Logger;
  private readonly name: string;
  private readonly backoff = new Backoff({ initialMs: 1_000, maxMs: 30_000, jitter: 0.2 });
  private stopped = false;
  private listed = false;
  private synced = false;
  private timer: NodeJS.Timeout | undefined;
  /** Restarts so far (for tests and metrics). */
  restarts = 0;

  constructor(
    kc: KubeConfig,
    path: string,
    list: () => Promise<KubernetesListObject<T>>,
    opts: { name: string; labelSelector?: string; log: Logger; onChange: (obj: T) => void },
  ) {
    const listOnce = async () => {
      const l = await list();
      for (const item of l.items) lean(item);
      this.listed = true;
      return l;
    };
    this.inner = makeInformer<T>(kc, path, listOnce, opts.labelSelector);
    this.log = opts.log;
    this.name = opts.name;
    for (const verb of ["add", "update", "delete"] as const) this.inner.on(verb, (obj: T) => opts.onChange(lean(obj)));
    this.inner.on("error", (err: unknown) => this.restartLater(err, "watch failed"));
  }

  get hasSynced(): boolean {
    return this.synced;
  }

  private restartLater(err: unknown, what: string): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    const wait = this.backoff.next();
    this.log.warn({ informer: this.name, err: errorMessage(err), retryInMs: Math.round(wait) }, `${what}; restarting`);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.restarts++;
      void this.start();
    }, wait);
  }

  /** Resolves after the first attempt; the informer keeps retrying in the background. */
  async start(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.inner.start();
      // A failed list reports through the error handler and resolves start(): synced only
      // once a list has really been stored.
      if (this.listed) {
        this.synced = true;
        this.backoff.reset();
      }
    } catch (err) {
      this.restartLater(err, "list or watch failed");
    }
  }

  list(namespace?: string): readonly T[] {
    return this.inner.list(namespace);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.inner.get(name, namespace);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.inner.stop().catch(() => {});
  }
}
