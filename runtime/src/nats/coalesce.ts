// Coalescer: the NATS calls asked for in one event-loop turn started together on the next, so
// that they leave in one socket write (the relay's mailbox uses it).
/**
 * Starts the NATS calls asked for during one turn of the event loop together, on the next
 * turn, so that the requests of concurrent HTTP requests leave in one socket write instead of
 * one each (the NATS client flushes once per microtask checkpoint). Costs one setImmediate.
 * Used by the relay (store, acknowledge).
 */
export class Coalescer {
  private queue: (() => void)[] = [];

  run<T>(op: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push(() => {
        try {
          op().then(resolve, reject);
        } catch (err) {
          reject(err);
        }
      });
      if (this.queue.length === 1) {
        setImmediate(() => {
          const ops = this.queue;
          this.queue = [];
          for (const start of ops) start();
        });
      }
    });
  }
}
