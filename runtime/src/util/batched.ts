// Batched: items written one write after another, each write taking every item added while the
// one before it was under way (used by agent/local-api/inbox-look-back.ts and the key indexes of nats/layout.ts).
/**
 * Writes of items one after another, each taking every item added while the one before it was
 * under way: one write for a burst instead of one per item. A write that fails puts its items back
 * for the next; add() resolves (or rejects) with the write that took its item. With `delayMs`, a
 * write waits that long after its first item for more (items that come one at a time, each after
 * the write before has ended, then share a write too), unless settled() is waiting for it.
 */
export class Batched<T> {
  private readonly write: (items: T[]) => Promise<void>;
  /** Added and not taken by a write yet; taken by the write under way. */
  private waiting: T[] = [];
  private taken: T[] = [];
  private queued: Promise<void> | undefined;
  private last: Promise<void> = Promise.resolve();
  private readonly delayMs: number;
  /** Ends the wait of the write that waits for more items (delayMs). */
  private hurry: (() => void) | undefined;
  /** settled() is waiting: the next write does not wait for more items. */
  private urgent = false;

  constructor(write: (items: T[]) => Promise<void>, opts: { delayMs?: number } = {}) {
    this.write = write;
    this.delayMs = opts.delayMs ?? 0;
  }

  /** What is not written yet: added, and taken by the write under way. */
  get unwritten(): readonly T[] {
    return [...this.taken, ...this.waiting];
  }

  add(item: T): Promise<void> {
    this.waiting.push(item);
    if (!this.queued) {
      const next = this.last
        .catch(() => {})
        .then(async () => {
          if (this.delayMs > 0 && !this.urgent)
            await new Promise<void>((r) => {
              this.hurry = r;
              setTimeout(r, this.delayMs).unref();
            });
          this.hurry = undefined;
          this.urgent = false;
          this.queued = undefined;
          this.taken = this.waiting;
          this.waiting = [];
          try {
            await this.write(this.taken);
          } catch (err) {
            this.waiting = [...this.taken, ...this.waiting];
            throw err;
          } finally {
            this.taken = [];
          }
        });
      this.queued = next;
      this.last = next;
    }
    return this.queued;
  }

  /** Resolves once every write started has ended (a write waiting for more items starts at once). */
  async settled(): Promise<void> {
    this.urgent = true;
    this.hurry?.();
    await this.last.catch(() => {});
  }
}
