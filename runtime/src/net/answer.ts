// Pure: the one rule for what an HTTP answer to a delivery means (delivered, later, retry,
// final), for inbox POSTs, relay publishes and pushes, hand-offs and A2A requests alike.
import { retryAfterSeconds } from "./http-client.ts";

/**
 * What the HTTP answer to a delivery means — an inbox POST, a relay publish, a relay's
 * webhook push, a hand-off to the handler. One rule for all of them (spec 7.2 rule 3, read as
 * docs/agent.md "Answer classification" says):
 *
 * - 2xx: delivered.
 * - 408, 425, 429: `later` — not a refusal; the receiver says when to come back (Retry-After).
 * - 5xx: `retry` — the receiver failed; retry on the schedule, never sooner than a Retry-After.
 * - 3xx: `final` — redirects are not followed, and a retry would get the same redirect.
 * - any other status (4xx, 1xx, nonsense): `final`.
 *
 * A network error is not an answer; callers retry it like a 5xx.
 */
export type AnswerClass =
  | { kind: "delivered" }
  | { kind: "later"; retryAfterMs?: number }
  | { kind: "retry"; retryAfterMs?: number }
  | { kind: "final"; redirect: boolean };

const LATER = new Set([408, 425, 429]);

export function classifyAnswer(status: number, retryAfter: string | null | undefined, now = Date.now()): AnswerClass {
  if (status >= 200 && status < 300) return { kind: "delivered" };
  if (LATER.has(status) || (status >= 500 && status < 600)) {
    const s = retryAfterSeconds(retryAfter, now);
    return { kind: LATER.has(status) ? "later" : "retry", ...(s !== undefined ? { retryAfterMs: s * 1000 } : {}) };
  }
  return { kind: "final", redirect: status >= 300 && status < 400 };
}
