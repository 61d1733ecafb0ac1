// The agent card (A2A v1.0 AgentCard, served at /.well-known/agent-card.json), generated from
// the Agent and signed as section 8.4 says: a JWS (RFC 7515) with a detached payload, the RFC
// 8785 canonical form of the card without `signatures`, made with the agent's own Ed25519
// signing key (alg EdDSA); `kid` names the key as IFP does (<agent id>#<key id>) and `jku` is
// the agent's JWKS beside the card.
import { createPublicKey, sign } from "node:crypto";
import canonicalize from "canonicalize";
import type { SigningKey } from "../protocol/signing.ts";
import type { Agent } from "../resources/agent.ts";
import { A2A_PROTOCOL_VERSION } from "./wire.ts";

import { A2A_JSONRPC_PATH, A2A_JWKS_PATH, A2A_REST_PATH } from "../contract/a2a.ts";

export const BEARER_SCHEME = "bearer";
export const SIGNATURE_SCHEME = "ifpHttpSignature";

export interface CardOptions {
  agent: Agent;
  signing: SigningKey;
  /** Bearer tokens are configured: the card offers the bearer scheme. */
  bearer: boolean;
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString("base64url");

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
  return {
    name: spec.displayName ?? opts.agent.metadata.name ?? spec.agentId,
    description: spec.displayName
      ? `${spec.displayName}, an IFP agent (${spec.agentId})`
      : `An IFP agent (${spec.agentId})`,
    supportedInterfaces: [
      { url: `${base}${A2A_JSONRPC_PATH}`, protocolBinding: "JSONRPC", protocolVersion: A2A_PROTOCOL_VERSION },
      { url: `${base}${A2A_REST_PATH}`, protocolBinding: "HTTP+JSON", protocolVersion: A2A_PROTOCOL_VERSION },
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
}
