// The fields every log line about a message carries (message_id, conversation_id, sender, and
// the trace_id when tracing is on), and the helpers that name the message in a request's log lines.
import { trace } from "@opentelemetry/api";
import { tracingEnabled } from "./tracing.ts";

/**
 * The fields every log line about a message carries (docs/tracing.md): its message_id,
 * conversation_id and sender, and — with tracing on — the trace_id of the active span, so that a
 * line leads to its trace. Never the body, never a key or a signature.
 */
export interface MessageLogFields {
  message_id: string;
  conversation_id?: string;
  sender?: string;
  trace_id?: string;
}

export function messageLog(
  message: { headers: { message_id: string; conversation_id?: string; from?: { agent: string } } },
  sender?: string,
): MessageLogFields {
  const h = message.headers;
  return withTrace({ message_id: h.message_id, conversation_id: h.conversation_id, sender: sender ?? h.from?.agent });
}

/** Whether debug lines are written: a line's child logger is made only then, on the hot paths. */
export function debugEnabled(log: { level: string }): boolean {
  return log.level === "debug" || log.level === "trace";
}

/**
 * Runs a request's work on one message. When it fails, the request's logger is first made to
 * name the message, so that the error handler's line about the failure does; a child logger is
 * made only then, not for every message (reqId stays fastify's).
 */
export async function namedOnFailure<T, L extends { child(fields: MessageLogFields): L }>(
  req: { log: L },
  fields: () => MessageLogFields,
  work: () => Promise<T>,
): Promise<T> {
  try {
    return await work();
  } catch (err) {
    req.log = req.log.child(fields());
    throw err;
  }
}

/** The same fields from what is known without the message (a stored copy's headers). */
export function messageLogOf(
  messageId: string,
  conversationId: string | undefined,
  sender: string | undefined,
): MessageLogFields {
  return withTrace({
    message_id: messageId,
    ...(conversationId ? { conversation_id: conversationId } : {}),
    ...(sender ? { sender } : {}),
  });
}

function withTrace(fields: MessageLogFields): MessageLogFields {
  if (!tracingEnabled()) return fields;
  const traceId = trace.getActiveSpan()?.spanContext().traceId;
  return traceId ? { ...fields, trace_id: traceId } : fields;
}
