// The signature on each hand-off to spec.handler.url (docs/agent.md#hand-off-signature): the
// runtime signs with the Agent's hand-off secret, the application checks before it trusts the
// Ifp-Sender and Ifp-Auth-Level headers, so that nothing else that reaches it can hand it
// "verified" messages. Stripe's webhook scheme: a timestamp, and HMAC-SHA256 over it and the body.
import { createHmac, timingSafeEqual } from "node:crypto";

/** The header the runtime sets on every hand-off: `t=<unix seconds>,v1=<hex HMAC-SHA256>`. */
export const HANDOFF_SIGNATURE_HEADER = "ifp-handoff-signature";
/** How far a signature's time may be from the checker's clock, in seconds (either way). */
export const HANDOFF_TOLERANCE_S = 300;

const mac = (secret: string, t: number, body: string | Uint8Array) => createHmac("sha256", secret).update(`${t}.`).update(body).digest();

/** The header value for `body`, signed with `secret` (the Secret's `handoff.key`, as text) at `now`. */
export function signHandoff(secret: string, body: string | Uint8Array, now = Date.now()): string {
  const t = Math.floor(now / 1000);
  return `t=${t},v1=${mac(secret, t, body).toString("hex")}`;
}

/**
 * Whether `header` is a signature of `body` under `secret`, made within the tolerance of `now`:
 * undefined when it is, else why not (for the application's 401 answer and its log).
 */
export function handoffSignatureProblem(secret: string, header: string | string[] | undefined, body: string | Uint8Array, now = Date.now()): string | undefined {
  if (typeof header !== "string" || !header) return `no ${HANDOFF_SIGNATURE_HEADER} header`;
  const parts = Object.fromEntries(header.split(",").map((p) => p.trim().split("=", 2) as [string, string]));
  const t = Number(parts.t);
  if (!/^\d{1,12}$/.test(parts.t ?? "") || !/^[0-9a-f]{64}$/.test(parts.v1 ?? "")) return `${HANDOFF_SIGNATURE_HEADER} is not t=<seconds>,v1=<64 hex digits>`;
  if (Math.abs(now / 1000 - t) > HANDOFF_TOLERANCE_S) return `the hand-off was signed at ${new Date(t * 1000).toISOString()}, more than ${HANDOFF_TOLERANCE_S} s from now`;
  const expected = mac(secret, t, body);
  return timingSafeEqual(expected, Buffer.from(parts.v1!, "hex")) ? undefined : "the hand-off signature does not match (another secret, or a changed body)";
}
