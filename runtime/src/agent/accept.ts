import type { Agent } from "../resources/agent.ts";
import { unavailable } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import type { Verified } from "../protocol/verify.ts";
import { inspect, type InboundMeta, type Inspection } from "./inbound.ts";
import type { InboxStore } from "./store.ts";

export type OnAccepted = (message: Message, meta: InboundMeta, inspection: Inspection) => Promise<void>;

/**
 * Accept one verified message, whether it came to the inbox or from a relay: inspect it, store
 * it (deduplicated), and queue what the inspection calls for. Resolves only once all of that is
 * durable; a failure after storing throws 503 so that the message comes again.
 */
export async function acceptVerified(
  deps: { agent: Agent; store: Pick<InboxStore, "accept">; onAccepted?: OnAccepted },
  raw: unknown,
  message: Message,
  verified: Verified,
): Promise<{ duplicate: boolean }> {
  const h = message.headers;
  const meta = { sender: verified.signer ?? h.from.agent, authLevel: verified.authLevel };
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
