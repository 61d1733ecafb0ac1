// The agent card (A2A v1.0 AgentCard, served at /.well-known/agent-card.json), generated from
// the Agent and signed as section 8.4 says: a JWS (RFC 7515) with a detached payload, the RFC
// 8785 canonical form of the card without `signatures`, made with the agent's own Ed25519
// signing key (alg EdDSA); `kid` names the key as IFP does (<agent id>#<key id>) and `jku` is
// the agent's JWKS beside the card.
import { createPublicKey, type KeyObject, sign, verify } from "node:crypto";
import canonicalize from "canonicalize";
import type { SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { discoveryUrl } from "./oidc.ts";
import { A2A_PROTOCOL_VERSION } from "./wire.ts";

import { A2A_JSONRPC_PATH, A2A_JWKS_PATH, A2A_REST_PATH } from "../contract/a2a.ts";

export const BEARER_SCHEME = "bearer";
export const SIGNATURE_SCHEME = "ifpHttpSignature";
/** The card's name of the security scheme of spec.a2a.authentication.oidc[i]. */
export const oidcSchemeName = (i: number): string => (i === 0 ? "oidc" : `oidc-${i + 1}`);

export interface CardOptions {
  agent: Agent;
  signing: SigningKey;
  /** Bearer tokens are configured: the card offers the bearer scheme. */
  bearer: boolean;
  /** The OIDC issuers whose tokens are accepted (spec.a2a.authentication.oidc): one openIdConnect scheme each. */
  oidcIssuers?: readonly string[];
  /** The port of the gRPC binding (grpc.ts), once it listens: the card names it at the base URL's host. */
  grpcPort?: () => number | undefined;
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString("base64url");

/**
 * The gRPC binding's entry of supportedInterfaces: `<the base URL's host>:<its port>`, the
 * target the official SDKs' gRPC clients dial as it stands (an https:// URL is no gRPC target).
 */
function grpcInterface(base: string, port: number | undefined): Record<string, string>[] {
  if (port === undefined) return [];
  return [
    {
      url: `${new URL(base).hostname}:${port}`,
      protocolBinding: "GRPC",
      protocolVersion: A2A_PROTOCOL_VERSION,
    },
  ];
}

/** The card for one public base URL (spec.baseUrl, or the request's host). */
export function agentCard(opts: CardOptions, baseUrl: string): Record<string, unknown> {
  const spec = opts.agent.spec;
  const base = baseUrl.replace(/\/+$/, "");
  const skills = new Map<string, Record<string, unknown>>();
  for (const c of spec.capabilities)
    skills.set(c.name, {
      id: c.name,
      name: c.name,
      description: c.description,
      tags: [c.name.split(".")[0]],
    });
  for (const s of spec.a2a.skills) {
    const before = skills.get(s.id);
    skills.set(s.id, {
      id: s.id,
      name: s.name ?? (before?.name as string | undefined) ?? s.id,
      description: s.description ?? (before?.description as string | undefined) ?? s.id,
      tags: s.tags.length ? s.tags : ((before?.tags as string[] | undefined) ?? []),
      ...(s.examples.length ? { examples: s.examples } : {}),
    });
  }
  const schemes: Record<string, unknown> = {
    [SIGNATURE_SCHEME]: {
      apiKeySecurityScheme: {
        location: "header",
        name: "Signature",
        description:
          "An IFP HTTP message signature (RFC 9421, Signature and Signature-Input, ed25519, keyid <agent id>#<key id>) by an agent whose key this agent can look up",
      },
    },
  };
  if (opts.bearer)
    schemes[BEARER_SCHEME] = {
      httpAuthSecurityScheme: { scheme: "Bearer", description: "A token the agent's owners gave the caller" },
    };
  for (const [i, issuer] of (opts.oidcIssuers ?? []).entries())
    schemes[oidcSchemeName(i)] = {
      openIdConnectSecurityScheme: {
        openIdConnectUrl: discoveryUrl(issuer),
        description: `A JWT access token of ${issuer} (Authorization: Bearer)`,
      },
    };
  return {
    name: spec.displayName ?? opts.agent.metadata.name ?? spec.agentId,
    description: spec.displayName
      ? `${spec.displayName}, an IFP agent (${spec.agentId})`
      : `An IFP agent (${spec.agentId})`,
    supportedInterfaces: [
      { url: `${base}${A2A_JSONRPC_PATH}`, protocolBinding: "JSONRPC", protocolVersion: A2A_PROTOCOL_VERSION },
      { url: `${base}${A2A_REST_PATH}`, protocolBinding: "HTTP+JSON", protocolVersion: A2A_PROTOCOL_VERSION },
      ...grpcInterface(base, opts.grpcPort?.()),
    ],
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: true, extendedAgentCard: false },
    securitySchemes: schemes,
    securityRequirements: Object.keys(schemes).map((name) => ({ schemes: { [name]: { list: [] } } })),
    defaultInputModes: ["text/plain", "application/json"],
    defaultOutputModes: ["text/plain", "application/json"],
    skills: [...skills.values()],
  };
}

/** The JWS of a card (section 8.4.2): protected header and signature over its canonical form. */
export function signCard(
  card: Record<string, unknown>,
  signing: SigningKey,
  jku: string,
): { protected: string; signature: string } {
  const { signatures: _, ...unsigned } = card;
  const payload = canonicalize(unsigned);
  if (payload === undefined) throw new Error("the agent card cannot be canonicalized");
  const header = b64url(JSON.stringify({ alg: "EdDSA", typ: "JOSE", kid: `${signing.agentId}#${signing.keyId}`, jku }));
  const signature = sign(null, Buffer.from(`${header}.${b64url(payload)}`), signing.privateKey);
  return { protected: header, signature: b64url(signature) };
}

/** The agent's signing keys as a JWKS (RFC 7517, OKP Ed25519), each under its `kid`. */
export function jwks(signing: SigningKey): { keys: Record<string, string>[] } {
  const keys = [
    { keyId: signing.keyId, privateKey: signing.privateKey },
    ...(signing.transition ?? []).map((t) => ({ keyId: t.keyId, privateKey: t.privateKey })),
  ];
  return {
    keys: keys.map((k) => {
      const jwk = createPublicKey(k.privateKey).export({ format: "jwk" }) as { kty: string; crv: string; x: string };
      return {
        kty: jwk.kty,
        crv: jwk.crv,
        x: jwk.x,
        kid: `${signing.agentId}#${k.keyId}`,
        alg: "EdDSA",
        use: "sig",
      };
    }),
  };
}

/** The signed card for a base URL, made once per base URL (a few at most). */
export class CardCache {
  private readonly opts: CardOptions;
  private readonly cards = new Map<string, string>();

  constructor(opts: CardOptions) {
    this.opts = opts;
  }

  /** The card's JSON text for `baseUrl`. */
  get(baseUrl: string): string {
    let text = this.cards.get(baseUrl);
    if (text === undefined) {
      const card = agentCard(this.opts, baseUrl);
      const signature = signCard(card, this.opts.signing, `${baseUrl.replace(/\/+$/, "")}${A2A_JWKS_PATH}`);
      text = JSON.stringify({ ...card, signatures: [signature] });
      if (this.cards.size < 16) this.cards.set(baseUrl, text);
    }
    return text;
  }

  /**
   * The card for a base URL taken from a request (a runtime given no spec.baseUrl), unsigned:
   * the agent's key vouches only for URLs it was configured with, never for a Host anyone may send.
   */
  unsigned(baseUrl: string): string {
    return JSON.stringify(agentCard(this.opts, baseUrl));
  }
}

/** Why a card's signature was not accepted. */
export class CardSignatureError extends Error {}

/** The protected header of a card's JWS, as far as verifying it needs. */
export interface CardJwsHeader {
  alg: string;
  kid?: string;
  jku?: string;
}

/** JWS algorithms a card may be signed with, and how node:crypto verifies each. */
const JWS_ALGS: Record<string, { hash: string | null; dsaEncoding?: "ieee-p1363" }> = {
  EdDSA: { hash: null },
  Ed25519: { hash: null },
  ES256: { hash: "sha256", dsaEncoding: "ieee-p1363" },
  ES384: { hash: "sha384", dsaEncoding: "ieee-p1363" },
  ES512: { hash: "sha512", dsaEncoding: "ieee-p1363" },
  RS256: { hash: "sha256" },
  RS384: { hash: "sha384" },
  RS512: { hash: "sha512" },
};

/**
 * Check every signature of a card (section 8.4.3), the way signCard() makes them: a JWS with a
 * detached payload, the RFC 8785 canonical form of the card without `signatures`. `keyOf` finds
 * the key a signature's protected header names (its `jku` and `kid`). A card with no
 * signatures is unsigned (`signed: false`); one with any signature that does not verify, that
 * uses an algorithm not listed above or a critical header, is refused (CardSignatureError).
 */
export async function verifyCardSignatures(
  card: Record<string, unknown>,
  keyOf: (header: CardJwsHeader) => Promise<KeyObject>,
): Promise<{ signed: boolean; kids: string[] }> {
  const { signatures, ...unsigned } = card;
  if (signatures === undefined || (Array.isArray(signatures) && signatures.length === 0))
    return { signed: false, kids: [] };
  if (!Array.isArray(signatures) || signatures.length > 8)
    throw new CardSignatureError("signatures is not a list of at most 8 JWS");
  const payload = canonicalize(unsigned);
  if (payload === undefined) throw new CardSignatureError("the card cannot be canonicalized (RFC 8785)");
  const kids: string[] = [];
  for (const [i, s] of signatures.entries()) {
    const jws = s as { protected?: unknown; signature?: unknown };
    if (typeof jws?.protected !== "string" || typeof jws.signature !== "string")
      throw new CardSignatureError(`signature ${i + 1} has no protected header or no signature`);
    let header: CardJwsHeader & { crit?: unknown };
    try {
      header = JSON.parse(Buffer.from(jws.protected, "base64url").toString("utf8"));
    } catch {
      throw new CardSignatureError(`signature ${i + 1}: its protected header is not base64url JSON`);
    }
    const alg = typeof header?.alg === "string" ? JWS_ALGS[header.alg] : undefined;
    if (!alg)
      throw new CardSignatureError(`signature ${i + 1}: algorithm ${JSON.stringify(header?.alg)} is not accepted`);
    if (header.crit !== undefined)
      throw new CardSignatureError(`signature ${i + 1}: critical header parameters are not understood`);
    const key = await keyOf(header);
    const input = Buffer.from(`${jws.protected}.${b64url(payload)}`);
    let ok = false;
    try {
      ok = verify(
        alg.hash,
        input,
        alg.dsaEncoding ? { key, dsaEncoding: alg.dsaEncoding } : key,
        Buffer.from(jws.signature, "base64url"),
      );
    } catch (err) {
      throw new CardSignatureError(
        `signature ${i + 1} (${header.alg}) cannot be checked with its key: ${(err as Error).message}`,
      );
    }
    if (!ok)
      throw new CardSignatureError(`signature ${i + 1} (kid ${header.kid ?? "none"}) does not verify over the card`);
    if (header.kid) kids.push(header.kid);
  }
  return { signed: true, kids };
}

/** The key of a JWKS (RFC 7517) with this `kid` (or its only key when no kid is named). */
export function keyOfJwks(jwks: unknown, kid: string | undefined): KeyObject {
  const keys = (jwks as { keys?: unknown })?.keys;
  if (!Array.isArray(keys)) throw new CardSignatureError("the JWKS has no keys");
  const found = kid === undefined ? (keys.length === 1 ? keys[0] : undefined) : keys.find((k) => k?.kid === kid);
  if (!found) throw new CardSignatureError(`the JWKS has no key ${kid ?? "(none named, and more than one)"}`);
  try {
    return createPublicKey({ key: found as import("node:crypto").JsonWebKey, format: "jwk" });
  } catch (err) {
    throw new CardSignatureError(`the JWKS key ${kid ?? ""} is not a usable public key: ${(err as Error).message}`);
  }
}
