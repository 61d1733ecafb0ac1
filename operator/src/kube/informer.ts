import { makeInformer, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";

/**
 * An informer that keeps going: client-node's informers stop on unexpected errors, so this one
 * restarts with exponential backoff, and it is ready only after its first complete list.
 */
export class ResilientInformer<T extends KubernetesObject> {
  private readonly inner: ReturnType<typeof makeInformer<T>>;
  private readonly log: Logger;
  private readonly name: string;
  private delay = 1000;
  private stopped = false;
  private synced = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(kc: KubeConfig, path: string, list: () => Promise<KubernetesListObject<T>>, opts: { name: string; labelSelector?: string; log: Logger; onChange: (obj: T) => void }) {
    this.inner = makeInformer<T>(kc, path, list, opts.labelSelector);
    this.log = opts.log;
    this.name = opts.name;
    for (const verb of ["add", "update", "delete"] as const) this.inner.on(verb, (obj: T) => opts.onChange(obj));
    this.inner.on("error", (err: unknown) => {
      if (this.stopped) return;
      const wait = this.delay;
      this.delay = Math.min(this.delay * 2, 30_000);
      this.log.warn({ informer: this.name, err: (err as Error)?.message ?? String(err), retryInMs: wait }, "watch failed; restarting");
      this.timer = setTimeout(() => void this.start(), wait);
    });
  }

  get hasSynced(): boolean {
    return this.synced;
  }

  async start(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.inner.start();
      this.synced = true;
      this.delay = 1000;
    } catch (err) {
      const wait = this.delay;
      this.delay = Math.min(this.delay * 2, 30_000);
      this.log.warn({ informer: this.name, err: (err as Error).message, retryInMs: wait }, "list failed; retrying");
      this.timer = setTimeout(() => void this.start(), wait);
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
