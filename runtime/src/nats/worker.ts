import type { ConsumerConfig, JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { Nats } from "./connection.ts";
import { isNotFound } from "./streams.ts";

export interface WorkerOptions {
  stream: string;
  /** Durable consumer config; its name is `durable_name`. */
  consumer: Partial<ConsumerConfig> & { durable_name: string };
  /** Fields re-applied to an existing consumer on start (e.g. ack_wait after a config change). */
  updatable?: (keyof ConsumerConfig)[];
  concurrency: number;
  handle(m: JsMsg): Promise<void>;
  /** Called when handle() throws; the default naks the message for a retry in 5 s. */
  onError?(m: JsMsg, err: unknown): void;
  label: string;
}

/**
 * A durable JetStream consumer worked by this process: it creates or updates the consumer,
 * consumes with up to `concurrency` messages in flight, and reconnects with backoff whenever
 * the consumer or the connection goes away, until stop(). Replicas share the consumer, so
 * each message goes to one of them.
 */
export class ConsumerWorker {
  private stopped = false;
  private loop: Promise<void> | undefined;
  private active: { stop(): void } | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly nats: Nats;
  private readonly opts: WorkerOptions;
  private readonly log: Logger;

  constructor(nats: Nats, opts: WorkerOptions, log: Logger) {
    this.nats = nats;
    this.opts = opts;
    this.log = log;
  }

  async ensureConsumer(): Promise<void> {
    const { stream, consumer, updatable = [] } = this.opts;
    try {
      await this.nats.jsm.consumers.info(stream, consumer.durable_name);
      if (updatable.length) {
        const update = Object.fromEntries(updatable.map((k) => [k, consumer[k]]));
        await this.nats.jsm.consumers.update(stream, consumer.durable_name, update);
      }
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await this.nats.jsm.consumers.add(stream, consumer);
    }
  }

  start(): void {
    this.loop ??= this.run();
  }

  private async run(): Promise<void> {
    const { stream, consumer, concurrency } = this.opts;
    let delay = 500;
    while (!this.stopped) {
      try {
        await this.ensureConsumer();
        const c = await this.nats.js.consumers.get(stream, consumer.durable_name);
        const messages = await c.consume({ max_messages: concurrency * 2 });
        this.active = messages;
        delay = 500;
        for await (const m of messages) {
          while (this.inFlight.size >= concurrency) await Promise.race(this.inFlight);
          const p = this.opts
            .handle(m)
            .catch((err) => {
              if (this.opts.onError) this.opts.onError(m, err);
              else {
                this.log.warn({ err: (err as Error).message }, `${this.opts.label}: step failed; will retry`);
                m.nak(5_000);
              }
            })
            .finally(() => this.inFlight.delete(p));
          this.inFlight.add(p);
          if (this.stopped) break;
        }
      } catch (err) {
        if (this.stopped) break;
        this.log.warn({ err: (err as Error).message, retryInMs: delay }, `${this.opts.label} interrupted`);
      }
      if (this.stopped) break;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10_000);
    }
    await Promise.allSettled([...this.inFlight]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.active?.stop();
    await this.loop;
  }
}
