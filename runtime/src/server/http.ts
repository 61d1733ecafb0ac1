// The HTTPS server the agent's and the relay's endpoints are built on: TLS only, JSON in and out,
// one error handler that answers the spec's error body, client addresses through trusted
// proxies, and slow clients cut off.
import type { IncomingMessage } from "node:http";
import Fastify, {
  LogController,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from "fastify";
import type { Logger } from "pino";
import { ProtocolError, type ErrorCode } from "../protocol/errors.ts";
import { isCidrOrIp } from "../resources/network.ts";
import { readJsonBodies } from "./json-body.ts";
import { TrustedProxies } from "./ratelimit.ts";
import { invalidRequest, validatorCompiler } from "./validation.ts";
import type { RuntimeMetrics } from "./metrics.ts";

declare module "fastify" {
  interface FastifyInstance {
    /** The client address of a raw request (a WebSocket upgrade), by the same rule as `request.clientAddress`. */
    clientAddressOf(req: IncomingMessage): string;
  }
  interface FastifyRequest {
    /** The address per-address limits key on: the peer, or behind trusted proxies the client (TrustedProxies.clientAddress). */
    readonly clientAddress: string;
  }
  interface FastifyReply {
    /** The answer's result for metrics: the error code once sendError has run, or what the route sets. */
    outcome: string | null;
  }
}

export interface TlsMaterial {
  cert: string | Buffer;
  key: string | Buffer;
}

export interface ServerOptions {
  /** TLS certificate and key; omitted only for app.inject() in tests, never for a listener. */
  tls?: TlsMaterial;
  logger: Logger;
  /** Default body limit for routes that do not set their own. */
  bodyLimit?: number;
  /**
   * Addresses (IPs or CIDR blocks) of the proxies in front of the runtime. Only a request whose
   * peer is one of them has its X-Forwarded-For (and X-Forwarded-Host, -Proto) believed:
   * request.clientAddress is then the nearest address in the chain that is not a trusted proxy
   * (TrustedProxies). Empty or absent: the peer's address, whatever the headers say.
   */
  trustedProxies?: string[];
}

/** The --trusted-proxies flag: comma separated IPs or CIDR blocks; throws on anything else. */
export function parseTrustedProxies(text: string | undefined): string[] {
  if (text === undefined) return [];
  const list = text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = list.filter((s) => !isCidrOrIp(s));
  if (bad.length)
    throw new Error(
      `--trusted-proxies takes IP addresses or CIDR blocks such as 10.0.0.0/8, not ${bad.map((b) => JSON.stringify(b)).join(", ")}`,
    );
  return list;
}

/** What the agent's and the relay's HTTPS apps share: observability, TLS, proxies, readiness, clock. */
export interface EndpointDeps {
  metrics: RuntimeMetrics;
  logger: Logger;
  tls?: TlsMaterial;
  /** Proxies whose X-Forwarded-For is believed (--trusted-proxies). */
  trustedProxies?: string[];
  /** Readiness: NATS reached and streams in place. */
  ready: () => boolean;
  now?: () => number;
}

/** The whole of a request — headers and body — must arrive within this. */
export const REQUEST_TIMEOUT_MS = 30_000;

/**
 * Slow clients are cut off: headers must arrive within 10 s, checked every second (Node checks
 * every 30 s by default). The body's deadline is `cutOffUnfinishedBodies`.
 */
export const SLOW_CLIENT_LIMITS = { headersTimeout: 10_000, connectionsCheckingInterval: 1_000 } as const;

/**
 * A request whose body has not fully arrived REQUEST_TIMEOUT_MS after it began loses its
 * connection: Node's own request timeout lets a client that sent its headers and then stopped
 * sending the body hold the connection indefinitely.
 */
export function cutOffUnfinishedBodies(app: FastifyInstance, timeoutMs = REQUEST_TIMEOUT_MS): void {
  app.addHook("onRequest", (req, _reply, done) => {
    const raw = req.raw;
    // Only requests with a body (never an upgrade to WebSocket, whose request never completes).
    const hasBody = raw.headers["transfer-encoding"] !== undefined || Number(raw.headers["content-length"] ?? 0) > 0;
    if (hasBody && !raw.headers.upgrade && !raw.complete) {
      const timer = setTimeout(() => {
        if (!raw.complete) raw.socket.destroy();
      }, timeoutMs);
      timer.unref();
      const clear = () => clearTimeout(timer);
      raw.once("end", clear);
      raw.once("close", clear);
    }
    done();
  });
}

/**
 * A fastify instance for an IFP endpoint: HTTPS only (TLS 1.2+), JSON in and out, and one
 * error handler that maps every failure to the spec's error body {status, code, message}.
 */
export function createServer(opts: ServerOptions): FastifyInstance {
  const proxies = new TrustedProxies(opts.trustedProxies);
  const app = Fastify({
    loggerInstance: opts.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    return503OnClosing: true,
    forceCloseConnections: "idle",
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Never `true`: a client's own X-Forwarded-For would pick its rate-limit bucket. The same
    // proxies as the client address's rule (X-Forwarded-Host, -Proto); limits use clientAddress.
    trustProxy: proxies.empty ? false : (address: string) => proxies.trusts(address),
    ...(opts.tls
      ? { https: { cert: opts.tls.cert, key: opts.tls.key, minVersion: "TLSv1.2" as const, ...SLOW_CLIENT_LIMITS } }
      : {}),
  }) as unknown as FastifyInstance;
  // The one place a client address is worked out, for HTTP requests and WebSocket upgrades alike.
  app.decorate("clientAddressOf", (req: IncomingMessage) => proxies.clientAddress(req));
  app.decorateRequest("clientAddress", {
    getter(this: FastifyRequest) {
      return proxies.clientAddress(this.raw);
    },
  });
  cutOffUnfinishedBodies(app);
  jsonApi(app);
  return app;
}

/**
 * JSON in and out: every other media type is refused with 415, requests are validated by
 * the routes' zod schemas (validatorCompiler), and one error handler maps every failure to the spec's error body.
 * Answers are written with JSON.stringify, not re-validated: their schemas type the handlers,
 * and a message handed out stays byte for byte what was stored.
 */
export function jsonApi(app: FastifyInstance): void {
  app.removeContentTypeParser("text/plain");
  readJsonBodies(app);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  app.decorateReply("outcome", null);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((req, reply) => {
    sendError(reply, new ProtocolError(404, "not_found", `no endpoint ${req.method} ${req.url.split("?")[0]}`));
  });
}

export function sendError(reply: FastifyReply, err: ProtocolError): FastifyReply {
  reply.outcome = err.code;
  for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
  return reply.code(err.statusCode).type("application/json; charset=utf-8").send(err.body());
}

const FASTIFY_CODES: Record<number, ErrorCode> = {
  400: "invalid_format",
  404: "not_found",
  405: "method_not_allowed",
  413: "payload_too_large",
  415: "unsupported_media_type",
  429: "rate_limited",
  503: "unavailable",
};

/** Every error leaves as {status: "error", code, message}; only real faults are 500s. */
export function toProtocolError(err: unknown): ProtocolError {
  if (err instanceof ProtocolError) return err;
  const e = err as FastifyError;
  const status = typeof e?.statusCode === "number" ? e.statusCode : 500;
  if (status >= 400 && status < 500) {
    const code = FASTIFY_CODES[status] ?? "invalid_format";
    let message = e.message;
    if (e.code === "FST_ERR_CTP_BODY_TOO_LARGE") message = "the request body exceeds the size limit";
    if (e.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") message = "Content-Type must be application/json";
    if (e.code === "FST_ERR_CTP_EMPTY_JSON_BODY") message = "the request body is empty; a JSON document is required";
    if (e instanceof SyntaxError || e.code === "FST_ERR_CTP_INVALID_JSON_BODY")
      message = `the body is not valid JSON: ${e.message}`;
    return new ProtocolError(status, code, message);
  }
  if (status === 503) return new ProtocolError(503, "unavailable", e.message, { "retry-after": "5" });
  return new ProtocolError(500, "internal_error", "unexpected failure; see the runtime's log");
}

function errorHandler(this: FastifyInstance, err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const pe = invalidRequest(err, req.routeOptions.config.invalid) ?? toProtocolError(err);
  if (pe.statusCode === 500) req.log.error({ err, url: req.url }, "request failed");
  else req.log.debug({ code: pe.code, url: req.url }, pe.message);
  sendError(reply, pe);
}
