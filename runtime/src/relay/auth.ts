import type { IncomingHttpHeaders } from "node:http";
import { RateLimiter } from "../agent/ratelimit.ts";
import { rateLimited } from "../protocol/errors.ts";
import { verifyRequest } from "../protocol/http-signatures.ts";
import type { Verifier } from "../protocol/verify.ts";

export interface RequestToAuthenticate {
  /** Client address, for the limit checked before the signature. */
  ip: string;
  method: string;
  /** The request target as received (path and query). */
  url: string;
  host: string | undefined;
  headers: IncomingHttpHeaders;
  body?: Buffer;
}

/**
 * Who is asking: the cheap per-address limit first, so that floods of bad signatures cannot
 * burn the CPU, then the RFC 9421 request signature against the keys of spec.agents (401),
 * then the per-agent limit keyed by the verified signer (429). Resolves to the agent id.
 */
export function relayAuthenticator(opts: { verifier: Verifier; perAddressPerMinute: number; perAgentPerMinute: number; now?: () => number }) {
  const now = opts.now ?? Date.now;
  const perAddress = new RateLimiter(opts.perAddressPerMinute, { now });
  const perAgent = new RateLimiter(opts.perAgentPerMinute, { now });
  return async (req: RequestToAuthenticate): Promise<string> => {
    const byAddress = perAddress.take(req.ip);
    if (!byAddress.ok) throw rateLimited(byAddress.retryAfterSeconds, `too many requests from ${req.ip}`);
    const { agentId } = await verifyRequest(
      { method: req.method, url: absoluteUrl(req.url, req.host), headers: req.headers, body: req.body },
      (agent, keyId) => opts.verifier.key(agent, keyId),
      now(),
    );
    const byAgent = perAgent.take(agentId);
    if (!byAgent.ok) throw rateLimited(byAgent.retryAfterSeconds, `rate limit of ${opts.perAgentPerMinute} requests per minute exceeded for ${agentId}`);
    return agentId;
  };
}

/** The absolute URL whose @path and @query are checked; a strange Host does not matter to them. */
export function absoluteUrl(target: string, host: string | undefined): string {
  try {
    return new URL(target, `https://${host ?? "relay.invalid"}`).href;
  } catch {
    return new URL(target, "https://relay.invalid").href;
  }
}
