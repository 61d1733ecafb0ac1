// The agent card (A2A v1.0 AgentCard, served at /.well-known/agent-card.json), generated from
// the Agent and signed as section 8.4 says: a JWS (RFC 7515) with a detached payload, the RFC
// 8785 canonical form of the card without `signatures`, made with the agent's own Ed25519
// signing key (alg EdDSA); `kid` names the key as IFP does (<agent id>#<key id>) and `jku` is
// the agent's JWKS beside the card.
import { createPublicKey, type KeyObject } from "node:crypto";
import canonicalize from "canonicalize";
import {
  createLocalJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  FlattenedSign,
  flattenedVerify,
  type CryptoKey as JoseKey,
  type JSONWebKeySet,
  type JWK,
  type JWSHeaderParameters,
} from "jose";
import type { SigningKey } from "../protocol/signing.ts";
import { ASYMMETRIC_JWS_ALGORITHMS, type Agent } from "../resources/agent.ts";
import { discoveryUrl } from "./oidc.ts";
import { A2A_V03_CARD_VERSION, A2A_V03_PROTOCOL_VERSION, securitySchemesTo03 } from "./v03.ts";
import { A2A_PROTOCOL_VERSION } from "./wire.ts";

import { A2A_JSONRPC_PATH, A2A_JWKS_PATH, A2A_REST_PATH, a2aGrpcTarget } from "../contract/a2a.ts";

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

/**
 * The gRPC binding's entry of supportedInterfaces: `<the base URL's host>:<its port>`, the
 * target the official SDKs' gRPC clients dial as it stands (an https:// URL is no gRPC target).
 */
function grpcInterface(base: string, port: number | undefined): Record<string, string>[] {
  if (port === undefined) return [];
  return [
    {
      url: a2aGrpcTarget(base, port),
      protocolBinding: "GRPC",
      protocolVersion: A2A_PROTOCOL_VERSION,
    },
  ];
}

/**
 * The card for one public base URL (spec.baseUrl, or the request's host), in the form of the
 * version the request asks for: 1.0's; for 0.3 (a request without A2A-Version) the same card
 * with the fields 0.3 clients find the agent by — `url`, `preferredTransport` and
 * `protocolVersion` — which 1.0's AgentCard has not (docs/a2a.md#versions).
 */
export function agentCard(opts: CardOptions, baseUrl: string, version: "1.0" | "0.3" = "1.0"): Record<string, unknown> {
  const card = agentCard10(opts, baseUrl);
  if (version === "1.0") return card;
  const { supportedInterfaces, securitySchemes, capabilities, ...rest } = card;
  const { extendedAgentCard, ...caps } = capabilities as Record<string, unknown>;
  return {
    ...rest,
    url: `${baseUrl.replace(/\/+$/, "")}${A2A_JSONRPC_PATH}`,
    preferredTransport: "JSONRPC",
    protocolVersion: A2A_V03_CARD_VERSION,
    capabilities: caps,
    supportsAuthenticatedExtendedCard: extendedAgentCard,
    securitySchemes: securitySchemesTo03(securitySchemes as Record<string, Record<string, unknown>>),
    // 1.0's interfaces as well, as the official SDKs embed them in the 0.3 card they serve.
    supportedInterfaces,
  };
}

function agentCard10(opts: CardOptions, baseUrl: string): Record<string, unknown> {
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
      tags: s.tags.length ? s.tags : ((before?.tags as string[] | undefined) ?? [s.id.split(".")[0]]),
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
      // The JSON-RPC endpoint answers A2A 0.3 too (v03.ts), as a request without A2A-Version asks for.
      { url: `${base}${A2A_JSONRPC_PATH}`, protocolBinding: "JSONRPC", protocolVersion: A2A_V03_PROTOCOL_VERSION },
    ],
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: true, extendedAgentCard: false },
    securitySchemes: schemes,
    defaultInputModes: ["text/plain", "application/json"],
    defaultOutputModes: ["text/plain", "application/json"],
    skills: [...skills.values()],
  };
}

/**
 * The payload a card's signatures cover (section 8.4.1): the RFC 8785 form of the card without
 * `signatures` and without empty repeated fields (`[]`), which a2a.proto's JSON leaves out.
 * `sdk`: also without empty strings and empty objects, as the official SDKs clean a card before
 * they check it (cards they sign are checked in that form too).
 */
export function cardPayload(card: Record<string, unknown>, form: "spec" | "sdk" = "spec"): string {
  const { signatures: _, ...unsigned } = card;
  const payload = canonicalize(withoutEmpty(unsigned, form) ?? {});
  if (payload === undefined) throw new CardSignatureError("the card cannot be canonicalized (RFC 8785)");
  return payload;
}

function withoutEmpty(value: unknown, form: "spec" | "sdk"): unknown {
  if (value === null || value === undefined) return undefined;
  if (form === "sdk" && value === "") return undefined;
  if (Array.isArray(value)) {
    const items = value.map((v) => withoutEmpty(v, form)).filter((v) => v !== undefined);
    return items.length ? items : undefined;
  }
  if (typeof value === "object") {
    const entries = Object.entries(value)
      .map(([k, v]) => [k, withoutEmpty(v, form)] as const)
      .filter(([, v]) => v !== undefined);
    return form === "sdk" && entries.length === 0 ? undefined : Object.fromEntries(entries);
  }
  return value;
}

/** The JWS of a card (section 8.4.2): protected header and signature over its canonical form, made by jose. */
export async function signCard(
  card: Record<string, unknown>,
  signing: SigningKey,
  jku: string,
): Promise<{ protected: string; signature: string }> {
  const jws = await new FlattenedSign(new TextEncoder().encode(cardPayload(card)))
    .setProtectedHeader({ alg: "EdDSA", typ: "JOSE", kid: `${signing.agentId}#${signing.keyId}`, jku })
    .sign(signing.privateKey);
  return { protected: jws.protected!, signature: jws.signature };
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
  private readonly cards = new Map<string, Promise<string>>();

  constructor(opts: CardOptions) {
    this.opts = opts;
  }

  /** The card's JSON text for `baseUrl`, in the form of `version` (agentCard). */
  get(baseUrl: string, version: "1.0" | "0.3" = "1.0"): Promise<string> {
    const key = `${version} ${baseUrl}`;
    let text = this.cards.get(key);
    if (text === undefined) {
      const card = agentCard(this.opts, baseUrl, version);
      text = signCard(card, this.opts.signing, `${baseUrl.replace(/\/+$/, "")}${A2A_JWKS_PATH}`).then((signature) =>
        JSON.stringify({ ...card, signatures: [signature] }),
      );
      if (this.cards.size < 32) this.cards.set(key, text);
    }
    return text;
  }
}

/** Why a card's signature was not accepted. */
export class CardSignatureError extends Error {}

/** The protected header of a card's JWS, as far as finding its key needs. */
export type CardJwsHeader = JWSHeaderParameters & { alg: string };

/** A key to check a card's signature with: a public key, or a JWK. */
export type CardKey = KeyObject | JoseKey | JWK;

/** The JWS algorithms a card may be signed with: the asymmetric ones (a JWKS is public). */
export const CARD_ALGORITHMS: readonly string[] = ASYMMETRIC_JWS_ALGORITHMS;

/**
 * Check every signature of a card (section 8.4.3) with jose: a JWS with a detached payload, the
 * canonical form of the card (cardPayload(); the form the official SDKs clean to is taken too).
 * `keyOf` finds the key a signature's protected header names (its `jku` and `kid`); jose checks
 * that the key suits the header's algorithm. A card with no signatures is unsigned (`signed:
 * false`); one with any signature that does not verify, that uses an algorithm not in
 * CARD_ALGORITHMS or a critical header, is refused (CardSignatureError).
 */
export async function verifyCardSignatures(
  card: Record<string, unknown>,
  keyOf: (header: CardJwsHeader) => Promise<CardKey>,
): Promise<{ signed: boolean; kids: string[] }> {
  const { signatures } = card;
  if (signatures === undefined || (Array.isArray(signatures) && signatures.length === 0))
    return { signed: false, kids: [] };
  if (!Array.isArray(signatures) || signatures.length > 8)
    throw new CardSignatureError("signatures is not a list of at most 8 JWS");
  const payloads = [...new Set([cardPayload(card), cardPayload(card, "sdk")])].map((p) =>
    Buffer.from(p).toString("base64url"),
  );
  const kids: string[] = [];
  for (const [i, s] of signatures.entries()) {
    const jws = s as { protected?: unknown; signature?: unknown; header?: unknown };
    if (typeof jws?.protected !== "string" || typeof jws.signature !== "string")
      throw new CardSignatureError(`signature ${i + 1} has no protected header or no signature`);
    let header: CardJwsHeader;
    try {
      header = decodeProtectedHeader({ protected: jws.protected }) as CardJwsHeader;
    } catch {
      throw new CardSignatureError(`signature ${i + 1}: its protected header is not base64url JSON`);
    }
    if (typeof header.alg !== "string" || !CARD_ALGORITHMS.includes(header.alg))
      throw new CardSignatureError(`signature ${i + 1}: algorithm ${JSON.stringify(header.alg)} is not accepted`);
    if (header.crit !== undefined)
      throw new CardSignatureError(`signature ${i + 1}: critical header parameters are not understood`);
    const key = await keyOf(header);
    let failure: unknown;
    for (const payload of payloads) {
      try {
        await flattenedVerify({ protected: jws.protected, signature: jws.signature, payload }, key, {
          algorithms: [...CARD_ALGORITHMS],
        });
        failure = undefined;
        break;
      } catch (err) {
        failure = err;
      }
    }
    if (failure instanceof joseErrors.JWSSignatureVerificationFailed)
      throw new CardSignatureError(`signature ${i + 1} (kid ${header.kid ?? "none"}) does not verify over the card`);
    if (failure)
      throw new CardSignatureError(
        `signature ${i + 1} (${header.alg}) cannot be checked with its key: ${(failure as Error).message}`,
      );
    if (header.kid) kids.push(header.kid);
  }
  return { signed: true, kids };
}

/**
 * The key of a JWKS (RFC 7517) that a signature's header names, chosen by jose: its `kid` (or
 * the only key when no kid is named), of a type that suits the header's `alg`.
 */
export async function keyOfJwks(jwks: unknown, header: CardJwsHeader): Promise<CardKey> {
  const keys = (jwks as { keys?: unknown })?.keys;
  if (!Array.isArray(keys)) throw new CardSignatureError("the JWKS has no keys");
  try {
    return await createLocalJWKSet({ keys } as JSONWebKeySet)(header, { payload: "", signature: "" });
  } catch (err) {
    if (err instanceof joseErrors.JWKSNoMatchingKey)
      throw new CardSignatureError(`the JWKS has no ${header.alg} key ${header.kid ?? "(none named)"}`);
    if (err instanceof joseErrors.JWKSMultipleMatchingKeys)
      throw new CardSignatureError(`the JWKS has more than one ${header.alg} key ${header.kid ?? "(none named)"}`);
    throw new CardSignatureError(
      `the JWKS key ${header.kid ?? ""} is not a usable public key: ${(err as Error).message}`,
    );
  }
}
