// OutboxStore: the JetStream work-queue stream in which outbound messages are queued durably
// before anything is sent, and from which redriven dead letters are queued again.
import { headers } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType, type StreamConfig } from "@nats-io/jetstream";
import type { StreamKeeping } from "../nats/stream-keeper.ts";
import type { Nats } from "../nats/connection.ts";
import { ensureReplicatedStream, type Replicas } from "../nats/streams.ts";
import { nanos } from "../contract/nats.ts";
import { unavailable } from "../protocol/errors.ts";
import { Message } from "../protocol/message.ts";
import type { AgentNames } from "./names.ts";

const OUTBOX_MAX_AGE_MS = 7 * 24 * 3600_000;

/**
 * Outbound messages, durably queued in JetStream before anything is sent: a work-queue
 * stream whose entries are removed once delivered (or given up on).
 */
export class OutboxStore {
  private readonly nats: Nats;
  private readonly names: AgentNames;

  private readonly replicas: Replicas;

  constructor(nats: Nats, names: AgentNames, replicas: Replicas = "auto") {
    this.nats = nats;
    this.names = names;
    this.replicas = replicas;
  }

  /** Create or update the stream, as InboxStore.ensure. */
  async ensure(keeper?: StreamKeeping): Promise<void> {
    const want = this.streamConfig();
    await (keeper
      ? keeper.ensure(want, this.replicas)
      : ensureReplicatedStream(this.nats.jsm, want, this.replicas, this.nats.placement));
  }

  streamConfig(): Partial<StreamConfig> & { name: string } {
    return {
      name: this.names.outboxStream,
      subjects: [this.names.outboxSubjects],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_age: nanos(OUTBOX_MAX_AGE_MS),
      duplicate_window: nanos(24 * 3600_000),
    };
  }

  /**
   * Queue a signed message; a repeated message_id is queued once. `dedupId` replaces the
   * message_id as what is queued once (a redrive's own id: the message_id was queued before).
   */
  async enqueue(message: Message, dedupId?: string): Promise<{ duplicate: boolean; seq: number }> {
    if (!this.nats.isConnected) throw unavailable("the outbox (NATS JetStream) is not reachable");
    const h = headers();
    h.set("Ifp-Message-Id", message.headers.message_id);
    try {
      const ack = await this.nats.layout.once.publish(
        this.nats.js,
        this.names.outbox,
        dedupId ?? message.headers.message_id,
        JSON.stringify(message),
        { headers: h, timeout: 5_000 },
      );
      return { duplicate: ack.duplicate, seq: ack.seq };
    } catch (err) {
      throw unavailable(`the message could not be queued: ${(err as Error).message}`);
    }
  }

  /** Queue a dead letter's signed message (as kept with it) again, once under `dedupId`. */
  async requeue(message: string, dedupId: string): Promise<void> {
    await this.enqueue(Message.parse(JSON.parse(message)), dedupId);
  }
}
