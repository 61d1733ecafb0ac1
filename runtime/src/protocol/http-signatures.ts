import { createHash, sign as edSign, verify as edVerify, type KeyObject } from "node:crypto";
import { httpbis } from "http-message-signatures";
import { invalidSignature } from "./errors.ts";
import { parseKeyId, type SigningKey } from "./signing.ts";

/**
 * Request signatures for the relay endpoints (the spec leaves their authentication open):
 * RFC 9421 HTTP Message Signatures, label `sig1`, Ed25519, covering
 * ("@method" "@path" "@query") plus "content-digest" (RFC 9530, sha-256) when there is a
 * body, with parameters created, keyid="<agent_id>#<keyId>" and alg="ed25519".
 */
export const SIGNATURE_LABEL = "sig1";
export const MAX_SIGNATURE_AGE_S = 300;
const CLOCK_SKEW_S = 5;

export function contentDigest(body: string | Uint8Array): string {
  return `sha-256=:${createHash("sha256").update(body).digest("base64")}:`;
}

export interface RequestToSign {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

/** The headers to add to a request: Signature-Input, Signature and, with a body, Content-Digest. */
export async function signRequest(req: RequestToSign, key: SigningKey, created = new Date()): Promise<Record<string, string>> {
  const headers: Record<string, string> = { ...(req.headers ?? {}) };
  const fields = ["@method", "@path", "@query"];
  if (req.body !== undefined) {
    headers["content-digest"] = contentDigest(req.body);
    fields.push("content-digest");
  }
  const signed = await httpbis.signMessage(
    {
      key: { id: `${key.agentId}#${key.keyId}`, alg: "ed25519", sign: async (data: Buffer) => edSign(null, data, key.privateKey) },
      name: SIGNATURE_LABEL,
      fields,
      params: ["created", "keyid", "alg"],
      paramValues: { created },
    },
    { method: req.method.toUpperCase(), url: req.url, headers },
  );
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(signed.headers)) out[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

export interface IncomingRequest {
  method: string;
  /** Absolute URL of the request (scheme and host do not enter the signature base). */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  /** The raw body, when the request has one. */
  body?: Buffer;
}

/**
 * Verify a request signed as above; returns the signing agent. `keyFor` looks a key up by
 * agent id and key id and throws a 401 ProtocolError for an unknown agent or key.
 */
export async function verifyRequest(
  req: IncomingRequest,
  keyFor: (agentId: string, keyId: string) => KeyObject,
): Promise<{ agentId: string; keyId: string }> {
  const input = header(req.headers["signature-input"]);
  const sig = header(req.headers.signature);
  if (!input || !sig) throw invalidSignature("the request is not signed (Signature-Input and Signature are required)");
  if (!input.includes(`${SIGNATURE_LABEL}=`)) throw invalidSignature(`the signature must be labelled ${SIGNATURE_LABEL}`);
  const required = ["@method", "@path", "@query"];
  const hasBody = req.body !== undefined && req.body.length > 0;
  if (hasBody) {
    const digest = header(req.headers["content-digest"]);
    if (!digest) throw invalidSignature("a request with a body needs a Content-Digest (RFC 9530, sha-256)");
    if (digest !== contentDigest(req.body!)) throw invalidSignature("Content-Digest does not match the body");
    required.push("content-digest");
  }
  let signer: { agentId: string; keyId: string } | undefined;
  let lookupError: unknown;
  let ok: boolean | null;
  try {
    ok = await httpbis.verifyMessage(
      {
        requiredParams: ["created", "keyid", "alg"],
        requiredFields: required,
        maxAge: MAX_SIGNATURE_AGE_S,
        tolerance: CLOCK_SKEW_S,
        keyLookup: async (params) => {
          const keyid = typeof params.keyid === "string" ? params.keyid : "";
          const ref = parseKeyId(keyid);
          if (!ref) throw invalidSignature(`keyid ${JSON.stringify(keyid)} is not of the form <agent_id>#<keyId>`);
          if (params.alg !== "ed25519") throw invalidSignature(`alg must be ed25519`);
          let key: KeyObject;
          try {
            key = keyFor(ref.agentId, ref.keyId);
          } catch (err) {
            lookupError = err;
            throw err;
          }
          signer = ref;
          return { id: keyid, algs: ["ed25519"], verify: async (data: Buffer, signature: Buffer) => edVerify(null, data, key, signature) };
        },
      },
      { method: req.method.toUpperCase(), url: req.url, headers: flatten(req.headers) },
    );
  } catch (err) {
    if (lookupError) throw lookupError;
    const e = err as Error;
    if (e.name === "ProtocolError") throw e;
    if (/too old|expired/i.test(e.message)) throw invalidSignature(`the request signature is older than ${MAX_SIGNATURE_AGE_S} s or from the future`);
    throw invalidSignature(`the request signature is not acceptable: ${e.message}`);
  }
  if (!ok || !signer) throw invalidSignature("the request signature does not verify");
  return signer;
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(", ") : v;
}

function flatten(h: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = v;
  return out;
}
