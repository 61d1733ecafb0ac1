// FollowingBucket: the KV bucket handle Nats.bucket() gives, which follows the process's NATS
// connection: when the connection it was opened on has been replaced by a new one (the client gave
// the old one up), it opens the bucket again on the new one before its next call.
import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";

/**
 * A KV bucket on whatever connection is current. `current` gives the JetStream client of the
 * connection in use; `open` opens the bucket on a client (as the layout opens it). A reopening that
 * fails fails the call that asked for it, and is tried again at the next call.
 */
export class FollowingBucket implements KV {
  private readonly current: () => JetStreamClient;
  private readonly open: (js: JetStreamClient) => Promise<KV>;
  /** The client the bucket was last opened on, and the bucket once opened. */
  private on: JetStreamClient | undefined;
  private opened: Promise<KV>;
  private ready: KV | undefined;

  constructor(current: () => JetStreamClient, open: (js: JetStreamClient) => Promise<KV>, on: JetStreamClient, kv: KV) {
    this.current = current;
    this.open = open;
    this.on = on;
    this.ready = kv;
    this.opened = Promise.resolve(kv);
  }

  /** `call` on the bucket of the current connection, opened again first when the connection is another. */
  private use<T>(call: (kv: KV) => Promise<T>): Promise<T> {
    const js = this.current();
    if (this.on === js && this.ready) return call(this.ready);
    if (this.on !== js) {
      this.on = js;
      this.ready = undefined;
      this.opened = this.open(js).then(
        (kv) => {
          if (this.on === js) this.ready = kv;
          return kv;
        },
        (err: unknown) => {
          if (this.on === js) this.on = undefined;
          throw err;
        },
      );
    }
    return this.opened.then(call);
  }

  get(...args: Parameters<KV["get"]>) {
    return this.use((kv) => kv.get(...args));
  }
  history(...args: Parameters<KV["history"]>) {
    return this.use((kv) => kv.history(...args));
  }
  watch(...args: Parameters<KV["watch"]>) {
    return this.use((kv) => kv.watch(...args));
  }
  status() {
    return this.use((kv) => kv.status());
  }
  keys(...args: Parameters<KV["keys"]>) {
    return this.use((kv) => kv.keys(...args));
  }
  create(...args: Parameters<KV["create"]>) {
    return this.use((kv) => kv.create(...args));
  }
  update(...args: Parameters<KV["update"]>) {
    return this.use((kv) => kv.update(...args));
  }
  put(...args: Parameters<KV["put"]>) {
    return this.use((kv) => kv.put(...args));
  }
  delete(...args: Parameters<KV["delete"]>) {
    return this.use((kv) => kv.delete(...args));
  }
  purge(...args: Parameters<KV["purge"]>) {
    return this.use((kv) => kv.purge(...args));
  }
  destroy() {
    return this.use((kv) => kv.destroy());
  }
}
