import type { Agent } from "../resources/agent.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Verified } from "../protocol/verify.ts";
import type { ConversationLevels } from "./identity-levels.ts";
import { inspect, type InboundMeta, type Inspection, type PeerCapabilityCache } from "./inbound.ts";
import type { OutboxStore } from "./outbox.ts";
import { errorReply } from "./replies.ts";
import type { InboxStore } from "./store.ts";

/** Where accepted messages go; `received` lets a repeat be told from a downgrade. */
export type AcceptStore = Pick<InboxStore, "accept"> & Partial<Pick<InboxStore, "received">>;

export type OnAccepted = (message: Message, meta: InboundMeta, inspection: Inspection) => Promise<void>;

/**
 * Accept one verified message, whether it came to the inbox or from a relay: refuse a lower
 * authentication level than its conversation already had (401), inspect it, store
 * it (deduplicated), and queue what the inspection calls for. Resolves only once all of that is
 * durable; a failure after storing throws 503 so that the message comes again.
 */
export async function acceptVerified(
  deps: { agent: Agent; store: AcceptStore; onAccepted?: OnAccepted; levels?: Pick<ConversationLevels, "check"> },
  raw: unknown,
  message: Message,
  verified: Verified,
): Promise<{ duplicate: boolean }> {
  const h = message.headers;
  const meta = { sender: verified.signer ?? h.from.agent, authLevel: verified.authLevel };
  try {
    await deps.levels?.check(meta.sender, h.conversation_id, verified.authLevel);
  } catch (err) {
    // A retry of a message accepted before the conversation's level rose is a repeat, not a downgrade.
    const earlier = err instanceof ProtocolError && err.code === "insufficient_auth_level" ? await deps.store.received?.(h.message_id).catch(() => undefined) : undefined;
    if (earlier && earlier.headers.from.agent === h.from.agent) return { duplicate: true };
    throw err;
  }
  const inspection = inspect(message, meta, deps.agent);
  const result = await deps.store.accept(raw, h.message_id, { ...verified, handoff: inspection.deliver }, h.from.agent);
  if (deps.onAccepted && (inspection.error || inspection.capabilities)) {
    try {
      await deps.onAccepted(message, meta, inspection);
    } catch (err) {
      throw unavailable(`the message was stored but its answer could not be queued: ${(err as Error).message}`);
    }
  }
  return result;
}

/**
 * What an inspection calls for, once the message is stored: a capability document from a
 * greeting is remembered for its sender, and an error-phase answer is signed and queued in
 * the outbox. Both are idempotent (the reply's id derives from the message it answers).
 */
export function inspectionEffects(deps: {
  self: { agentId: string; displayName?: string };
  signing: SigningKey;
  outbox: Pick<OutboxStore, "enqueue">;
  peers: Pick<PeerCapabilityCache, "put">;
}): OnAccepted {
  return async (message, meta, inspection) => {
    if (inspection.capabilities) {
      await deps.peers.put(meta.sender, {
        agent_id: meta.sender,
        document: inspection.capabilities,
        source: "greeting",
        message_id: message.headers.message_id,
        learned_at: new Date().toISOString(),
      });
    }
    if (inspection.error) {
      await deps.outbox.enqueue(signMessage(errorReply(message, deps.self, inspection.error), deps.signing));
    }
  };
}
