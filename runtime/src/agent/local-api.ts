// The local API, the application's side of the runtime: the outbox, conversations, peers and
// (without spec.handler) inbound-message routes, on the pod's loopback and, with a token, on an
// HTTPS listener for other pods. main.ts serves it; local-api-openapi.ts reads its routes.
import type { ZodTypeProvider } from "@fastify/type-provider-zod";
import Fastify, { LogController, type FastifyInstance, type RouteOptions } from "fastify";
import type { Logger } from "pino";
import { Health } from "../protocol/local-api.ts";
import { jsonApi, type TlsMaterial } from "../server/http.ts";
import type { AppStream } from "./app-stream.ts";
import { appStreamRoutes } from "./app-stream-routes.ts";
import { type InboxWatch, watchRoutes } from "./inbox-watch.ts";
import { requireBearer, type BearerAuthOptions, type TokenFile } from "./local-api-auth.ts";
import type { Conversations } from "./conversations.ts";
import { conversationRoutes } from "./routes/conversations.ts";
import { outboxRoutes, type OutboxRouteDeps } from "./routes/outbox.ts";
import { peerRoutes, type PeerRouteDeps } from "./routes/peers.ts";

export interface LocalApiDeps extends Omit<OutboxRouteDeps, "conversations"> {
  peers: PeerRouteDeps["peers"];
  /** Conversation records: each queued message is recorded; GET /conversations/{id} reads them. */
  conversations?: Pick<Conversations, "outbound" | "list" | "nextSequence">;
  /** Inbound messages for an application without an HTTP server; undefined when spec.handler is set. */
  stream?: AppStream;
  /** GET /messages/watch on the loopback listener (never on the TLS one): every accepted message, taking none. */
  watch?: InboxWatch;
  logger: Logger;
}

/** The listener for applications in other pods: HTTPS, and a bearer token on every request. */
export interface LocalApiTls {
  tls: TlsMaterial;
  token: TokenFile;
  limits?: BearerAuthOptions;
}

/**
 * The application's side of the runtime: send messages through the outbox and follow their
 * delivery, and (without spec.handler) receive inbound messages from a stream. Served on the
 * pod's loopback without authentication (spec.localApi.port), and, with `secure`, on an HTTPS
 * listener for applications in other pods that requires the bearer token (spec.localApi.service).
 * The same routes on both: one plugin per group (routes/outbox.ts, routes/conversations.ts,
 * routes/peers.ts, app-stream-routes.ts), their wire types in protocol/local-api.ts, from which
 * docs/local-api.openapi.yaml is generated (local-api-openapi.ts). `onRoute` sees every route
 * as it is added (the generator's way to read them).
 */
export function buildLocalApi(
  deps: LocalApiDeps,
  secure?: LocalApiTls,
  onRoute?: (route: RouteOptions) => void,
): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.agent.spec.inbox.maxMessageBytes,
    // Agent ids (URLs, percent-encoded) and message ids are path segments of up to 512 characters.
    routerOptions: { maxParamLength: 2048 },
    ...(secure
      ? {
          https: { cert: secure.tls.cert, key: secure.tls.key, minVersion: "TLSv1.2" as const },
          requestTimeout: 30_000,
        }
      : {}),
  }) as unknown as FastifyInstance;
  if (onRoute) app.addHook("onRoute", onRoute);
  jsonApi(app);
  if (secure) requireBearer(app, secure.token, secure.limits);

  app
    .withTypeProvider<ZodTypeProvider>()
    .get("/healthz", { schema: { summary: "Liveness of the local API", response: { 200: Health } } }, async () => ({
      status: "ok" as const,
    }));
  void app.register(outboxRoutes, deps);
  void app.register(conversationRoutes, { conversations: deps.conversations });
  void app.register(peerRoutes, { peers: deps.peers });
  void app.register(appStreamRoutes, { stream: deps.stream, handlerUrl: deps.agent.spec.handler?.url });
  if (deps.watch && !secure) void app.register(watchRoutes, { watch: deps.watch });
  return app;
}
