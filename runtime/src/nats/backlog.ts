// The backlog of a stream or of a durable consumer (how many messages, how old the oldest), which
// the agent and relay runtimes report as metrics.
import type { NatsLink } from "./link.ts";

export interface Backlog {
  depth: number;
  oldestAgeSeconds: number;
}

const ageOf = (iso: string | undefined, now: number) => {
  const t = iso ? Date.parse(iso) : NaN;
  return Number.isFinite(t) && t > 0 ? Math.max(0, (now - t) / 1000) : 0;
};

/**
 * A stream whose messages are the backlog itself (a work queue such as the outbox, or a relay's
 * mailboxes, whose messages are deleted once taken): its message count and first message's age.
 */
export async function streamBacklog(nats: NatsLink, stream: string, now = Date.now()): Promise<Backlog | undefined> {
  if (!nats.isConnected) return undefined;
  const info = await nats.jsm.streams.info(stream);
  const depth = info.state.messages;
  return { depth, oldestAgeSeconds: depth > 0 ? ageOf(info.state.first_ts, now) : 0 };
}

/**
 * What a durable consumer has still to deliver (or has delivered and not yet seen acknowledged):
 * the inbox keeps handed-off messages for its replay window, so the stream's own count is not the
 * backlog. The oldest age is that of the first message above the consumer's acknowledgement floor.
 */
export async function consumerBacklog(
  nats: NatsLink,
  stream: string,
  consumer: string,
  now = Date.now(),
): Promise<Backlog | undefined> {
  if (!nats.isConnected) return undefined;
  const info = await nats.jsm.consumers.info(stream, consumer);
  const depth = info.num_pending + info.num_ack_pending;
  if (depth === 0) return { depth, oldestAgeSeconds: 0 };
  const first = await nats.jsm.streams.getMessage(stream, { seq: info.ack_floor.stream_seq + 1 }).catch(() => null);
  return { depth, oldestAgeSeconds: first ? Math.max(0, (now - first.time.getTime()) / 1000) : 0 };
}
