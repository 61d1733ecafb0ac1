// Who calls the A2A endpoints (docs/a2a.md#authentication): a bearer token from the Secret
// spec.a2a.authentication.bearerTokenSecret names (level 0, like an IFP introduction token: a
// shared secret that names its holder, not an agent), or an IFP HTTP message signature (RFC
// 9421) by an agent whose key the agent looks up as for its inbox (levels 1 and 2), or a JWT of
// an OpenID Connect issuer spec.a2a.authentication.oidc names (oidc.ts; level 0).
import { createHash, type KeyObject, timingSafeEqual } from "node:crypto";
import type { Logger } from "pino";
import { tokenFile } from "../util/token-file.ts";
import { ProtocolError } from "../protocol/errors.ts";
import {
  type NonceStore,
  type RequestToAuthenticate,
  SignatureNonces,
  verifyRequest,
} from "../protocol/http-signatures.ts";
import { A2aError } from "./wire.ts";

export interface Caller {
  /** The caller's identity: the signing agent's id, or `a2a-token:<hash>` for a bearer token. */
  id: string;
  /** Its authentication level: 0 for a bearer token, the IFP-5 level of the signing key otherwise. */
  level: number;
  /** How it was established: a2a-bearer, or a2a-signature:<key source>. */
  source: string;
}

export interface KeyFound {
  key: KeyObject;
  level: number;
  source: string;
}

export interface CallerDeps {
  /** The bearer tokens accepted now (none: no bearer token is). */
  tokens: () => readonly string[];
  /** The key of an agent, as the inbox looks it up; throws a 401/429 ProtocolError. */
  lookupKey(agentId: string, keyId: string, address: string): Promise<KeyFound>;
  /**
   * The URLs the agent is configured to be reached at (spec.baseUrl, the spec.expose host): a
   * signature must cover the authority of one of them, whatever the request's Host says. None:
   * no signature is taken.
   */
  urls: readonly (string | undefined)[];
  minLevel: number;
  now?: () => number;
  /** The OIDC issuers' verification of a bearer token that is none of `tokens` (oidc.ts). */
  oidc?: { verify(token: string): Promise<Caller> };
  /** Where the signatures' nonces are taken: this process's SignatureNonces unless given (every event loop's). */
  nonces?: NonceStore;
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/** The identity a bearer token gives its holder: the hash of the token, never the token. */
export const tokenCaller = (token: string): string => `a2a-token:${digest(token).toString("hex").slice(0, 16)}`;

const CHALLENGE = 'Bearer realm="a2a", Signature';

export class A2aCallers {
  private readonly deps: CallerDeps;
  private readonly authorities: Set<string>;
  private readonly nonces: NonceStore;

  constructor(deps: CallerDeps) {
    this.deps = deps;
    this.nonces = deps.nonces ?? new SignatureNonces();
    this.authorities = new Set(deps.urls.filter((u) => u !== undefined).map((u) => new URL(u).host));
  }

  /** The configured authority the request names, else the first configured one (the signature then does not verify). */
  private authorityOf(host: string | undefined): string | undefined {
    const named = host?.toLowerCase();
    if (named !== undefined && this.authorities.has(named)) return named;
    return this.authorities.values().next().value;
  }

  async authenticate(req: RequestToAuthenticate): Promise<Caller> {
    const caller = await this.identify(req);
    if (caller.level < this.deps.minLevel)
      throw new A2aError(
        "Forbidden",
        `this agent's A2A endpoints accept callers at authentication level ${this.deps.minLevel} or above; yours is at level ${caller.level} (${caller.source})`,
      );
    return caller;
  }

  private async identify(req: RequestToAuthenticate): Promise<Caller> {
    const authorization = req.headers.authorization;
    if (typeof authorization === "string" && /^bearer\s/i.test(authorization)) {
      const bearer = authorization.slice(7).trim();
      const presented = digest(bearer);
      let match: string | undefined;
      // Every token is compared, in constant time over equal-length digests, whichever matches.
      for (const token of this.deps.tokens()) if (timingSafeEqual(presented, digest(token))) match ??= token;
      if (!match && this.deps.oidc) return this.deps.oidc.verify(bearer);
      if (!match) throw unauthenticated("the bearer token is not accepted");
      return { id: tokenCaller(match), level: 0, source: "a2a-bearer" };
    }
    if (req.headers["signature-input"] !== undefined || req.headers.signature !== undefined) {
      let found: KeyFound | undefined;
      try {
        const host = this.authorityOf(req.host);
        if (host === undefined)
          throw unauthenticated(
            "this agent has no spec.baseUrl, so no request signature can name it; use a bearer token",
          );
        const { agentId } = await verifyRequest(
          { method: req.method, url: new URL(req.url, `https://${host}`).href, headers: req.headers, body: req.body },
          async (agent, keyId) => {
            found = await this.deps.lookupKey(agent, keyId, req.clientAddress);
            return found.key;
          },
          (this.deps.now ?? Date.now)(),
          this.nonces,
        );
        return { id: agentId, level: found!.level, source: `a2a-signature:${found!.source}` };
      } catch (err) {
        if (err instanceof ProtocolError) {
          if (err.statusCode === 429)
            throw new A2aError("RateLimited", err.message, { "retry-after": err.headers["retry-after"] ?? "60" });
          if (err.statusCode === 503)
            throw new A2aError("Unavailable", err.message, { "retry-after": err.headers["retry-after"] ?? "5" });
          throw unauthenticated(err.message);
        }
        throw err;
      }
    }
    throw unauthenticated(
      "authentication is required: a bearer token (Authorization: Bearer) or an IFP HTTP message signature (RFC 9421)",
    );
  }
}

export const unauthenticated = (message: string) =>
  new A2aError("Unauthenticated", message, { "www-authenticate": CHALLENGE });

/**
 * Bearer tokens from a file (the mounted Secret key): one per line, blank lines ignored, a token
 * shorter than 16 characters refused. Read again when the file changes (at most every few
 * seconds), so that a rotated Secret takes effect without a restart. Without a file, none.
 */
export function bearerTokenFile(path: string | undefined, log?: Logger, now = Date.now): () => readonly string[] {
  if (!path) return () => [];
  return tokenFile(path, "A2A bearer tokens", log, now);
}
