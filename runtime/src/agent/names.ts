import { encodeToken } from "../nats/subjects.ts";

/** JetStream names of one agent. Replicas of the same agent share them. */
export function agentNames(agentId: string) {
  const t = encodeToken(agentId);
  return {
    inboxStream: `IFP_INBOX_${t}`,
    inboxSubjects: `ifp.inbox.${t}.>`,
    /** Accepted inbound messages. */
    inbox: `ifp.inbox.${t}.msg`,
    /** Inbound messages the handler never took. */
    dead: `ifp.inbox.${t}.dead`,
    handlerConsumer: "handler",
    outboxStream: `IFP_OUTBOX_${t}`,
    outboxSubjects: `ifp.outbox.${t}.>`,
    outbox: `ifp.outbox.${t}.msg`,
    kvBucket: "ifp_agents",
    kvKey: t,
  };
}
export type AgentNames = ReturnType<typeof agentNames>;
