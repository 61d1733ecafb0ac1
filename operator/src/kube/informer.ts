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
import { StringPool } from "./string-pool.ts";

/** One page of a list: at most `limit` items, after the page whose continue token is `_continue`. */
export interface ListPage {
  limit: number;
  _continue?: string;
}

/** Objects per page of an informer's list. */
export const LIST_PAGE = 500;

/** The strings the cached objects of every informer share (string-pool.ts). */
const SHARED = new StringPool();

/**
 * Drops what no controller reads from a cached object: `metadata.managedFields` (server-side
 * apply's bookkeeping, often larger than the object itself), and holds its strings once where
 * other cached objects hold the same (`pool`). The cache keeps the object it hands to the
 * handlers, so making it lean there is making it lean in the cache.
 */
export function lean<T extends KubernetesObject>(obj: T, pool: StringPool = SHARED): T {
  // A new metadata rather than a deleted field: an object a field is deleted from is held by V8
  // as a dictionary, which took a quarter of the heap of an Agent's cached children (15.6 against
  // 11.9 KB, bench:cache-memory).
  if (obj?.metadata && "managedFields" in obj.metadata) {
    const { managedFields: _, ...metadata } = obj.metadata;
    obj.metadata = metadata;
  }
  return pool.internAll(obj);
}

/**
 * A listed object as a watch event brings it: the API's JSON parsed, not client-node's typed
 * models, whose objects take about a quarter more heap for the same fields (measured on an
 * Agent's children: 22.7 against 18.1 KB), with the API's time format (seconds, as the API
 * server writes them) instead of Dates. The field names stay the typed ones (`_from`).
 */
export function asParsed<T extends KubernetesObject>(obj: T): T {
  if (obj?.metadata && "managedFields" in obj.metadata) delete obj.metadata.managedFields;
  return JSON.parse(
    JSON.stringify(obj, function (this: Record<string, unknown>, key, value) {
      const raw = this[key];
      return raw instanceof Date ? raw.toISOString().replace(/\.000Z$/, "Z") : value;
    }),
  ) as T;
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
    list: (page: ListPage) => Promise<KubernetesListObject<T>>,
    opts: {
      name: string;
      labelSelector?: string;
      log: Logger;
      onChange: (obj: T) => void;
      pageSize?: number;
      /** Changes each object, listed or watched, in place before it is made lean and cached. */
      compact?: (obj: T) => void;
    },
  ) {
    const leanOne = (obj: T): T => {
      opts.compact?.(obj);
      return lean(obj);
    };
    // In pages, each made lean before the next is asked for: a list of every Secret of ten
    // thousand Agents, whole and with its managedFields, would take more memory while it is
    // read than the cache holds afterwards. Each item is held as parsed JSON (asParsed). The pages are one consistent snapshot (the API
    // server's continue token), whose resourceVersion the watch starts from.
    const listOnce = async () => {
      const items: T[] = [];
      let first: KubernetesListObject<T> | undefined;
      let next: string | undefined;
      do {
        const l = await list({ limit: opts.pageSize ?? LIST_PAGE, ...(next ? { _continue: next } : {}) });
        first ??= l;
        for (const item of l.items) items.push(leanOne(asParsed(item)));
        // Typed lists name the token `_continue`; a custom resource's list is the API's JSON.
        next = l.metadata?._continue ?? (l.metadata as { continue?: string } | undefined)?.continue;
      } while (next);
      this.listed = true;
      return { ...first, metadata: { resourceVersion: first.metadata?.resourceVersion }, items };
    };
    this.inner = makeInformer<T>(kc, path, listOnce, opts.labelSelector);
    this.log = opts.log;
    this.name = opts.name;
    for (const verb of ["add", "update", "delete"] as const)
      this.inner.on(verb, (obj: T) => opts.onChange(leanOne(obj)));
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
