// The message signing profile (IFP-5): the signing input (JCS of the signed headers and body),
// Ed25519 signatures and hmac-sha256 introduction signatures made and verified, and the
// canonical-JSON checks before them.
import { createHmac, sign as edSign, timingSafeEqual, verify as edVerify, type KeyObject } from "node:crypto";
import canonicalize from "canonicalize";
import { badRequest } from "./errors.ts";
import { isoSeconds } from "../util/time.ts";
import type { Message, Signature } from "./message.ts";

/**
 * The signing profile of this project (IFP-5 leaves the signing input open):
 *
 *   input = UTF-8 of JCS(RFC 8785) of
 *           {"headers": {h: headers[h] ?? null for h in signed_headers},
 *            "body": signed_body ? body : null}
 *   sig   = base64url (no padding) of the Ed25519 signature of input
 *
 * Test vectors: runtime/vectors/signing.json.
 */
export const DEFAULT_SIGNED_HEADERS = [
  "message_id",
  "date",
  "from",
  "to",
  "conversation_id",
  "sequence",
  "phase",
  "content_type",
] as const;

/**
 * The headers every signature accepted at an inbox must cover, present or not (an absent one is
 * signed as null). Beyond these, every header the message carries must be signed too
 * (`unsignedHeaders`): disclosure, capabilities, thread, ttl_seconds and the rest are inputs to
 * capability conditions, threading and expiry that nobody on the way may change.
 */
export const REQUIRED_SIGNED_HEADERS = ["message_id", "date", "from", "to"] as const;

/** What a signature made here covers: every header present, and the required ones. */
export function headersToSign(headers: object): string[] {
  const present = Object.keys(headers);
  const known = DEFAULT_SIGNED_HEADERS as readonly string[];
  return [
    ...known.filter((h) => present.includes(h) || REQUIRED_SIGNED_HEADERS.includes(h as never)),
    ...present.filter((h) => !known.includes(h)).sort(),
  ];
}

/** The headers a message carries that a signature does not cover. */
export function unsignedHeaders(headers: object, signedHeaders: readonly string[]): string[] {
  return Object.keys(headers).filter((h) => !signedHeaders.includes(h));
}

type Signable = Pick<Message, "headers" | "body">;

/** JSON nested deeper than this is refused before anything stores, signs or verifies it. */
export const MAX_JSON_DEPTH = 100;

/**
 * Documents parsed from a request and found canonicalizable once (markCanonical), so that the
 * later checks of the same request (admission, signing input) do not walk them again.
 */
const canonicalChecked = new WeakSet<object>();

/** Remember that `value`, as parsed from a request and never changed after, passed canonicalProblem(). */
export function markCanonical(value: unknown): void {
  if (typeof value === "object" && value !== null) canonicalChecked.add(value);
}

/**
 * Whether a parsed JSON document nests objects or arrays deeper than `max` levels. Recursive to
 * at most `max` levels, so hostile depth cannot exhaust the stack; allocates nothing.
 */
export function nestedDeeperThan(value: unknown, max = MAX_JSON_DEPTH): boolean {
  if (value === null || typeof value !== "object") return false;
  if (max <= 0) return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (nestedDeeperThan(value[i], max - 1)) return true;
    return false;
  }
  for (const k in value) {
    if (Object.hasOwn(value, k) && nestedDeeperThan((value as Record<string, unknown>)[k], max - 1)) return true;
  }
  return false;
}

const LONE_SURROGATE_STRING =
  "a string holds a lone surrogate (not valid Unicode), so the message has no canonical form";
const LONE_SURROGATE_KEY = "a key holds a lone surrogate (not valid Unicode), so the message has no canonical form";
const TOO_DEEP = `the document is nested deeper than ${MAX_JSON_DEPTH} levels`;

/**
 * Why a parsed JSON document cannot be signed or verified (RFC 8785 canonical form), or
 * undefined: nesting deeper than MAX_JSON_DEPTH, or a string with a lone surrogate. Recursive to
 * at most MAX_JSON_DEPTH levels, so hostile depth cannot exhaust the stack. An object's keys are
 * checked before its members, and its members last first: of several problems, the one named
 * is always the same.
 */
export function canonicalProblem(value: unknown): string | undefined {
  if (typeof value === "object" && value !== null && canonicalChecked.has(value)) return undefined;
  return problemAt(value, 0);
}

function problemAt(v: unknown, depth: number): string | undefined {
  if (typeof v === "string") return v.isWellFormed() ? undefined : LONE_SURROGATE_STRING;
  if (v === null || typeof v !== "object") return undefined;
  if (depth >= MAX_JSON_DEPTH) return TOO_DEEP;
  if (Array.isArray(v)) {
    for (let i = v.length - 1; i >= 0; i--) {
      const problem = problemAt(v[i], depth + 1);
      if (problem) return problem;
    }
    return undefined;
  }
  const keys = Object.keys(v);
  for (const k of keys) if (!k.isWellFormed()) return LONE_SURROGATE_KEY;
  for (let i = keys.length - 1; i >= 0; i--) {
    const problem = problemAt((v as Record<string, unknown>)[keys[i]!], depth + 1);
    if (problem) return problem;
  }
  return undefined;
}

export function signingInput(message: Signable, signedHeaders: readonly string[], signedBody: boolean): Buffer {
  const headers: Record<string, unknown> = {};
  const source = message.headers as Record<string, unknown>;
  for (const h of signedHeaders) headers[h] = source[h] ?? null;
  const problem = canonicalChecked.has(message)
    ? undefined
    : canonicalProblem({ headers, body: signedBody ? message.body : null });
  if (problem) throw badRequest(`the message cannot be canonicalized: ${problem}`);
  const text = canonicalize({ headers, body: signedBody ? message.body : null });
  if (text === undefined) throw badRequest("the message cannot be canonicalized");
  return Buffer.from(text, "utf8");
}

export interface SigningKey {
  agentId: string;
  keyId: string;
  privateKey: KeyObject;
  /**
   * Retired keys still in their transition period (IFP-5 5.1): each signs too, after the active
   * key, so that a peer who knows only the old key still verifies the message.
   */
  transition?: readonly { keyId: string; privateKey: KeyObject }[];
}

/** A copy of the message with one more signature in security.signatures[]. */
export function signMessage<M extends Signable & { security?: Message["security"] }>(
  message: M,
  key: SigningKey,
  opts: { signedHeaders?: readonly string[]; created?: Date } = {},
): M {
  const signedHeaders = opts.signedHeaders ? [...opts.signedHeaders] : headersToSign(message.headers);
  const sig = edSign(null, signingInput(message, signedHeaders, true), key.privateKey).toString("base64url");
  const signature: Signature = {
    alg: "ed25519",
    key_id: `${key.agentId}#${key.keyId}`,
    created: isoSeconds(opts.created ?? new Date()),
    signed_headers: signedHeaders,
    signed_body: true,
    sig,
  };
  const extra: Signature[] = (key.transition ?? []).map((t) => ({
    ...signature,
    key_id: `${key.agentId}#${t.keyId}`,
    sig: edSign(null, signingInput(message, signedHeaders, true), t.privateKey).toString("base64url"),
  }));
  const security = { ...(message.security ?? {}) };
  security.signatures = [...(security.signatures ?? []), signature, ...extra];
  return { ...message, security };
}

export function verifySignature(message: Signable, signature: Signature, publicKey: KeyObject): boolean {
  if (signature.alg !== "ed25519") return false;
  const sig = Buffer.from(signature.sig, "base64url");
  if (sig.length !== 64) return false;
  return edVerify(null, signingInput(message, signature.signed_headers, signature.signed_body), publicKey, sig);
}

/** Split "agent_id#key" at its last '#' (agent ids may be URLs with fragments of their own). */
export function parseKeyId(keyId: string): { agentId: string; keyId: string } | undefined {
  const i = keyId.lastIndexOf("#");
  if (i <= 0 || i === keyId.length - 1) return undefined;
  return { agentId: keyId.slice(0, i), keyId: keyId.slice(i + 1) };
}

/**
 * Level 0 introduction (IFP-5 3.4): an `hmac-sha256` signature over the same signing input,
 * keyed by an introduction token the humans shared. It proves only that the sender holds the
 * token, never which agent it is, and is accepted for level 0 alone.
 */
export function signIntroduction<M extends Signable & { security?: Message["security"] }>(
  message: M,
  token: string,
  keyId: string,
  opts: { created?: Date } = {},
): M {
  const signedHeaders = headersToSign(message.headers);
  const signature: Signature = {
    alg: "hmac-sha256",
    key_id: keyId,
    created: isoSeconds(opts.created ?? new Date()),
    signed_headers: signedHeaders,
    signed_body: true,
    sig: createHmac("sha256", token)
      .update(signingInput(message, signedHeaders, true))
      .digest("base64url"),
  };
  const security = { ...(message.security ?? {}) };
  security.signatures = [...(security.signatures ?? []), signature];
  return { ...message, security };
}

/** Whether an hmac-sha256 signature was made with one of the tokens (constant-time comparison). */
export function verifyIntroduction(message: Signable, signature: Signature, tokens: readonly string[]): boolean {
  if (signature.alg !== "hmac-sha256") return false;
  const sig = Buffer.from(signature.sig, "base64url");
  if (sig.length !== 32) return false;
  const input = signingInput(message, signature.signed_headers, signature.signed_body);
  let ok = false;
  for (const t of tokens) {
    const expected = createHmac("sha256", t).update(input).digest();
    if (timingSafeEqual(expected, sig)) ok = true;
  }
  return ok;
}
