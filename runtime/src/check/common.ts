// Helpers the check groups of `ifp check` share: reading JSON and media types of answers, the
// error body of spec 2.7, and the kit's own unsigned test message.
import { randomUUID } from "node:crypto";
import type { Message } from "../protocol/message.ts";
import { isoSeconds } from "../util/time.ts";
import type { Answer } from "./probe.ts";

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The media type of a Content-Type header, lower case, without parameters. */
export function mediaType(answer: Answer): string {
  return (answer.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
}

/**
 * Whether an answer carries the error body of spec 2.7 (`{status: "error", code, message}`),
 * and, when `code` is given, that code. Returns undefined when it does, else what is wrong.
 */
export function errorBodyProblem(answer: Answer, code?: string | readonly string[]): string | undefined {
  const body = parseJson(answer.text) as { status?: unknown; code?: unknown; message?: unknown } | undefined;
  if (!body || typeof body !== "object") return `the ${answer.status} has no JSON error body (spec 2.7)`;
  if (body.status !== "error" || typeof body.code !== "string" || typeof body.message !== "string") {
    return `the ${answer.status}'s body is not {status: "error", code, message} (spec 2.7): ${clip(answer.text)}`;
  }
  const codes = code === undefined ? undefined : typeof code === "string" ? [code] : code;
  if (codes && !codes.includes(body.code))
    return `the ${answer.status}'s error code is ${JSON.stringify(body.code)}, expected ${codes.join(" or ")}`;
  return undefined;
}

/** The error code of an answer, for reasons. */
export function codeOf(answer: Answer): string {
  const body = parseJson(answer.text) as { code?: unknown } | undefined;
  return typeof body?.code === "string" ? ` ${body.code}` : "";
}

export function clip(text: string, n = 120): string {
  const one = text.replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n)}…` : one || "(empty)";
}

/** An unsigned IFP-4 message from `from` to `to`, marked as coming from the conformance kit. */
export function checkMessage(
  from: string,
  to: string,
  overrides: Partial<Message["headers"]> = {},
  text = "ifp check: conformance probe",
): Message {
  return {
    ifp: 4,
    headers: {
      message_id: `msg:ifp-check-${randomUUID()}`,
      date: isoSeconds(new Date()),
      from: { agent: from },
      to: [{ agent: to }],
      conversation_id: `conv:ifp-check-${randomUUID()}`,
      sequence: 1,
      phase: "context",
      content_type: "text/plain; charset=utf-8",
      ...overrides,
    },
    body: { text },
  };
}

export const JSON_HEADERS = { "content-type": "application/json; charset=utf-8", accept: "application/json" } as const;
