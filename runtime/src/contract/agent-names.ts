import { encodeToken } from "./nats.ts";

/**
 * JetStream names of one agent, shared by the agent runtime and the operator (which grants them
 * in the agent's NATS credential). Replicas of the same agent share them.
 */
export function agentNames(agentId: string) {
  const t = encodeToken(agentId);
  return {
    inboxStream: `IFP_INBOX_${t}`,
    inboxSubjects: `ifp.inbox.${t}.>`,
    /** Accepted inbound messages, one subject per message_id so a reply can find its original. */
    inboxMessages: `ifp.inbox.${t}.msg.>`,
    inbox: (messageId: string) => `ifp.inbox.${t}.msg.${encodeToken(messageId)}`,
    /** Inbound messages the handler never took. */
    dead: `ifp.inbox.${t}.dead`,
    handlerConsumer: "handler",
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
export function agentJetStream(agentId: string): { streams: string[]; buckets: string[]; sharedKeys: { stream: string; subject: string } } {
  const n = agentNames(agentId);
  return {
    streams: [n.inboxStream, n.outboxStream],
    buckets: [n.outboxStateBucket, n.peersBucket, n.conversationsBucket],
    sharedKeys: { stream: `KV_${n.kvBucket}`, subject: `$KV.${n.kvBucket}.${n.kvKey}.>` },
  };
}
