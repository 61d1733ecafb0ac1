// The IFP-4 message as zod schemas (loose: unknown fields kept), its phases and format version,
// the protocol problems an agent answers with an error-phase message, and an inbox POST's request.
import { z } from "zod";

/**
 * IFP-4 structured message. Objects are loose: unknown fields are kept, so a message is
 * stored, relayed and handed on exactly as its sender wrote it.
 */
export const AgentRef = z.looseObject({
  agent: z.string().min(1).max(512),
  display: z.string().optional(),
});

export const Thread = z.looseObject({
  in_reply_to: z.string().optional(),
  references: z.array(z.string()).optional(),
});

export const MessageHeaders = z.looseObject({
  message_id: z.string().min(1).max(256),
  date: z.iso.datetime({ offset: true }),
  from: AgentRef,
  to: z.array(AgentRef).min(1).max(100),
  conversation_id: z.string().min(1).max(256),
  sequence: z.number().int().min(0),
  phase: z.string().min(1).max(64),
  content_type: z.string().min(1).optional(),
  subject: z.string().optional(),
  thread: Thread.optional(),
  disclosure: z.string().optional(),
  persona: z.string().optional(),
  priority: z.string().optional(),
  ttl_seconds: z.number().int().positive().optional(),
  capabilities: z
    .looseObject({ request: z.array(z.string()).optional(), offer: z.array(z.string()).optional() })
    .optional(),
  extensions: z.record(z.string(), z.unknown()).optional(),
});

export const BodyPart = z.looseObject({
  content_type: z.string().min(1),
  name: z.string().optional(),
  content: z.unknown(),
});

export const MessageBody = z.looseObject({
  text: z.string().optional(),
  parts: z.array(BodyPart).optional(),
});

export const TraceEntry = z.looseObject({
  by: z.string(),
  with: z.string(),
  at: z.string(),
  from: z.string(),
});

export const Signature = z.looseObject({
  alg: z.string().min(1),
  key_id: z.string().min(3),
  created: z.string().optional(),
  signed_headers: z.array(z.string()).max(64),
  signed_body: z.boolean(),
  sig: z.string().min(1),
});

/**
 * The shape of an IFP-4 message, without the rule of an encrypted body (encryptedBodyIssues),
 * which JSON Schema cannot say: what a validator compiled from its JSON Schema checks.
 */
export const MessageShape = z.looseObject({
  ifp: z.number().int(),
  headers: MessageHeaders,
  body: MessageBody,
  trace: z.looseObject({ received: z.array(TraceEntry).optional() }).optional(),
  security: z
    .looseObject({
      signatures: z.array(Signature).max(16).optional(),
      encryption: z.looseObject({ scheme: z.string().min(1).max(128) }).optional(),
    })
    .optional(),
});

/**
 * What a message of MessageShape breaks of the rule of an encrypted body: `body` is the clear
 * form, or, only together with `security.encryption`, exactly `{ciphertext: string}`.
 */
export function encryptedBodyIssues(m: z.output<typeof MessageShape>): { path: string[]; message: string }[] {
  const issues: { path: string[]; message: string }[] = [];
  const encrypted = m.security?.encryption !== undefined;
  if ("ciphertext" in m.body && !encrypted) {
    issues.push({
      path: ["body", "ciphertext"],
      message: "a ciphertext body needs security.encryption naming the scheme and recipients",
    });
  }
  if (encrypted) {
    const keys = Object.keys(m.body);
    if (keys.length !== 1 || keys[0] !== "ciphertext" || typeof m.body.ciphertext !== "string") {
      issues.push({ path: ["body"], message: "an encrypted message's body is exactly {ciphertext: <string>}" });
    }
  }
  return issues;
}

/**
 * An IFP-4 message. `body` is either the clear form (text, parts) or, only together with
 * `security.encryption`, the ciphertext form `{ciphertext: string}` (docs/encryption.md).
 */
export const Message = MessageShape.superRefine((m, ctx) => {
  for (const issue of encryptedBodyIssues(m)) ctx.addIssue({ code: "custom", ...issue });
});

export type Message = z.infer<typeof Message>;
export type MessageHeaders = z.infer<typeof MessageHeaders>;
export type Signature = z.infer<typeof Signature>;
export type TraceEntry = z.infer<typeof TraceEntry>;

/** Conversation phases of IFP-3 section 2. */
export const PHASES = ["greeting", "context", "probe", "recommend", "close", "error"] as const;
/** The message format version this runtime speaks. */
export const MESSAGE_FORMAT = 4;

/**
 * Protocol-level problems (rule 7.2.1): a message that is well-formed and authentic but that
 * this agent cannot take part in. Accepted with 202 and answered with an error-phase message.
 */
export function protocolProblem(message: Message): string | undefined {
  if (message.ifp !== MESSAGE_FORMAT) {
    return `message format ifp ${message.ifp} is not supported; this agent speaks IFP-4 structured messages (ifp: 4)`;
  }
  if (!(PHASES as readonly string[]).includes(message.headers.phase)) {
    return `unknown phase ${JSON.stringify(message.headers.phase)}; known phases are ${PHASES.join(", ")}`;
  }
  return undefined;
}

/**
 * The request of one message to a peer's inbox (§2.3): the message as JSON, its id as the
 * Idempotency-Key so that a retry is taken as the same message.
 */
export function inboxPost(message: { headers: { message_id: string } }): {
  method: "POST";
  headers: Record<string, string>;
  body: string;
} {
  return {
    method: "POST",
    headers: {
      "content-type": "application/json; charset=utf-8",
      accept: "application/json",
      "idempotency-key": message.headers.message_id,
    },
    body: JSON.stringify(message),
  };
}
