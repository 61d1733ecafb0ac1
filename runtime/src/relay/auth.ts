// Who is asking the relay: the per-address limit, the RFC 9421 request signature checked against
// spec.agents' keys (or a publisher's looked-up key) for the relay's own authority, then the
// per-agent limit; and the hook that makes every route of a scope answer signed requests only.
import type { FastifyInstance } from "fastify";
import { readJsonBodies } from "../server/json-body.ts";
import { RateLimiter } from "../server/ratelimit.ts";
import { rateLimited } from "../protocol/errors.ts";
import { type RequestToAuthenticate, verifyRequest } from "../protocol/http-signatures.ts";
import type { Publishers } from "./publishers.ts";

/** A request to the relay, with where it came in and whether senders it does not serve may use it. */
export interface RelayRequest extends RequestToAuthenticate {
  /** The local port the connection came in on. */
  localPort?: number;
  /** An endpoint senders the relay does not serve may use (publishing), as spec.publishers allows. */
  open?: boolean;
}

declare module "fastify" {
  interface FastifyContextConfig {
    /** Senders not in spec.agents may call the route (publishing), as spec.publishers allows. */
    strangers?: boolean;
  }
  interface FastifyRequest {
    /** The agent that signed the request: set by the authentication hook, before any schema or handler. */
    agent: string;
    /** The body's bytes, which the request signature covers through Content-Digest. */
    rawBody: Buffer | null;
  }
}

export type RelayAuthenticator = ReturnType<typeof relayAuthenticator>;

/**
 * Who is asking: the cheap per-address limit first, so that floods of bad signatures cannot
 * burn the CPU, then the RFC 9421 request signature against the keys of spec.agents or, on an
 * endpoint open to them, a key spec.publishers lets the relay look up (401), then the per-agent
 * limit keyed by the verified signer (429; spec.publishers.limits for a sender the relay does
 * not serve). Resolves to the agent id.
 */
export function relayAuthenticator(opts: {
  publishers: Publishers;
  /** The relay's public URL (spec.url): its authority is the one every signature must cover. */
  publicUrl: string;
  perAddressPerMinute: number;
  perAgentPerMinute: number;
  now?: () => number;
}) {
  const now = opts.now ?? Date.now;
  const publicUrl = new URL(opts.publicUrl);
  // The authority every signature covers: spec.url's, or (a replica reached directly, as in a
  // port-forward) spec.url's host name with the port the connection came in on. Never any
  // other host, whatever the Host header says.
  // The direct authority is worked out once per local port (the relay listens on one or two),
  // not parsed again for every request.
  const directAuthority = new Map<number, string>();
  const authorityOf = (req: RelayRequest): string => {
    let direct: string | undefined;
    if (req.localPort) {
      direct = directAuthority.get(req.localPort);
      if (direct === undefined) {
        direct = new URL(`https://${publicUrl.hostname}:${req.localPort}`).host;
        if (directAuthority.size < 16) directAuthority.set(req.localPort, direct);
      }
    }
    return direct && req.host?.toLowerCase() === direct ? direct : publicUrl.host;
  };
  const perAddress = new RateLimiter(opts.perAddressPerMinute, { now });
  const perAgent = new RateLimiter(opts.perAgentPerMinute, { now });
  /** The per-address limit alone: taken when the request arrives, before its body is read. */
  const limitAddress = (req: { clientAddress: string }): void => {
    const address = req.clientAddress;
    const byAddress = perAddress.take(address);
    if (!byAddress.ok) throw rateLimited(byAddress.retryAfterSeconds, `too many requests from ${address}`);
  };
  /** `cost` more requests of a verified agent (a batch's messages, a WebSocket's frames); 429 past the limit. */
  const limitAgent = (agentId: string, cost = 1): void => {
    if (!opts.publishers.serves(agentId)) {
      opts.publishers.limitRequests(agentId, cost);
      return;
    }
    const byAgent = perAgent.take(agentId, cost);
    if (!byAgent.ok)
      throw rateLimited(
        byAgent.retryAfterSeconds,
        `rate limit of ${opts.perAgentPerMinute} requests per minute exceeded for ${agentId}`,
      );
  };
  const authenticate = async (req: RelayRequest, how: { addressLimited?: boolean } = {}): Promise<string> => {
    if (!how.addressLimited) limitAddress(req);
    const { agentId } = await verifyRequest(
      { method: req.method, url: absoluteUrl(req.url, authorityOf(req)), headers: req.headers, body: req.body },
      (agent, keyId) => opts.publishers.key(agent, keyId, { address: req.clientAddress, open: req.open === true }),
      now(),
    );
    limitAgent(agentId);
    return agentId;
  };
  return Object.assign(authenticate, { limitAddress, limitAgent });
}

/**
 * The absolute URL whose @authority, @path and @query are checked. The authority is the
 * relay's own (from spec.url), never the Host header: a request signed for another relay, or
 * sent with a forged Host, does not verify, and a proxy that rewrites Host changes nothing.
 */
export function absoluteUrl(target: string, host: string | undefined): string {
  try {
    return new URL(target, `https://${host ?? "relay.invalid"}`).href;
  } catch {
    return new URL(target, "https://relay.invalid").href;
  }
}

/**
 * Every route of `scope` answers signed requests only: the body's bytes are kept for its
 * Content-Digest, and the request is authenticated before its schemas are checked (after the
 * size, media type and JSON checks), so `req.agent` is the verified caller in every handler.
 */
export function requireSignedRequests(scope: FastifyInstance, authenticate: RelayAuthenticator): void {
  scope.decorateRequest("agent", "");
  scope.decorateRequest("rawBody", null);
  readJsonBodies(scope, (req, body) => {
    req.rawBody = body;
  });
  // The per-address limit as soon as the request arrives, before its body is read or parsed.
  scope.addHook("onRequest", async (req) => authenticate.limitAddress(req));
  scope.addHook("preValidation", async (req) => {
    req.agent = await authenticate(
      {
        clientAddress: req.clientAddress,
        method: req.method,
        url: req.url,
        host: req.host,
        localPort: req.socket.localPort,
        headers: req.headers,
        body: req.rawBody ?? undefined,
        open: req.routeOptions.config.strangers === true,
      },
      { addressLimited: true },
    );
  });
}
