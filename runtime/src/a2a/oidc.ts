// OpenID Connect callers of the A2A endpoints (docs/a2a.md#authentication): a JWT access token
// (Authorization: Bearer) of an issuer spec.a2a.authentication.oidc names, verified with jose
// against the issuer's JWKS: its signature by a key of the JWKS with an algorithm of the
// issuer's allow-list (asymmetric only), its iss, aud, exp and nbf (60 s of clock skew), and the
// subject claim that names the caller. The JWKS is found through the issuer's
// /.well-known/openid-configuration unless given, fetched through the agent's HTTP client (its
// trust store and outbound address checks), kept 10 minutes, and fetched again at once (at most
// every 30 s) for a key id it does not hold, so that a rotated key is taken without a restart.
import {
  createLocalJWKSet,
  decodeJwt,
  errors,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
  jwtVerify,
  type CompactJWSHeaderParameters,
  type FlattenedJWSInput,
} from "jose";
import type { Logger } from "pino";
import type { HttpClient } from "../net/http-client.ts";
import type { A2aOidcIssuerSpec } from "../resources/agent.ts";
import { type Caller, unauthenticated } from "./callers.ts";
import { A2aError } from "./wire.ts";

/** Seconds a token's exp and nbf may be off by. */
export const OIDC_CLOCK_SKEW_SECONDS = 60;
/** How long a fetched JWKS is used before it is fetched again. */
export const OIDC_JWKS_MAX_AGE_MS = 10 * 60_000;
/** A key id the JWKS does not hold makes it fetched again, at most this often. */
export const OIDC_JWKS_COOLDOWN_MS = 30_000;
/** The largest token looked at; a larger one is refused unread. */
const MAX_TOKEN_CHARS = 16 * 1024;
/** The largest discovery document or JWKS read. */
const MAX_DOCUMENT_BYTES = 256 * 1024;
const MAX_SUBJECT_CHARS = 256;

/** The source of an OIDC caller (the hand-off's Ifp-Auth-Source). */
export const OIDC_SOURCE = "a2a-oidc";

/** The caller an issuer's subject is: one identity per issuer and subject. */
export const oidcCaller = (issuer: string, subject: string): string =>
  `a2a-oidc:${issuer}#${encodeURIComponent(subject)}`;

/** The URL of an issuer's discovery document (OpenID Connect Discovery 1.0, section 4). */
export const discoveryUrl = (issuer: string): string =>
  `${issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;

export interface OidcDeps {
  issuers: readonly A2aOidcIssuerSpec[];
  http: Pick<HttpClient, "request">;
  log?: Logger;
  now?: () => number;
}

/** The issuers of spec.a2a.authentication.oidc, each with its keys. */
export class OidcCallers {
  private readonly issuers = new Map<string, IssuerKeys>();
  private readonly now: () => number;

  constructor(deps: OidcDeps) {
    this.now = deps.now ?? Date.now;
    for (const spec of deps.issuers) this.issuers.set(spec.issuer, new IssuerKeys(spec, deps, this.now));
  }

  /** The caller a JWT names; a 401 A2aError when it is not one to accept, 503 when the issuer's keys cannot be had. */
  async verify(token: string): Promise<Caller> {
    if (token.length > MAX_TOKEN_CHARS) throw refused(`the token is longer than ${MAX_TOKEN_CHARS} characters`);
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      throw refused("the bearer token is not accepted");
    }
    const keys = typeof iss === "string" ? this.issuers.get(iss) : undefined;
    if (!keys) throw refused(`tokens of issuer ${JSON.stringify(iss)?.slice(0, 256)} are not accepted`);
    const { spec } = keys;
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, keys.getKey, {
        issuer: spec.issuer,
        audience: spec.audience,
        algorithms: [...spec.algorithms],
        clockTolerance: OIDC_CLOCK_SKEW_SECONDS,
        currentDate: new Date(this.now()),
        requiredClaims: ["exp", spec.subjectClaim],
      }));
    } catch (err) {
      throw joseRefusal(err, spec);
    }
    const subject = payload[spec.subjectClaim];
    if (typeof subject !== "string" || subject === "" || subject.length > MAX_SUBJECT_CHARS)
      throw refused(`the token's ${spec.subjectClaim} claim is not a string of 1 to ${MAX_SUBJECT_CHARS} characters`);
    return { id: oidcCaller(spec.issuer, subject), level: 0, source: OIDC_SOURCE };
  }
}

/** One issuer's JWKS, as last fetched. */
class IssuerKeys {
  readonly spec: A2aOidcIssuerSpec;
  private readonly deps: OidcDeps;
  private readonly now: () => number;
  private keys: { get: JWTVerifyGetKey; at: number } | undefined;
  private attemptedAt = Number.NEGATIVE_INFINITY;
  private fetching: Promise<void> | undefined;

  constructor(spec: A2aOidcIssuerSpec, deps: OidcDeps, now: () => number) {
    this.spec = spec;
    this.deps = deps;
    this.now = now;
  }

  /** jose's key lookup: the JWKS as held (fetched when stale), fetched again for a key it does not hold. */
  readonly getKey = async (header: CompactJWSHeaderParameters, token: FlattenedJWSInput) => {
    if (!this.keys || this.now() - this.keys.at >= OIDC_JWKS_MAX_AGE_MS) await this.refresh(!this.keys);
    try {
      return await this.keys!.get(header, token);
    } catch (err) {
      if (!(err instanceof errors.JWKSNoMatchingKey) || this.now() - this.attemptedAt < OIDC_JWKS_COOLDOWN_MS)
        throw err;
      await this.refresh(false);
      return this.keys!.get(header, token);
    }
  };

  /** Fetch the JWKS (one fetch at a time); when it fails, the keys held are kept, and without any, 503. */
  private async refresh(required: boolean): Promise<void> {
    this.fetching ??= this.fetch().finally(() => {
      this.fetching = undefined;
    });
    try {
      await this.fetching;
    } catch (err) {
      const message = `the JWKS of issuer ${this.spec.issuer} cannot be fetched: ${(err as Error).message}`;
      this.deps.log?.warn({ issuer: this.spec.issuer, err: (err as Error).message }, "OIDC issuer's JWKS not fetched");
      if (required || !this.keys) throw new A2aError("Unavailable", message, { "retry-after": "30" });
    }
  }

  private async fetch(): Promise<void> {
    this.attemptedAt = this.now();
    const jwksUrl = this.spec.jwksUrl ?? (await this.discover());
    const jwks = await this.json(jwksUrl);
    if (!Array.isArray((jwks as JSONWebKeySet).keys)) throw new Error(`${jwksUrl} is not a JWKS (no keys)`);
    this.keys = { get: createLocalJWKSet(jwks as JSONWebKeySet), at: this.now() };
  }

  /** The jwks_uri of the issuer's discovery document, which must name the issuer itself. */
  private async discover(): Promise<string> {
    const url = discoveryUrl(this.spec.issuer);
    const doc = (await this.json(url)) as { issuer?: unknown; jwks_uri?: unknown };
    if (doc.issuer !== this.spec.issuer)
      throw new Error(`${url} names issuer ${JSON.stringify(doc.issuer)?.slice(0, 256)}, not ${this.spec.issuer}`);
    if (typeof doc.jwks_uri !== "string" || !doc.jwks_uri.startsWith("https://"))
      throw new Error(`${url} has no https jwks_uri`);
    return doc.jwks_uri;
  }

  private async json(url: string): Promise<unknown> {
    const res = await this.deps.http.request(url, {
      headers: { accept: "application/json" },
      maxBytes: MAX_DOCUMENT_BYTES,
      timeoutMs: 10_000,
    });
    if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
    try {
      return JSON.parse(res.text);
    } catch {
      throw new Error(`${url} did not answer JSON`);
    }
  }
}

const refused = unauthenticated;

/** jose's reason for refusing a token, said for the caller; the issuer's unavailability kept as such. */
function joseRefusal(err: unknown, spec: A2aOidcIssuerSpec): A2aError {
  if (err instanceof A2aError) return err;
  if (err instanceof errors.JWTExpired) return refused("the token has expired");
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === "aud") return refused(`the token is not for audience ${spec.audience}`);
    if (err.claim === "nbf") return refused("the token is not valid yet");
    if (err.reason === "missing") return refused(`the token has no ${err.claim} claim`);
    return refused(`the token's ${err.claim} claim is not accepted`);
  }
  if (err instanceof errors.JOSEAlgNotAllowed)
    return refused(`the token's algorithm is not one issuer ${spec.issuer} accepts (${spec.algorithms.join(", ")})`);
  if (err instanceof errors.JWKSNoMatchingKey)
    return refused(`no key of issuer ${spec.issuer}'s JWKS matches the token's kid and algorithm`);
  if (err instanceof errors.JWKSMultipleMatchingKeys)
    return refused("the token names no kid and the issuer's JWKS has several keys for it");
  if (err instanceof errors.JWSSignatureVerificationFailed) return refused("the token's signature does not verify");
  if (err instanceof errors.JOSEError) return refused(`the token is not a valid JWT (${err.code})`);
  return refused("the token is not a valid JWT");
}
