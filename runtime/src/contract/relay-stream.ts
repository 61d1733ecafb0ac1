// A Relay's JetStream stream: its names and the config its spec.retention asks for. The relay
// runtime publishes and reads by these names; the operator creates and updates the stream.
import type { StreamConfig } from "@nats-io/jetstream";
import { encodeToken, nanos } from "./nats.ts";
import { parseDuration } from "../resources/fields.ts";
import type { Relay } from "../resources/relay.ts";

/**
 * JetStream names of one Relay, shared by the relay runtime and the operator. The stream is
 * named after the resource (namespace/name), so it survives edits of spec.url.
 */
export function relayNames(relay: Pick<Relay, "metadata" | "spec">) {
  const { namespace, name } = relay.metadata;
  const id = name ? (namespace ? `${namespace}/${name}` : name) : new URL(relay.spec.url).host;
  const t = encodeToken(id);
  const mbox = `ifp.relay.${t}.mbox`;
  return {
    stream: `IFP_RELAY_${t}`,
    subjects: `ifp.relay.${t}.>`,
    /** Every mailbox copy. */
    mailboxes: `${mbox}.>`,
    /** One agent's mailbox. */
    mailbox: (agent: string) => `${mbox}.${encodeToken(agent)}.>`,
    /** One copy: per recipient and message_id, so a recipient's ack finds it directly. */
    copy: (agent: string, messageId: string) => `${mbox}.${encodeToken(agent)}.${encodeToken(messageId)}`,
    /** Copies whose push delivery was given up. */
    deadLetters: (agent: string) => `ifp.relay.${t}.dead.${encodeToken(agent)}.>`,
    dead: (agent: string, messageId: string) => `ifp.relay.${t}.dead.${encodeToken(agent)}.${encodeToken(messageId)}`,
    kvBucket: `ifp_relay_${t}`,
    /** The durable consumer that pushes one agent's mailbox to its webhook. */
    pushConsumer: (agent: string) => `push_${encodeToken(agent)}`,
  };
}
export type RelayNames = ReturnType<typeof relayNames>;

/**
 * The stream a Relay's spec.retention asks for: file (or memory) storage, limits retention so
 * that an acknowledgement deletes, `discard: new` so that a full relay refuses new messages
 * instead of dropping unacknowledged ones, per-message TTL allowed, and the duplicate window
 * (never longer than max_age, which JetStream would refuse).
 */
export function relayStreamConfig(relay: Pick<Relay, "metadata" | "spec">): Partial<StreamConfig> & { name: string } {
  const r = relay.spec.retention;
  const names = relayNames(relay);
  const maxAgeMs = parseDuration(r.maxAge);
  return {
    name: names.stream,
    subjects: [names.subjects],
    // The values of jetstream's RetentionPolicy.Limits, StorageType.* and DiscardPolicy.New,
    // spelled out so that this file loads no NATS client.
    retention: "limits",
    storage: r.storage === "memory" ? "memory" : "file",
    discard: "new",
    max_age: nanos(maxAgeMs),
    max_bytes: r.maxBytes,
    max_msgs: r.maxMessages,
    num_replicas: r.replicas,
    duplicate_window: nanos(Math.min(parseDuration(r.duplicateWindow), maxAgeMs)),
    allow_msg_ttl: true,
    allow_direct: true,
  };
}
