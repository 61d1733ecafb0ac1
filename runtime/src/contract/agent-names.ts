// The JetStream names of one agent (streams, buckets, consumers, subjects), shared by the agent
// runtime and the operator, and the list of what the operator deletes with its Agent.
import { encodeToken } from "./nats.ts";

/**
 * What an agent's JetStream names are made from: `namespace/name` for an Agent of a cluster
 * (unique there, whatever agentId it claims, as a Relay's stream is named), and the agentId for
 * a runtime started from a manifest without a namespace.
 */
export function agentStoreKey(agent: {
  metadata?: { name?: string; namespace?: string };
  spec: { agentId: string };
}): string {
  const { name, namespace } = agent.metadata ?? {};
  return name && namespace ? `${namespace}/${name}` : agent.spec.agentId;
}

/**
 * JetStream names of one agent (by its agentStoreKey), shared by the agent runtime and the
 * operator (which grants them in the agent's NATS credential). Replicas of the same agent share them.
 */
export function agentNames(key: string) {
  const t = encodeToken(key);
  return {
    inboxStream: `IFP_INBOX_${t}`,
    inboxSubjects: `ifp.inbox.${t}.>`,
    /** Accepted inbound messages, one subject per message_id so a reply can find its original. */
    inboxMessages: `ifp.inbox.${t}.msg.>`,
    inbox: (messageId: string) => `ifp.inbox.${t}.msg.${encodeToken(messageId)}`,
    /** Which sender's copy of a message_id was stored first, where a layout records it (nats/layout.ts). */
    inboxFirst: (messageId: string) => `ifp.inbox.${t}.first.${encodeToken(messageId)}`,
    /** Inbound messages the handler never took. */
    dead: `ifp.inbox.${t}.dead`,
    handlerConsumer: "handler",
    /** The consumer of the local API's message stream (no spec.handler). */
    appConsumer: "application",
    outboxStream: `IFP_OUTBOX_${t}`,
    outboxSubjects: `ifp.outbox.${t}.>`,
    outbox: `ifp.outbox.${t}.msg`,
    senderConsumer: "sender",
    /** Delivery state of outbound messages, by message_id (KV). */
    outboxStateBucket: `ifp_outbox_${t}`,
    /** Capability documents learned from peers' greetings (KV). */
    peersBucket: `ifp_peers_${t}`,
    /** Conversation records (participants, sequences, the authentication level reached) and the thread index (KV; agent/conversations.ts). */
    conversationsBucket: `ifp_conv_${t}`,
    /** A2A tasks of the agent's A2A face, by caller (KV; a2a/tasks.ts). */
    a2aTasksBucket: `ifp_a2a_${t}`,
    kvBucket: "ifp_agents",
    kvKey: t,
  };
}
export type AgentNames = ReturnType<typeof agentNames>;

/**
 * What an agent keeps in JetStream, for the operator to delete with its Agent: the streams
 * (their consumers go with them) and KV buckets of its own, and the subjects of its keys in the
 * bucket every agent shares. Everything the agent runtime creates under its names is listed
 * here; a new stream or bucket must be added, or a deleted Agent leaves it behind.
 */
export function agentJetStream(key: string): {
  streams: string[];
  buckets: string[];
  sharedKeys: { stream: string; subject: string };
} {
  const n = agentNames(key);
  return {
    streams: [n.inboxStream, n.outboxStream],
    buckets: [n.outboxStateBucket, n.peersBucket, n.conversationsBucket, n.a2aTasksBucket],
    sharedKeys: { stream: `KV_${n.kvBucket}`, subject: `$KV.${n.kvBucket}.${n.kvKey}.>` },
  };
}
