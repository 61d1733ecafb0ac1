import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import type { Logger } from "pino";
import type { RuntimeMetrics } from "../../server/metrics.ts";
import type { RelayAuthenticator } from "../auth.ts";
import { attachWebSocket, serveEvents } from "../events.ts";
import type { RelayIntake } from "../intake.ts";
import type { Mailboxes } from "../mailbox.ts";
import type { StreamSlots } from "../../server/stream-slots.ts";

export interface EventRouteDeps {
  mailboxes: Mailboxes;
  metrics: RuntimeMetrics;
  log: Logger;
  /** The WebSocket upgrade bypasses the routes' hooks and authenticates itself. */
  authenticate: RelayAuthenticator;
  /** Open SSE and WebSocket streams, per agent and overall (spec.limits). */
  slots: StreamSlots;
  /** Publish frames on the WebSocket go where POST /relay/publish goes. */
  intake: RelayIntake;
  /** The largest WebSocket frame. */
  maxPayload: number;
}

/**
 * The caller's mailbox as it fills: GET /relay/events (Server-Sent Events) and the WebSocket
 * at /relay/ws. Open streams end when the relay closes; the server would otherwise wait for them.
 */
export const eventRoutes: FastifyPluginAsyncZod<EventRouteDeps> = async (app, deps) => {
  const openStreams = new Set<() => void>();
  app.addHook("preClose", async () => {
    for (const end of openStreams) end();
  });

  app.get("/relay/events", { config: { operation: "events" } }, async (req, reply) => {
    // Past the caps: refused before the stream (and its JetStream consumer) exists.
    const release = deps.slots.acquire(req.agent);
    // A hijacked reply skips onResponse: the stream is counted here, refusals by the hook.
    deps.metrics.relay.inc({ operation: "events", result: "ok" });
    reply.hijack();
    const end = serveEvents(reply.raw, req.raw, req.agent, deps.mailboxes, deps.metrics, deps.log);
    openStreams.add(end);
    deps.metrics.relayConnections.inc({ transport: "sse" });
    reply.raw.on("close", () => {
      release();
      openStreams.delete(end);
      deps.metrics.relayConnections.dec({ transport: "sse" });
    });
  });

  attachWebSocket(app, deps);
};
