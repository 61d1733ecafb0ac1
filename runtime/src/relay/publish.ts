// Pure parts of a publish: topic names, the agents a message goes to (direct recipients and
// topic subscribers), the time its TTL leaves it, and the relay's trace entry (spec 2.9).
import { badRequest, notFound } from "../protocol/errors.ts";
import { isoSeconds } from "../util/time.ts";
import type { MessageHeaders, TraceEntry } from "../protocol/message.ts";
import { isTopicName, MAX_TOPIC_LENGTH, TOPIC_PREFIX } from "../protocol/relay-api.ts";

/** The transport label of the trace entry (spec 2.9): IFP-4 messages over HTTPS. */
export const TRANSPORT_LABEL = "https+ifp-4";
/** The label for a message published in a WebSocket session (RFC 6455 over TLS, the wss scheme). */
export const WEBSOCKET_TRANSPORT_LABEL = "wss+ifp-4";
export type TransportLabel = typeof TRANSPORT_LABEL | typeof WEBSOCKET_TRANSPORT_LABEL;

export function assertTopicName(name: string): void {
  if (!isTopicName(name)) {
    throw badRequest(
      `topic ${JSON.stringify(name)} is not a dot-notation name such as capabilities.update (letters, digits, _ and -, at most ${MAX_TOPIC_LENGTH} characters)`,
    );
  }
}

/** The agents a message goes to: direct recipients, and the subscribers of each topic it names. */
export function resolveRecipients(
  to: ReadonlyArray<{ agent: string }>,
  sender: string,
  serves: (agent: string) => boolean,
  subscribers: (topic: string) => Iterable<string>,
): { agents: string[]; topics: string[] } {
  const agents = new Set<string>();
  const topics: string[] = [];
  for (const { agent } of to) {
    if (agent.startsWith(TOPIC_PREFIX)) {
      const topic = agent.slice(TOPIC_PREFIX.length);
      assertTopicName(topic);
      topics.push(topic);
      // A topic copy never goes back to its own sender.
      for (const s of subscribers(topic)) if (s !== sender) agents.add(s);
    } else if (serves(agent)) {
      agents.add(agent);
    } else {
      throw notFound(`this relay does not serve ${agent}; nothing was stored`);
    }
  }
  return { agents: [...agents], topics };
}

/**
 * Seconds a message may still wait, from `ttl_seconds` counted from `headers.date` (never
 * more than ttl_seconds, even when the date is ahead of this clock); undefined without a TTL.
 * A message whose TTL has passed is refused: the relay never stores what it may not hand out.
 */
export function remainingTtlSeconds(
  headers: Pick<MessageHeaders, "date" | "ttl_seconds">,
  now: number,
): number | undefined {
  const ttl = headers.ttl_seconds;
  if (ttl === undefined) return undefined;
  const expiresAt = Date.parse(headers.date) + ttl * 1000;
  const left = Math.min(ttl, Math.ceil((expiresAt - now) / 1000));
  if (left <= 0)
    throw badRequest(`the message's ttl_seconds (${ttl}) has already passed since its date ${headers.date}`);
  return left;
}

/** The relay's trace entry (spec 2.9), naming the transport the message came by. */
export function traceEntry(
  relayUrl: string,
  sender: string,
  at: Date,
  transport: TransportLabel = TRANSPORT_LABEL,
): TraceEntry {
  return { by: `relay:${relayUrl.replace(/\/+$/, "")}`, with: transport, at: isoSeconds(at), from: sender };
}

/** The message as sent, with `entry` appended to trace.received[]; nothing else changes. */
export function withTraceEntry<T extends { trace?: unknown }>(message: T, entry: TraceEntry): T {
  const trace = (message.trace ?? {}) as { received?: unknown[] };
  return { ...message, trace: { ...trace, received: [...(trace.received ?? []), entry] } };
}
