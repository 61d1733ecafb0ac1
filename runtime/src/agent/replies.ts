// Message ids: new ones (ULIDs), reply ids derived from what they answer, and the unsigned
// error-phase reply (IFP-3 2.6) to a message.
import { createHash } from "node:crypto";
import { ulid } from "ulid";
import { isoSeconds } from "../util/time.ts";
import type { Message } from "../protocol/message.ts";

/** A new message_id: "msg:" and a ULID, unique and sortable by time. */
export function newMessageId(): string {
  return `msg:${ulid()}`;
}

/** A reply id derived from what it answers, so answering the same message twice is one message. */
export function replyId(original: Message, code: string): string {
  const digest = createHash("sha256")
    .update(`${original.headers.from.agent}\n${original.headers.message_id}\n${code}`)
    .digest("hex");
  return `msg:reply-${digest.slice(0, 32)}`;
}

/**
 * An unsigned error-phase reply (IFP-3 2.6) to `original`, threaded to it: it says what was
 * expected, what arrived, and how to proceed, as text and as a JSON part named "error".
 */
export function errorReply(
  original: Message,
  self: { agentId: string; displayName?: string },
  error: { code: string; text: string; details?: Record<string, unknown> },
  now = new Date(),
): Message {
  const h = original.headers;
  return {
    ifp: 4,
    headers: {
      message_id: replyId(original, error.code),
      date: isoSeconds(now),
      from: { agent: self.agentId, ...(self.displayName ? { display: self.displayName } : {}) },
      to: [{ agent: h.from.agent }],
      conversation_id: h.conversation_id,
      sequence: h.sequence + 1,
      phase: "error",
      content_type: "text/markdown; charset=utf-8",
      thread: { in_reply_to: h.message_id, references: [...(h.thread?.references ?? []), h.message_id] },
    },
    body: {
      text: error.text,
      parts: [
        {
          content_type: "application/json",
          name: "error",
          content: { code: error.code, in_reply_to: h.message_id, ...(error.details ?? {}) },
        },
      ],
    },
  };
}
