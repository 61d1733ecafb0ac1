// The admission of an inbound message, whichever way it came (the inbox or a relay): the checks
// before its signature (recipient, date within the replay window or the relay's retention) and,
// once verified, acceptVerified — conversation record, inspection, storing, what is queued next.
import type { Agent } from "../resources/agent.ts";
import { badRequest, ProtocolError, unavailable } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import { canonicalProblem, signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Verified } from "../protocol/verify.ts";
import type { Conversations } from "./conversations.ts";
import type { AgentEncryption } from "./encryption.ts";
import { withMessageContext } from "../telemetry/tracing.ts";
import type { CapabilityDocument } from "../protocol/documents.ts";
import { inspect, type InboundMeta, type Inspection } from "./inbound.ts";
import type { OutboxStore } from "./outbox.ts";
import { errorReply } from "./replies.ts";
import type { InboxStore } from "./store.ts";

/** Clock skew tolerated on headers.date in the future, unless configured otherwise. */
export const MAX_FUTURE_SKEW_MS = 5 * 60_000;

/** What a message must meet before its signature is even checked, whichever way it came. */
export interface Admission {
  agentId: string;
  /** How far back headers.date may lie: the replay window, which is also the inbox's duplicate window. */
  replayWindowMs: number;
  replayWindowText: string;
  /** Clock skew tolerated on headers.date in the future. */
  maxFutureSkewMs: number;
  /**
   * How long the inbox keeps every message it accepted (its stream's max_age, at least a week):
   * how old a relayed message may be, since a copy of it can still be recognised that long.
   */
  retentionMs?: number;
  now: () => number;
}

/**
 * When the relay a message was read from accepted it: the `at` of the last entry of
 * trace.received[], which that relay appended before handing the message out (spec 4.2); an
 * entry that is not a relay's (`by: relay:<url>`) or has no valid time gives none.
 */
export function relayAcceptedAt(message: Message): number | undefined {
  const last = message.trace?.received?.at(-1) as { by?: unknown; at?: unknown } | undefined;
  if (typeof last?.by !== "string" || !last.by.startsWith("relay:") || typeof last.at !== "string") return undefined;
  const at = Date.parse(last.at);
  return Number.isFinite(at) ? at : undefined;
}

/**
 * The checks every inbound message passes, from the inbox or from a relay, before its
 * signature: it is addressed to this agent (or, through a relay, to a topic the agent is
 * subscribed to there), and it is recent enough that a copy accepted before is still known.
 *
 * - Straight to the inbox: headers.date within the replay window (the duplicate window).
 * - Read from a relay (`relayed`): judged by when the relay accepted it — the `at` of its trace
 *   entry (relayAcceptedAt) — since a relay keeps messages for days (7 by default) before the
 *   recipient reads them: that time and headers.date must both lie within the inbox's
 *   retention (`retentionMs`, at least a week) less the clock skew. A copy accepted before is
 *   found there after the duplicate window too (InboxStore.accept), so it is never taken twice;
 *   a relay's `at` is only as good as the relay, so the date is held to the same bound, past
 *   which a copy could have been forgotten. A relayed message without a relay's trace entry is
 *   judged by its date as a direct one.
 *
 * Nothing ahead of the clock by more than the skew. Throws 400 `invalid_format`;
 * isMisaddressed() tells a refusal for the recipients.
 */
export function admit(message: Message, a: Admission, topics: ReadonlySet<string> = new Set(), relayed = false): void {
  const h = message.headers;
  const problem = canonicalProblem(message);
  if (problem) throw badRequest(`the message cannot be accepted: ${problem}`);
  if (
    !h.to.some(
      (t) => t.agent === a.agentId || (t.agent.startsWith("topic:") && topics.has(t.agent.slice("topic:".length))),
    )
  ) {
    const err = badRequest(`the message is addressed to ${h.to.map((t) => t.agent).join(", ")}, not to ${a.agentId}`);
    misaddressed.add(err);
    throw err;
  }
  const date = Date.parse(h.date);
  const now = a.now();
  const ahead = `${Math.round(a.maxFutureSkewMs / 60_000)}m ahead`;
  const at = relayed && a.retentionMs !== undefined ? relayAcceptedAt(message) : undefined;
  if (at !== undefined) {
    const horizon = a.retentionMs! - a.maxFutureSkewMs;
    const back = `${Math.round(horizon / 3_600_000)}h back`;
    if (!(at >= now - horizon && at <= now + a.maxFutureSkewMs)) {
      throw badRequest(
        `the relay accepted the message at ${new Date(at).toISOString()}, outside the accepted window for relayed messages (${back}, ${ahead})`,
      );
    }
    if (!(date >= now - horizon && date <= now + a.maxFutureSkewMs)) {
      throw badRequest(
        `headers.date ${h.date} is outside the accepted window for relayed messages (${back}, ${ahead})`,
      );
    }
    return;
  }
  if (!(date >= now - a.replayWindowMs && date <= now + a.maxFutureSkewMs)) {
    throw badRequest(`headers.date ${h.date} is outside the accepted window (${a.replayWindowText} back, ${ahead})`);
  }
}

const misaddressed = new WeakSet<object>();
/** Whether admit() refused the message for its recipients (rather than its date). */
export const isMisaddressed = (err: unknown): boolean =>
  typeof err === "object" && err !== null && misaddressed.has(err);

/** Where accepted messages go; `received` lets a repeat be told from a downgrade. */
export type AcceptStore = Pick<InboxStore, "accept"> & Partial<Pick<InboxStore, "received">>;

/** What acceptVerified needs of the conversation records. */
export type ConversationIntake = Pick<Conversations, "admit" | "mayRefuse" | "linkAnswer">;

export type OnAccepted = (message: Message, meta: InboundMeta, inspection: Inspection) => Promise<void>;

/**
 * Accept one verified message, whether it came to the inbox or from a relay: check it against
 * its conversation's record (no lower authentication level, 401; no sequence number used twice,
 * 409) and record it there, inspect it, store
 * it (deduplicated), and queue what the inspection calls for. Resolves only once all of that is
 * durable; a failure after storing throws 503 so that the message comes again. `raw` is the message
 * as it was sent (its JSON bytes), stored as it is; a decrypted message is stored as its JSON.
 */
export async function acceptVerified(
  deps: {
    agent: Agent;
    store: AcceptStore;
    onAccepted?: OnAccepted;
    conversations?: ConversationIntake;
    encryption?: Pick<AgentEncryption, "decrypt">;
  },
  raw: Uint8Array | string | object,
  message: Message,
  verified: Verified,
): Promise<{ duplicate: boolean }> {
  // The signature was verified over the ciphertext; from here on the message is the clear one,
  // stored decrypted in the agent's own inbox (docs/encryption.md). 400 decryption_failed otherwise.
  const scheme = message.security?.encryption?.scheme;
  if (scheme !== undefined) {
    if (!deps.encryption)
      throw new ProtocolError(
        400,
        "decryption_failed",
        "the message is encrypted, but this agent does not decrypt messages",
      );
    message = deps.encryption.decrypt(message);
    raw = message;
  }
  const h = message.headers;
  const meta = { sender: verified.signer ?? h.from.agent, authLevel: verified.authLevel };
  const conversations = deps.conversations;
  /** Checks and records the message in its conversation; true for a repeat of an accepted message. */
  const admit = async (): Promise<boolean> => {
    try {
      await conversations?.admit(meta.sender, message, verified.authLevel);
      return false;
    } catch (err) {
      // A retry of a message accepted before the conversation's level rose is a repeat, not a downgrade.
      const earlier =
        err instanceof ProtocolError && err.code === "insufficient_auth_level"
          ? await deps.store.received?.(h.message_id, meta.sender).catch(() => undefined)
          : undefined;
      if (earlier && earlier.headers.from.agent === h.from.agent) return true;
      throw err;
    }
  };
  // A message the record could refuse is admitted before it is stored. One it cannot refuse (at
  // the highest level a runtime grants, its sequence number only noted) is recorded while it is
  // stored: one round trip to NATS before the 202 instead of two. Either way the answer waits
  // for both; a record that failed is written by the sender's retry, whose copy is a duplicate.
  const together = !conversations?.mayRefuse(verified.authLevel);
  if (!together && (await admit())) return { duplicate: true };
  const inspection = inspect(message, meta, deps.agent);
  const [result] = await Promise.all([
    deps.store.accept(
      raw,
      h.message_id,
      {
        ...verified,
        handoff: inspection.deliver,
        conversationId: h.conversation_id,
        date: h.date,
        ...(scheme !== undefined ? { encrypted: scheme } : {}),
      },
      h.from.agent,
    ),
    together ? admit() : undefined,
    conversations?.linkAnswer(meta.sender, message),
  ]);
  if (deps.onAccepted && (inspection.error || inspection.capabilities || inspection.announcement)) {
    try {
      await deps.onAccepted(message, meta, inspection);
    } catch (err) {
      throw unavailable(`the message was stored but its answer could not be queued: ${(err as Error).message}`);
    }
  }
  return result;
}

/** Where what a message says of its sender's capabilities goes (PeerCapabilityService). */
export interface PeerCapabilityIntake {
  /** A greeting's capability document, cached for its sender unless a higher level taught more. */
  greeted(sender: string, authLevel: number, document: CapabilityDocument, messageId: string): Promise<unknown>;
  /** A capabilities.update: the sender's new baseline, unless a higher level taught more. */
  updated(sender: string, authLevel: number, document: CapabilityDocument, messageId: string): Promise<unknown>;
}

/**
 * What an inspection calls for, once the message is stored: a capability document from a
 * greeting or an update is remembered for its sender (at the level it was learned at), and an
 * error-phase answer is signed and queued in the outbox. All are idempotent (the reply's id
 * derives from the message it answers).
 */
export function inspectionEffects(deps: {
  self: { agentId: string; displayName?: string };
  signing: SigningKey;
  outbox: Pick<OutboxStore, "enqueue">;
  peers: PeerCapabilityIntake;
}): OnAccepted {
  return async (message, meta, inspection) => {
    if (inspection.capabilities)
      await deps.peers.greeted(meta.sender, meta.authLevel, inspection.capabilities, message.headers.message_id);
    if (inspection.announcement)
      await deps.peers.updated(meta.sender, meta.authLevel, inspection.announcement, message.headers.message_id);
    if (inspection.error) {
      // The answer continues the trace of the message it answers (the active inbox or intake span).
      await deps.outbox.enqueue(
        signMessage(withMessageContext(errorReply(message, deps.self, inspection.error)), deps.signing),
      );
    }
  };
}
