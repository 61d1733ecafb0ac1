// ConsumerWorker: a durable JetStream consumer worked by this process with bounded concurrency,
// set up again with backoff whenever the consumer or the connection goes away.
import { DeliverPolicy, type ConsumerConfig, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { Backoff } from "../util/backoff.ts";
import { errorMessage } from "../util/errors.ts";
import type { Nats } from "./connection.ts";

export interface WorkerOptions {
  stream: string;
  /** Durable consumer config; its name is `durable_name`. The consumer is created, and recreated, with it. */
  consumer: Partial<ConsumerConfig> & { durable_name: string };
  /** Fields re-applied to an existing consumer on start (e.g. ack_wait after a config change). */
  updatable?: (keyof ConsumerConfig)[];
  /**
   * Where a consumer recreated after it went away starts. `config` (the default): as
   * `consumer` says — right for streams whose handled messages are deleted (work queues,
   * mailboxes). `ack-floor`: after the last acknowledgement floor this worker saw (refreshed
   * every `ackFloorRefreshMs`), for streams that keep handled messages, so that they are not all
   * handed out again; the few acknowledged since the last refresh may be.
   */
  recreateFrom?: "config" | "ack-floor";
  ackFloorRefreshMs?: number;
  concurrency: number;
  handle(m: JsMsg): Promise<void>;
  /** Called when handle() throws; the default naks the message for a retry in 5 s. */
  onError?(m: JsMsg, err: unknown): void;
  label: string;
}

/**
 * A durable JetStream consumer worked by this process: it creates or updates the consumer,
 * consumes with up to `concurrency` messages in flight, and starts over with backoff whenever
 * the consumer or the connection goes away — recreating a deleted consumer — until stop(),
 * which may come at any time, also while the consumer is being set up. Replicas share the
 * consumer, so each message goes to one of them.
 */
export class ConsumerWorker {
  private stopped = false;
  private loop: Promise<void> | undefined;
  private active: { stop(): void } | undefined;
  private readonly wake = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly nats: Nats;
  private readonly opts: WorkerOptions;
  private readonly log: Logger;
  private floor: number | undefined;
  /** Whether the consumer was ever worked here, so that its absence now means it went away. */
  private bound = false;

  constructor(nats: Nats, opts: WorkerOptions, log: Logger) {
    this.nats = nats;
    this.opts = opts;
    this.log = log;
  }

  /** The stream sequence of the consumer's acknowledgement floor when last seen (recreateFrom "ack-floor"). */
  get ackFloor(): number | undefined {
    return this.floor;
  }

  /**
   * Create the consumer, or update the `updatable` fields of the one that exists; on a layout
   * whose consumers the operator makes, find it (nats/layout.ts).
   */
  async ensureConsumer(): Promise<void> {
    const { stream, consumer, updatable = [] } = this.opts;
    const resume =
      this.opts.recreateFrom === "ack-floor" && this.floor
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.floor + 1 }
        : {};
    const floor = await this.nats.layout.consumers.ready(this.nats.jsm, stream, consumer, {
      updatable,
      resume,
      onRecreate: () => {
        if (this.bound)
          this.log.warn(
            { consumer: consumer.durable_name, ...resume },
            `${this.opts.label}: consumer missing; creating it`,
          );
      },
    });
    if (floor !== undefined) this.floor = floor;
  }

  start(): void {
    this.loop ??= this.run();
  }

  private async run(): Promise<void> {
    const { stream, consumer, concurrency } = this.opts;
    const backoff = new Backoff({ initialMs: 500, maxMs: 10_000 });
    while (!this.stopped) {
      let refresh: NodeJS.Timeout | undefined;
      try {
        await this.ensureConsumer();
        const c = await this.nats.js.consumers.get(stream, consumer.durable_name);
        if (this.stopped) break;
        // A deleted consumer ends the iteration (by default NATS.js waits for it to come back,
        // which nobody would do): the loop recreates it.
        const messages = await c.consume({ max_messages: concurrency * 2, abort_on_missing_resource: true });
        this.active = messages;
        if (this.stopped) {
          messages.stop();
          break;
        }
        this.bound = true;
        if (this.opts.recreateFrom === "ack-floor") refresh = this.refreshFloor();
        backoff.reset();
        for await (const m of messages) {
          while (this.inFlight.size >= concurrency) await Promise.race(this.inFlight);
          const p: Promise<void> = this.opts
            .handle(m)
            .catch((err) => {
              if (this.opts.onError) this.opts.onError(m, err);
              else {
                this.log.warn({ err: errorMessage(err) }, `${this.opts.label}: step failed; will retry in 5 s`);
                m.nak(5_000);
              }
            })
            .finally(() => this.inFlight.delete(p));
          this.inFlight.add(p);
          if (this.stopped) break;
        }
        if (!this.stopped)
          this.log.warn({ retryInMs: backoff.delayMs }, `${this.opts.label}: consumer ended; starting over`);
      } catch (err) {
        if (this.stopped) break;
        this.log.warn({ err: errorMessage(err), retryInMs: backoff.delayMs }, `${this.opts.label} interrupted`);
      } finally {
        clearInterval(refresh);
        this.active = undefined;
      }
      if (!this.stopped) await backoff.wait(this.wake.signal);
    }
    await Promise.allSettled([...this.inFlight]);
  }

  private refreshFloor(): NodeJS.Timeout {
    const { stream, consumer, ackFloorRefreshMs = 30_000 } = this.opts;
    const timer = setInterval(() => {
      this.nats.jsm.consumers.info(stream, consumer.durable_name).then(
        (info) => (this.floor = info.ack_floor.stream_seq),
        () => {}, // gone or unreachable: the loop notices; the last floor seen stays
      );
    }, ackFloorRefreshMs);
    timer.unref();
    return timer;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake.abort();
    this.active?.stop();
    await this.loop;
  }
}
