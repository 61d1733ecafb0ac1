// ProtocolError: an error with one HTTP status and the error body of spec 2.7, its IFP-6 codes
// (and the few the runtime adds), and a constructor for each common refusal.
/** Error codes of IFP-6 section 3.2, plus the few this implementation needs beyond them. */
export type ErrorCode =
  | "invalid_format"
  | "invalid_signature"
  | "unknown_sender"
  | "insufficient_auth_level"
  | "unauthorized"
  | "rate_limited"
  | "payload_too_large"
  | "internal_error"
  | "not_found"
  | "method_not_allowed"
  | "unsupported_media_type"
  | "unavailable"
  | "relay_full"
  /** The agent's inbox stream holds spec.inbox.maxBytes: new messages wait (503, Retry-After). */
  | "inbox_full"
  /** The local API's outbox: the recipient's capability document rules the message out. */
  | "capability_not_offered"
  | "unsupported_version"
  /** A sequence number the sender already used for another message of the conversation (IFP-5 4.2). */
  | "sequence_conflict"
  /** An encrypted message this agent cannot decrypt (docs/encryption.md). */
  | "decryption_failed"
  /** A plaintext message through a relay this agent requires encryption through. */
  | "encryption_required"
  /** The local API's outbox: a recipient has no encryption key, and the message must be encrypted. */
  | "encryption_key_unavailable"
  /** The local API's dead letters: not a dead letter (any more), or its message is no longer kept. */
  | "not_redrivable"
  /** A feature the agent's NATS layout cannot serve yet (501; docs/scale.md). */
  | "not_on_nats_layout";

/** The error body of spec section 2.7. */
export interface ErrorBody {
  status: "error";
  code: ErrorCode;
  message: string;
}

/** An error that maps to one HTTP status and one error body. */
export class ProtocolError extends Error {
  readonly statusCode: number;
  readonly code: ErrorCode;
  readonly headers: Record<string, string>;

  constructor(statusCode: number, code: ErrorCode, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.name = "ProtocolError";
    this.statusCode = statusCode;
    this.code = code;
    this.headers = headers;
  }

  body(): ErrorBody {
    return { status: "error", code: this.code, message: this.message };
  }
}

export const badRequest = (message: string) => new ProtocolError(400, "invalid_format", message);
export const invalidSignature = (message: string) => new ProtocolError(401, "invalid_signature", message);
export const unknownSender = (message: string) => new ProtocolError(401, "unknown_sender", message);
/** 401 for an authentic message below the level required (spec 7.1: "authentication level insufficient"). */
export const insufficientAuthLevel = (message: string) => new ProtocolError(401, "insufficient_auth_level", message);
export const notFound = (message: string) => new ProtocolError(404, "not_found", message);

export function rateLimited(retryAfterSeconds: number, message: string): ProtocolError {
  return new ProtocolError(429, "rate_limited", message, { "retry-after": String(retryAfterSeconds) });
}

export function unavailable(message: string, retryAfterSeconds = 5): ProtocolError {
  return new ProtocolError(503, "unavailable", message, { "retry-after": String(retryAfterSeconds) });
}
