// An OpenID Connect issuer on loopback for the tests of OIDC callers: HTTPS with the test CA's
// certificate, /.well-known/openid-configuration naming its JWKS, the JWKS of the keys it holds
// now, and tokens signed with jose (good ones and the bad ones a verifier must refuse).
import { createSecretKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { createServer, type Server } from "node:https";
import { exportJWK, SignJWT } from "jose";
import type { Tls } from "./agent-harness.ts";

export interface IssuerKey {
  kid: string;
  alg: "RS256" | "ES256";
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export function issuerKey(kid: string, alg: IssuerKey["alg"] = "RS256"): IssuerKey {
  const pair =
    alg === "RS256"
      ? generateKeyPairSync("rsa", { modulusLength: 2048 })
      : generateKeyPairSync("ec", { namedCurve: "P-256" });
  return { kid, alg, ...pair };
}

export interface OidcIssuer {
  /** The issuer's identifier (https://localhost:<port>). */
  issuer: string;
  jwksUrl: string;
  /** The keys the JWKS serves now (change it to rotate). */
  keys: IssuerKey[];
  /** How many times each path was requested. */
  requests: Map<string, number>;
  /** Fields laid over the discovery document (to make it name another issuer, or no https JWKS). */
  discovery: Record<string, unknown>;
  /** While true, every request is answered 503. */
  failing: boolean;
  /** The issuer's default claims with `claims` over them (one given as undefined left out). */
  claims(claims?: Record<string, unknown>): Record<string, unknown>;
  /** A JWT of `key` (default the first) with those claims. */
  token(claims?: Record<string, unknown>, key?: IssuerKey): Promise<string>;
  close(): Promise<void>;
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");

/**
 * The issuer: tokens by default for `audience`, subject `alice`, issued now, expiring in 5
 * minutes. A claim given as undefined is left out.
 */
export async function startIssuer(tls: Tls, audience: string): Promise<OidcIssuer> {
  const requests = new Map<string, number>();
  const keys = [issuerKey("key-1")];
  const state = { discovery: {} as Record<string, unknown>, failing: false };
  let issuer = "";
  const server: Server = createServer({ cert: tls.cert, key: tls.key }, async (req, res) => {
    const path = new URL(req.url ?? "/", issuer).pathname;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    const json = (body: unknown) =>
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
    if (state.failing) return res.writeHead(503).end();
    if (path === "/.well-known/openid-configuration")
      return json({
        issuer,
        jwks_uri: `${issuer}/jwks`,
        id_token_signing_alg_values_supported: ["RS256", "ES256"],
        ...state.discovery,
      });
    if (path === "/jwks")
      return json({
        keys: await Promise.all(
          keys.map(async (k) => ({ ...(await exportJWK(k.publicKey)), kid: k.kid, alg: k.alg, use: "sig" })),
        ),
      });
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  issuer = `https://localhost:${typeof addr === "object" && addr ? addr.port : 0}`;
  const claims = (extra: Record<string, unknown> = {}) => {
    const now = Math.floor(Date.now() / 1000);
    const all: Record<string, unknown> = {
      iss: issuer,
      aud: audience,
      sub: "alice",
      iat: now,
      exp: now + 300,
      ...extra,
    };
    for (const [k, v] of Object.entries(all)) if (v === undefined) delete all[k];
    return all;
  };
  return {
    issuer,
    jwksUrl: `${issuer}/jwks`,
    keys,
    requests,
    get discovery() {
      return state.discovery;
    },
    set discovery(v) {
      state.discovery = v;
    },
    get failing() {
      return state.failing;
    },
    set failing(v) {
      state.failing = v;
    },
    claims,
    async token(extra = {}, key = keys[0]!) {
      return new SignJWT(claims(extra))
        .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: "JWT" })
        .sign(key.privateKey);
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A token with `alg: none` and no signature (RFC 7519 section 6), claiming what a good one would. */
export function unsecuredToken(claims: Record<string, unknown>, kid = "key-1"): string {
  return `${b64({ alg: "none", typ: "JWT", kid })}.${b64(claims)}.`;
}

/** The key-confusion token: HS256, its HMAC key the issuer's public key as a verifier may hold it (PEM). */
export async function publicKeyHmacToken(claims: Record<string, unknown>, key: IssuerKey): Promise<string> {
  const pem = key.publicKey.export({ type: "spki", format: "pem" });
  return new SignJWT(claims)
    .setProtectedHeader({ alg: "HS256", kid: key.kid, typ: "JWT" })
    .sign(createSecretKey(Buffer.from(pem)));
}
