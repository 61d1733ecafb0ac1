import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { z } from "zod";
import { notFound, rateLimited } from "../protocol/errors.ts";
import { appCursor, appEventFrame, deliveryJson, type AppStream } from "./app-stream.ts";

export interface AppStreamRouteDeps {
  /** Undefined when spec.handler is set: messages then go to the handler, not to a stream. */
  stream: AppStream | undefined;
  /** Where messages go instead, for the answer when there is no stream. */
  handlerUrl?: string;
}

const MessageIdParam = z.object({ id: z.string().min(1).max(256) });
const AckBody = z.object({ message_ids: z.array(z.string().min(1).max(256)).min(1).max(1000) });
// A limit or wait out of range is brought into it rather than refused, as for the dead letters.
const Limit = z
  .string()
  .optional()
  .transform((v) => Math.min(100, Math.max(1, Math.trunc(Number(v ?? 10)) || 10)));
const WaitSeconds = z
  .string()
  .optional()
  .transform((v) => Math.min(30, Math.max(1, Math.trunc(Number(v ?? 1)) || 1)));

/**
 * The application's inbound messages when it runs no HTTP server (spec.handler unset):
 * GET /messages/stream (Server-Sent Events), GET /messages (pull), and the acknowledgements
 * POST /messages/{id}/ack and POST /messages/ack. OpenAPI: docs/local-api.openapi.yaml.
 */
export const appStreamRoutes: FastifyPluginAsyncZod<AppStreamRouteDeps> = async (app, deps) => {
  const openStreams = new Set<() => void>();
  app.addHook("preClose", async () => {
    for (const end of openStreams) end();
  });
  const need = (): AppStream => {
    if (!deps.stream)
      throw notFound(
        `there is no message stream: spec.handler is set, and each message is POSTed to ${deps.handlerUrl ?? "the handler"}`,
      );
    return deps.stream;
  };

  app.get(
    "/messages/stream",
    { schema: { querystring: z.object({ after: z.string().optional() }) } },
    async (req, reply) => {
      const stream = need();
      if (stream.full) throw rateLimited(5, "too many open message streams");
      const cursor = appCursor(req.headers["last-event-id"] ?? req.query.after);
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        connection: "keep-alive",
        "x-accel-buffering": "no",
      });
      res.write(": ifp agent messages\n\n");
      const close = stream.open(
        cursor,
        (d) => res.write(appEventFrame(d)),
        () => res.write(": keep-alive\n\n"),
      );
      const end = () => {
        close();
        res.end();
      };
      openStreams.add(end);
      res.on("close", () => {
        openStreams.delete(end);
        close();
      });
    },
  );

  app.get(
    "/messages",
    { schema: { querystring: z.object({ limit: Limit, wait: WaitSeconds }) } },
    async (req, reply) => {
      const got = await need().pull(req.query.limit, req.query.wait * 1000);
      return reply.type("application/json; charset=utf-8").send(`{"messages":[${got.map(deliveryJson).join(",")}]}`);
    },
  );

  app.post(
    "/messages/:id/ack",
    { schema: { params: MessageIdParam }, config: { invalid: "invalid message id" } },
    async (req, reply) => {
      if (!(await need().ack(req.params.id)))
        throw notFound(
          `no unacknowledged message ${req.params.id} was handed out here (acknowledged already, or handed out again since)`,
        );
      return reply.code(204).send();
    },
  );

  app.post(
    "/messages/ack",
    { schema: { body: AckBody }, config: { invalid: 'send {"message_ids": ["…"]}' } },
    async (req) => {
      const stream = need();
      const ids = [...new Set(req.body.message_ids)];
      const done = await Promise.all(ids.map((id) => stream.ack(id)));
      return { acknowledged: ids.filter((_, i) => done[i]), not_found: ids.filter((_, i) => !done[i]) };
    },
  );
};
