// The relay's GET /relay/events (Server-Sent Events) and its WebSocket at /relay/ws (events.ts);
// open streams end when the relay closes.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { attachWebSocket, serveEvents, type StreamDeps } from "../events.ts";

export type EventRouteDeps = StreamDeps;

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
