// The signature on each hand-off to spec.handler.url (docs/agent.md#hand-off-signature): the
// runtime signs with the Agent's hand-off secret, the application checks before it trusts what
// the hand-off says, so that nothing else that reaches it can hand it "verified" messages.
// After Stripe's webhook scheme (a timestamp, HMAC-SHA256), but over the headers the application
// acts on as well as the body: scheme v2. The v1 scheme covered the timestamp and body only, so
// Ifp-Sender or Ifp-Auth-Level could be changed in transit without breaking it; it is refused.
import { createHmac, timingSafeEqual } from "node:crypto";

/** The header the runtime sets on every hand-off: `t=<unix seconds>,v2=<hex HMAC-SHA256>`. */
export const HANDOFF_SIGNATURE_HEADER = "ifp-handoff-signature";
/** How far a signature's time may be from the checker's clock, in seconds (either way). */
export const HANDOFF_TOLERANCE_S = 300;
/** The first line of the v2 signing base: keeps a v2 signature apart from any other HMAC under the secret. */
export const HANDOFF_SCHEME_V2 = "ifp-handoff-v2";

/**
 * The hand-off headers a v2 signature covers, in the order of the signing base. A header the
 * hand-off does not carry (Ifp-Encrypted on a clear message) is signed as empty, so adding it
 * breaks the signature as changing it does.
 */
export const HANDOFF_SIGNED_HEADERS = [
  "idempotency-key",
  "ifp-message-id",
  "ifp-sender",
  "ifp-auth-level",
  "ifp-auth-source",
  "ifp-encrypted",
  "ifp-delivery-attempt",
] as const;

export type HandoffSignedHeader = (typeof HANDOFF_SIGNED_HEADERS)[number];

/** The values the runtime sends in the signed headers (absent: not sent). */
export type HandoffHeaders = Partial<Record<HandoffSignedHeader, string>>;

/**
 * A request's headers as an application has them: Node's `req.headers` (lower-case names; a
 * header sent twice arrives joined with ", " or as an array), any object of names to values,
 * or a Fetch API `Headers`.
 */
export type RequestHeaders =
  | { get(name: string): string | null }
  | Readonly<Record<string, string | readonly string[] | undefined>>;

/**
 * The v2 signing base, without the body that follows it:
 *
 *     ifp-handoff-v2 LF <t> LF
 *     idempotency-key:<value> LF ... ifp-delivery-attempt:<value> LF   (HANDOFF_SIGNED_HEADERS, in order)
 *     LF
 *     <the body's bytes as sent>
 *
 * A header's value may not hold CR or LF (HTTP forbids it), so the base is read back one way only.
 */
export function handoffSigningBase(t: number, headers: HandoffHeaders): string {
  let base = `${HANDOFF_SCHEME_V2}\n${t}\n`;
  for (const name of HANDOFF_SIGNED_HEADERS) {
    const value = headers[name] ?? "";
    if (/[\r\n]/.test(value)) throw new Error(`the hand-off header ${name} holds a line break`);
    base += `${name}:${value}\n`;
  }
  return `${base}\n`;
}

const mac = (secret: string, t: number, headers: HandoffHeaders, body: string | Uint8Array) =>
  createHmac("sha256", secret).update(handoffSigningBase(t, headers)).update(body).digest();

/** The header value for a hand-off of `body` with `headers`, signed with `secret` (the Secret's `handoff.key`, as text) at `now`. */
export function signHandoff(
  secret: string,
  headers: HandoffHeaders,
  body: string | Uint8Array,
  now = Date.now(),
): string {
  const t = Math.floor(now / 1000);
  return `t=${t},v2=${mac(secret, t, headers, body).toString("hex")}`;
}

/**
 * The signed headers of a request, or why they cannot be read: a header sent more than once is
 * refused, since an application could act on either copy.
 */
function readHeaders(
  source: RequestHeaders,
): { signature: string | undefined; signed: HandoffHeaders } | { problem: string } {
  const wanted = [HANDOFF_SIGNATURE_HEADER, ...HANDOFF_SIGNED_HEADERS];
  const out: Record<string, string> = {};
  if (typeof (source as { get?: unknown }).get === "function") {
    const h = source as { get(name: string): string | null };
    for (const name of wanted) {
      const v = h.get(name);
      if (typeof v === "string") out[name] = v;
    }
  } else {
    const seen = new Set<string>();
    for (const [key, value] of Object.entries(source as Record<string, unknown>)) {
      const name = key.toLowerCase();
      if (!(wanted as readonly string[]).includes(name) || value === undefined) continue;
      if (seen.has(name) || Array.isArray(value)) return { problem: `the header ${name} appears more than once` };
      if (typeof value !== "string") return { problem: `the header ${name} is not text` };
      seen.add(name);
      out[name] = value;
    }
  }
  const { [HANDOFF_SIGNATURE_HEADER]: signature, ...signed } = out;
  return { signature, signed };
}

/**
 * Whether a hand-off request is signed by the runtime that holds `secret`: the v2 signature in
 * its Ifp-Handoff-Signature header covers its body and its HANDOFF_SIGNED_HEADERS as received,
 * and was made within the tolerance of `now`. `headers` are all of the request's headers (not
 * the signature header alone). Undefined when it is, else why not (for the application's 401
 * answer and its log). Only after undefined may the application believe Ifp-Sender,
 * Ifp-Auth-Level, Ifp-Auth-Source, Ifp-Encrypted and the message id.
 */
export function handoffSignatureProblem(
  secret: string,
  headers: RequestHeaders,
  body: string | Uint8Array,
  now = Date.now(),
): string | undefined {
  if (typeof headers !== "object" || headers === null) {
    return `pass all of the request's headers: the signature covers ${HANDOFF_SIGNED_HEADERS.join(", ")} as well as the body`;
  }
  const read = readHeaders(headers);
  if ("problem" in read) return read.problem;
  const header = read.signature;
  if (!header) return `no ${HANDOFF_SIGNATURE_HEADER} header`;
  const parts = new Map<string, string>();
  for (const p of header.split(",")) {
    const i = p.indexOf("=");
    const [k, v] = i < 0 ? [p.trim(), ""] : [p.slice(0, i).trim(), p.slice(i + 1).trim()];
    if (parts.has(k)) return `${HANDOFF_SIGNATURE_HEADER} names ${k} more than once`;
    parts.set(k, v);
  }
  const t = parts.get("t") ?? "";
  const v2 = parts.get("v2");
  if (v2 === undefined && parts.has("v1")) {
    return `${HANDOFF_SIGNATURE_HEADER} is of scheme v1, which does not cover the headers; only v2 is accepted`;
  }
  if (!/^\d{1,12}$/.test(t) || !/^[0-9a-f]{64}$/.test(v2 ?? ""))
    return `${HANDOFF_SIGNATURE_HEADER} is not t=<seconds>,v2=<64 hex digits>`;
  if (Math.abs(now / 1000 - Number(t)) > HANDOFF_TOLERANCE_S) {
    return `the hand-off was signed at ${new Date(Number(t) * 1000).toISOString()}, more than ${HANDOFF_TOLERANCE_S} s from now`;
  }
  let expected: Buffer;
  try {
    expected = mac(secret, Number(t), read.signed, body);
  } catch (err) {
    return (err as Error).message;
  }
  return timingSafeEqual(expected, Buffer.from(v2!, "hex"))
    ? undefined
    : `the hand-off signature does not match (another secret, or a changed body or ${HANDOFF_SIGNED_HEADERS.join(", ")})`;
}
