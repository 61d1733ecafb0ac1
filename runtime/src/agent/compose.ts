// The unsigned outbound message built from what an application (or `ifp send`, `ifp relay publish`)
// asked for, replies and A2A follow-ups included, and the capability part a greeting carries.
import { ulid } from "ulid";
import type { CapabilityDocument } from "../protocol/documents.ts";
import { isoSeconds } from "../util/time.ts";
import { badRequest } from "../protocol/errors.ts";
import { A2A_RECIPIENT_PREFIX, OutboxRequest } from "../protocol/local-api.ts";
import { Message, MessageHeaders } from "../protocol/message.ts";
import { describeIssues } from "../contract/issues.ts";
import { newMessageId } from "./replies.ts";

export { OutboxRequest };

export interface ComposeContext {
  agentId: string;
  displayName?: string;
  /** The received message named by in_reply_to, when there is one. */
  original?: Message;
  /** The capability document, added to greetings as a body part (message-phase discovery). */
  capabilities?: CapabilityDocument;
  now?: Date;
}

/** Build the unsigned outbound message an application asked for; throws 400 on bad input. */
export function composeMessage(input: unknown, ctx: ComposeContext): Message {
  const now = ctx.now ?? new Date();
  const from = { agent: ctx.agentId, ...(ctx.displayName ? { display: ctx.displayName } : {}) };
  let message: Message;
  if (input && typeof input === "object" && "headers" in input) {
    // A whole message: fill what is missing, never override what the application set.
    const given = input as { headers?: Record<string, unknown> } & Record<string, unknown>;
    const headers = {
      message_id: newMessageId(),
      date: isoSeconds(now),
      conversation_id: `conv:${ulid()}`,
      sequence: 1,
      content_type: "text/markdown; charset=utf-8",
      ...given.headers,
      from,
    };
    const parsed = Message.safeParse({ ifp: 4, body: {}, ...given, headers });
    if (!parsed.success) throw badRequest(`the message is not valid IFP-4: ${describeIssues(parsed.error)}`);
    message = parsed.data;
  } else {
    const parsed = OutboxRequest.safeParse(input);
    if (!parsed.success) throw badRequest(`invalid outbox request: ${describeIssues(parsed.error)}`);
    const r = parsed.data;
    const original = ctx.original;
    if (r.in_reply_to && !original) throw badRequest(`no received message has message_id ${r.in_reply_to}`);
    const to = r.to ?? original?.headers.from.agent;
    if (!to) throw badRequest("`to` is required unless the message answers one (in_reply_to)");
    const recipients = (
      typeof to === "string" ? [to] : "a2a" in to ? [{ agent: `${A2A_RECIPIENT_PREFIX}${to.a2a}` }] : to
    ).map((t) => (typeof t === "string" ? { agent: t } : t));
    const headers: Record<string, unknown> = {
      message_id: newMessageId(),
      date: isoSeconds(now),
      from,
      to: recipients,
      conversation_id: original?.headers.conversation_id ?? r.conversation_id ?? `conv:${ulid()}`,
      sequence: r.sequence ?? (original ? original.headers.sequence + 1 : 1),
      phase: r.phase,
      content_type: r.content_type ?? "text/markdown; charset=utf-8",
    };
    if (original) {
      headers.thread = {
        in_reply_to: original.headers.message_id,
        references: [...(original.headers.thread?.references ?? []), original.headers.message_id],
      };
    }
    for (const k of ["subject", "ttl_seconds", "priority", "disclosure", "capabilities", "extensions"] as const) {
      if (r[k] !== undefined) headers[k] = r[k];
    }
    const followUp = original && a2aFollowUp(original);
    if (followUp) {
      const extensions = (headers.extensions ?? {}) as Record<string, unknown>;
      headers.extensions = { ...extensions, a2a: { ...followUp, ...(extensions.a2a as object | undefined) } };
    }
    const body = { ...(r.body ?? {}), ...(r.text !== undefined ? { text: r.text } : {}) };
    message = { ifp: 4, headers: MessageHeaders.parse(headers), body };
  }
  for (const t of message.headers.to)
    if (t.agent.startsWith(A2A_RECIPIENT_PREFIX) && !isHttpsUrl(t.agent.slice(A2A_RECIPIENT_PREFIX.length)))
      throw badRequest(`${t.agent}: an A2A recipient is ${A2A_RECIPIENT_PREFIX} and the https URL of its agent card`);
  return withCapabilitiesPart(message, ctx.capabilities);
}

function isHttpsUrl(s: string): boolean {
  return URL.canParse(s) && new URL(s).protocol === "https:";
}

/**
 * A reply to an A2A agent's answer (a hand-off with headers.extensions.a2a.origin "a2a-peer")
 * continues its context, and its task while the task waits for input: the ids it goes with.
 */
function a2aFollowUp(original: Message): { context_id: string; task_id?: string } | undefined {
  const a2a = original.headers.extensions?.a2a as
    | { origin?: unknown; context_id?: unknown; task_id?: unknown; state?: unknown }
    | undefined;
  if (a2a?.origin !== "a2a-peer" || typeof a2a.context_id !== "string" || !a2a.context_id) return undefined;
  const waiting = a2a.state === "TASK_STATE_INPUT_REQUIRED" || a2a.state === "TASK_STATE_AUTH_REQUIRED";
  return {
    context_id: a2a.context_id,
    ...(waiting && typeof a2a.task_id === "string" && a2a.task_id ? { task_id: a2a.task_id } : {}),
  };
}

/** A greeting carries the capability document as a body part named "capabilities" (spec 2.5). */
export function withCapabilitiesPart(message: Message, doc: CapabilityDocument | undefined): Message {
  if (!doc || message.headers.phase !== "greeting") return message;
  const parts = message.body.parts ?? [];
  if (parts.some((p) => p.name === "capabilities")) return message;
  return {
    ...message,
    body: {
      ...message.body,
      parts: [...parts, { content_type: "application/json", name: "capabilities", content: doc }],
    },
  };
}
