// RFC 9421 request signatures (Ed25519, label sig1, a Content-Digest of the body), as requests to
// the relay endpoints and A2A requests between agents carry them: signing and verifying a request,
// and SignatureNonces, which takes each signed request once.
import type { IncomingHttpHeaders } from "node:http";
import { createHash, randomBytes, sign as edSign, verify as edVerify, type KeyObject } from "node:crypto";
import { httpbis } from "http-message-signatures";
import {
  isInnerList,
  parseDictionary,
  serializeDictionary,
  serializeInnerList,
  serializeItem,
  type InnerList,
} from "structured-headers";
import { invalidSignature, unavailable } from "./errors.ts";
import { parseKeyId, type SigningKey } from "./signing.ts";

/**
 * Request signatures for the relay endpoints (the spec leaves their authentication open):
 * RFC 9421 HTTP Message Signatures, label `sig1`, Ed25519, covering
 * ("@method" "@authority" "@path" "@query") plus "content-digest" (RFC 9530, sha-256) when
 * there is a body, with parameters created, expires (at most SIGNATURE_LIFETIME_S after
 * created), nonce (random, new for every request), keyid="<agent_id>#<keyId>" and
 * alg="ed25519". Covering @authority binds a request to the one host it was sent to; the short
 * life bounds a replay to that host, and a verifier that keeps the nonces it has seen
 * (SignatureNonces) takes each signed request once.
 *
 * Both sides build the signature base with the http-message-signatures library (signatureBase
 * below) and write or parse the fields with structured-headers. Verification picks exactly the
 * `sig1` signature and applies this profile (covered components, age, algorithm, key).
 */
export const SIGNATURE_LABEL = "sig1";
/** A signature whose `created` is more than this many seconds ago is refused. */
export const MAX_SIGNATURE_AGE_S = 300;
/**
 * Clock skew tolerated between an agent and a relay, as the inbox tolerates for a message's
 * date (5 minutes): a `created` up to this far in the future, an `expires` up to this far in
 * the past.
 */
export const CLOCK_SKEW_S = 300;
export const SIGNATURE_ALG = "ed25519";
/** A signature lives at most this long: `expires` is required and at most this far after `created`. */
export const SIGNATURE_LIFETIME_S = 60;
const BASE_COMPONENTS = ["@method", "@authority", "@path", "@query"] as const;

/** The RFC 9530 Content-Digest field value (sha-256) of a body. */
export function contentDigest(body: string | Uint8Array): string {
  return `sha-256=:${createHash("sha256").update(body).digest("base64")}:`;
}

export interface RequestToSign {
  method: string;
  /** Absolute URL; its authority (host and port), path and query are signed. */
  url: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

/**
 * The request's headers with Signature-Input, Signature and, when there is a body,
 * Content-Digest added (header names in lower case). The signature base is built by
 * signatureBase(), the very function verification uses (the library's RFC 9421 base); the
 * fields are written with structured-headers, and the output is byte for byte what the
 * library's signMessage() writes for the same request (a test holds them to it). Building it
 * here skips the library's re-parsing of every component name and parameter, about a third of
 * the cost of a signed request on the sending side.
 */
export async function signRequest(
  req: RequestToSign,
  key: SigningKey,
  created = new Date(),
  nonce = randomBytes(16).toString("base64url"),
): Promise<Record<string, string>> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers ?? {})) headers[k.toLowerCase()] = v;
  const fields: string[] = [...BASE_COMPONENTS];
  if (req.body !== undefined) {
    headers["content-digest"] = contentDigest(req.body);
    fields.push("content-digest");
  }
  const createdS = Math.floor(created.getTime() / 1000);
  const input: InnerList = [
    fields.map((name) => [name, new Map()]),
    new Map<string, string | number>([
      ["created", createdS],
      ["expires", createdS + SIGNATURE_LIFETIME_S],
      ["nonce", nonce],
      ["keyid", `${key.agentId}#${key.keyId}`],
      ["alg", SIGNATURE_ALG],
    ]),
  ];
  const base = signatureBase({ method: req.method, url: req.url, headers }, input);
  const signature = edSign(null, Buffer.from(base), key.privateKey);
  const bytes = signature.buffer.slice(
    signature.byteOffset,
    signature.byteOffset + signature.byteLength,
  ) as ArrayBuffer;
  headers["signature-input"] = serializeDictionary(new Map([[SIGNATURE_LABEL, input]]));
  headers.signature = serializeDictionary(new Map([[SIGNATURE_LABEL, [bytes, new Map()]]]));
  return headers;
}

export interface IncomingRequest {
  method: string;
  /**
   * Absolute URL of the request. Its authority is the verifier's own (the relay's configured
   * public host), not the Host header, so a request signed for another host does not verify.
   */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  /** The raw body, when the request has one. */
  body?: Buffer;
}

/**
 * A request as a server received it, before anything of it is believed: what the relay and the
 * A2A face authenticate, by a bearer token or by its signature over the server's own authority.
 */
export interface RequestToAuthenticate {
  /** Client address, for the limits checked before the signature: the server's `clientAddress` (through trusted proxies only). */
  clientAddress: string;
  method: string;
  /** The request target as received (path and query). */
  url: string;
  host: string | undefined;
  headers: IncomingHttpHeaders;
  body?: Buffer;
}

/**
 * The RFC 9421 signature base of `req` for one signature's inner list of covered components
 * and parameters (section 2.5), as the bytes that are signed.
 */
export function signatureBase(req: Pick<IncomingRequest, "method" | "url" | "headers">, input: InnerList): string {
  const lines = profileBase(req, input) ?? libraryBase(req, input);
  lines.push(`"@signature-params": ${serializeInnerList(input)}`);
  return lines.join("\n");
}

/** The base lines of any components, as the library derives them. */
function libraryBase(req: Pick<IncomingRequest, "method" | "url" | "headers">, input: InnerList): string[] {
  const fields = input[0].map((item) => serializeItem(item));
  const base = httpbis.createSignatureBase(
    { fields },
    { method: req.method.toUpperCase(), url: req.url, headers: definedHeaders(req.headers) },
  );
  return base.length ? [httpbis.formatSignatureBase(base)] : [];
}

/** A header field name that is its own sf-string serialisation between quotes. */
const PLAIN_FIELD = /^[a-z0-9-]+$/;

/**
 * The base lines of the components this profile signs — @method, @authority, @path, @query and
 * lower-case header fields, none with parameters — derived as the library derives them (one URL
 * parse instead of one per component, no re-parsing of each component name). Undefined for
 * anything else (another derived component, a parameter, a missing field), which the library
 * then builds or refuses with its own message.
 */
function profileBase(req: Pick<IncomingRequest, "method" | "url" | "headers">, input: InnerList): string[] | undefined {
  let url: URL | undefined;
  const lines: string[] = [];
  for (const [name, params] of input[0]) {
    if (typeof name !== "string" || params.size) return undefined;
    let value: string;
    if (name === "@method") value = req.method.toUpperCase();
    else if (name === "@authority" || name === "@path" || name === "@query") {
      url ??= new URL(req.url);
      if (name === "@path") value = url.pathname || "/";
      else if (name === "@query") value = url.search || "?";
      // The port unless it is the scheme's default (the URL parser has already dropped 80 and 443).
      else value = url.hostname.toLowerCase() + (url.port && /^https?:$/.test(url.protocol) ? `:${url.port}` : "");
    } else if (PLAIN_FIELD.test(name)) {
      const v = req.headers[name];
      if (v === undefined) return undefined;
      value = (Array.isArray(v) ? v : [v]).map((x) => x.trim().replace(/\n\s*/gm, " ")).join(", ");
    } else return undefined;
    lines.push(`"${name}": ${value}`);
  }
  return lines;
}

/**
 * Verify a request signed as above and return the signing agent. `keyFor` looks a key up by
 * agent id and key id (at once, or by a lookup it bounds itself: it is asked only once the
 * request is well-formed, fresh and its body matches its digest) and throws a 401 ProtocolError
 * for an unknown agent or key. With `nonces`, the signature must carry a nonce, and a nonce
 * of the key seen before is a replay (401); a verifier that had to forget nonces refuses what it
 * can no longer tell from a replay with 503 (SignatureNonces). Every other failure is a 401
 * `invalid_signature` with the reason.
 */
export async function verifyRequest(
  req: IncomingRequest,
  keyFor: (agentId: string, keyId: string) => KeyObject | Promise<KeyObject>,
  now = Date.now(),
  nonces?: NonceStore,
): Promise<{ agentId: string; keyId: string }> {
  const inputField = field(req.headers["signature-input"]);
  const signatureField = field(req.headers.signature);
  if (!inputField || !signatureField)
    throw invalidSignature("the request is not signed (Signature-Input and Signature are required)");
  let inputs: ReturnType<typeof parseDictionary>;
  let signatures: ReturnType<typeof parseDictionary>;
  try {
    inputs = parseDictionary(inputField);
    signatures = parseDictionary(signatureField);
  } catch (err) {
    throw invalidSignature(
      `Signature-Input or Signature is not a structured-field dictionary: ${(err as Error).message}`,
    );
  }
  const input = inputs.get(SIGNATURE_LABEL);
  const signature = signatures.get(SIGNATURE_LABEL);
  if (!input || !signature)
    throw invalidSignature(
      `the request needs a signature labelled ${SIGNATURE_LABEL} in both Signature-Input and Signature`,
    );
  if (!isInnerList(input))
    throw invalidSignature(`Signature-Input ${SIGNATURE_LABEL} must be an inner list of covered components`);
  if (isInnerList(signature) || !(signature[0] instanceof ArrayBuffer))
    throw invalidSignature(`Signature ${SIGNATURE_LABEL} must be a byte sequence`);

  // The profile: covered components, parameters, age.
  const covered = coveredComponents(input);
  const hasBody = req.body !== undefined && req.body.length > 0;
  const required: string[] = [...BASE_COMPONENTS, ...(hasBody ? ["content-digest"] : [])];
  const missing = required.filter((c) => !covered.includes(c));
  if (missing.length)
    throw invalidSignature(
      `the signature must cover ${required.map((c) => `"${c}"`).join(" ")} (missing ${missing.join(", ")})`,
    );
  const params = input[1];
  const alg = params.get("alg");
  if (alg !== SIGNATURE_ALG) throw invalidSignature(`the signature needs alg="${SIGNATURE_ALG}"`);
  const created = params.get("created");
  if (typeof created !== "number" || !Number.isInteger(created))
    throw invalidSignature("the signature needs a created parameter (whole seconds since the epoch)");
  const age = now / 1000 - created;
  if (age > MAX_SIGNATURE_AGE_S)
    throw invalidSignature(`the request signature is older than ${MAX_SIGNATURE_AGE_S} s (created ${created})`);
  if (age < -CLOCK_SKEW_S)
    throw invalidSignature(`the request signature is created in the future (${created}); check the clock`);
  const expires = params.get("expires");
  if (typeof expires !== "number" || !Number.isInteger(expires))
    throw invalidSignature("the signature needs an expires parameter (whole seconds since the epoch)");
  if (expires <= created || expires - created > SIGNATURE_LIFETIME_S)
    throw invalidSignature(`the signature's expires must be after created and at most ${SIGNATURE_LIFETIME_S} s later`);
  if (now / 1000 > expires + CLOCK_SKEW_S)
    throw invalidSignature(`the request signature has expired (expires ${expires})`);
  const keyid = params.get("keyid");
  const ref = typeof keyid === "string" ? parseKeyId(keyid) : undefined;
  if (!ref)
    throw invalidSignature(`the signature needs keyid="<agent_id>#<keyId>", not ${JSON.stringify(keyid ?? null)}`);
  const nonce = params.get("nonce");
  if (nonces && (typeof nonce !== "string" || !NONCE.test(nonce)))
    throw invalidSignature(
      "the signature needs a nonce parameter (8 to 128 of A-Z a-z 0-9 - _ . ~ + / =), new for every request",
    );

  // The body against its digest, then the key, then the signature itself (the costly part).
  if (hasBody) {
    const digest = field(req.headers["content-digest"]);
    if (!digest) throw invalidSignature("a request with a body needs a Content-Digest (RFC 9530, sha-256)");
    if (!digestMatches(digest, req.body!)) throw invalidSignature("Content-Digest does not match the body (sha-256)");
  }
  const key = await keyFor(ref.agentId, ref.keyId);
  let base: string;
  try {
    base = signatureBase(req, input);
  } catch (err) {
    throw invalidSignature(`the signature base cannot be built: ${(err as Error).message}`);
  }
  if (!(await verifyOffThread(Buffer.from(base), key, new Uint8Array(signature[0]))))
    throw invalidSignature("the request signature does not verify");
  nonces?.use(keyid as string, nonce as string, created, now);
  return ref;
}

const NONCE = /^[A-Za-z0-9\-_.~+/=]{8,128}$/;

/** A replay: the signature's nonce was taken before (401). */
export const nonceTaken = () =>
  invalidSignature("the request signature was taken before (its nonce is used); sign every request anew");
/** A nonce the verifier cannot tell from one it took before (503: sign again). */
export const nonceForgotten = () =>
  unavailable(
    "this verifier takes too many signed requests to remember this signature's nonce; sign the request again",
    1,
  );

/** Where a verifier takes the nonce of each signature it verified: 401 when taken before, 503 when it cannot tell. */
export interface NonceStore {
  use(keyid: string, nonce: string, created: number, now: number): void;
}

/**
 * The nonces of the request signatures a verifier took, each kept until its signature is too old
 * to be taken again (MAX_SIGNATURE_AGE_S after its `created`), so that a signed request is taken
 * once: the same request again is a replay. At most `max` are kept; past that the oldest is
 * forgotten and every signature created no later than a forgotten one is refused with 503 (sign
 * again), since it could be that one replayed — memory stays bounded and no replay gets through.
 * In memory, per process: each replica of a verifier keeps its own (the event loops of one
 * process share SharedNonces instead, server/shared-ratelimit.ts).
 */
export class SignatureNonces implements NonceStore {
  private readonly seen = new Map<string, { created: number; until: number }>();
  /** The latest `created` (s) of a nonce forgotten before its time. */
  private floor = Number.NEGATIVE_INFINITY;
  readonly max: number;

  constructor(max = 100_000) {
    this.max = max;
  }

  get size(): number {
    return this.seen.size;
  }

  /** Take the nonce of a verified signature by `keyid`, created at `created` (s): 401 if it was taken before. */
  use(keyid: string, nonce: string, created: number, now: number): void {
    for (const [k, v] of this.seen) {
      if (v.until > now) break;
      this.seen.delete(k);
    }
    if (created <= this.floor) throw nonceForgotten();
    const k = `${keyid} ${nonce}`;
    if (this.seen.has(k)) throw nonceTaken();
    while (this.seen.size >= this.max) {
      const [oldest, v] = this.seen.entries().next().value!;
      this.seen.delete(oldest);
      this.floor = Math.max(this.floor, v.created);
    }
    this.seen.set(k, { created, until: (created + MAX_SIGNATURE_AGE_S + 1) * 1000 });
  }
}

/**
 * Ed25519 verification on libuv's thread pool (crypto.verify with a callback): the same check,
 * done beside the event loop instead of on it. It is the largest single cost of a signed
 * request (about 0.11 ms); on the event loop it held up every other request for that long.
 */
function verifyOffThread(data: Buffer, key: KeyObject, signature: Uint8Array): Promise<boolean> {
  return new Promise((resolve, reject) =>
    edVerify(null, data, key, signature, (err, ok) => (err ? reject(err) : resolve(ok))),
  );
}

/** Covered component names: plain strings, each once (RFC 9421 section 2). */
function coveredComponents(input: InnerList): string[] {
  const names: string[] = [];
  for (const [name, params] of input[0]) {
    if (typeof name !== "string") throw invalidSignature('covered components must be strings such as "@method"');
    if (params.size) throw invalidSignature(`covered component "${name}" must not carry parameters in this profile`);
    if (names.includes(name)) throw invalidSignature(`covered component "${name}" appears twice`);
    names.push(name);
  }
  return names;
}

/** Does a Content-Digest field carry the body's sha-256 (other algorithms are ignored)? */
export function digestMatches(fieldValue: string, body: Uint8Array): boolean {
  let dict: ReturnType<typeof parseDictionary>;
  try {
    dict = parseDictionary(fieldValue);
  } catch {
    return false;
  }
  const sha = dict.get("sha-256");
  if (!sha || isInnerList(sha) || !(sha[0] instanceof ArrayBuffer)) return false;
  return Buffer.from(sha[0]).equals(createHash("sha256").update(body).digest());
}

function field(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(", ") : v;
}

function definedHeaders(h: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = v;
  return out;
}
