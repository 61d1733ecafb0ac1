// The local API's routes for an application that runs no HTTP server (spec.handler unset):
// inbound messages as Server-Sent Events or by pull, and their acknowledgements, served from
// AppStream (app-stream.ts).
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import type { FastifyReply } from "fastify";
import { notFound, rateLimited } from "../protocol/errors.ts";
import {
  AckRequest,
  AckResult,
  ErrorAnswer,
  MessageIdParam,
  PullQuery,
  Pulled,
  StreamQuery,
} from "../protocol/local-api.ts";
import { appCursor, appEventFrame, deliveryJson, type AppStream } from "./app-stream.ts";

export interface AppStreamRouteDeps {
  /** Undefined when spec.handler is set: messages then go to the handler, not to a stream. */
  stream: AppStream | undefined;
  /** Where messages go instead, for the answer when there is no stream. */
  handlerUrl?: string;
}

const STREAM = `One event per message, in the order the inbox accepted them: \`id:\` is the inbox sequence,
\`event: message\`, \`data:\` an InboundDelivery (one line). Comments (\`: keep-alive\`) come
every 15 s. At least once: a message stays with this reader until it is acknowledged
(POST /messages/{message_id}/ack); when the stream closes, everything the reader holds
unacknowledged is handed out again at once, first, to the next reader (delivery_attempt
counts up). A reader holds at most 100 unacknowledged messages; the stream pauses there.
A replica serves at most 32 open streams (429 past that).

Resume: on reconnect send \`Last-Event-ID\` (or \`?after=\`) with the last id received. The
messages up to it that come back unacknowledged are then held for this reader again, so
that it can acknowledge them, but not sent twice; a reader that lost what it had received
reconnects without Last-Event-ID and gets them all again.

Several readers (several pods or processes of the application, or several replicas of
the agent) compete: each message goes to one of them. An acknowledgement must reach the
agent replica whose stream handed the message out; the Service keeps each client on one
replica (ClientIP session affinity), and the loopback is always the right one. With
spec.handler set there is no stream: 404.
`;

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
    {
      schema: {
        summary: "Accepted inbound messages as Server-Sent Events (only without spec.handler)",
        description: STREAM,
        querystring: StreamQuery,
        response: {
          200: { description: "The event stream", content: { "text/event-stream": { schema: { type: "string" } } } },
          404: ErrorAnswer,
          429: ErrorAnswer,
        },
      },
    },
    async (req, reply) => {
      const stream = need();
      if (stream.full) throw rateLimited(5, "too many open message streams");
      serveEvents(stream, appCursor(req.headers["last-event-id"] ?? req.query.after), reply, openStreams);
    },
  );

  app.get(
    "/messages",
    {
      schema: {
        summary: "Pull up to `limit` inbound messages (only without spec.handler)",
        description: `The same messages as the stream, for applications that poll. Waits up to \`wait\` seconds
(1 to 30, default 1) when fewer are there; \`limit\` is 1 to 100, default 10. Each message
returned must be acknowledged within 60 s, or it is handed out again. Out-of-range values are
brought into range. Oldest first; each message byte for byte as it was sent.
`,
        querystring: PullQuery,
        response: { 200: Pulled, 404: ErrorAnswer, 503: ErrorAnswer },
      },
    },
    async (req, reply) => {
      const got = await need().pull(req.query.limit, req.query.wait * 1000);
      // Pulled, written as JSON text around the stored messages (never parsed and written again).
      const text = `{"messages":[${got.map(deliveryJson).join(",")}]}`;
      return reply.type("application/json; charset=utf-8").send(text as never);
    },
  );

  app.post(
    "/messages/:id/ack",
    {
      schema: {
        summary: "Acknowledge one inbound message; it is not handed out again",
        description: `204 once acknowledged. 404 when no unacknowledged message of that id was handed out by this
replica: it was acknowledged already, never existed, or its stream closed and it was handed
out again (acknowledge the new delivery).
`,
        params: MessageIdParam,
        response: { 204: { description: "Acknowledged" }, 400: ErrorAnswer, 404: ErrorAnswer, 503: ErrorAnswer },
      },
      config: { invalid: "invalid message id" },
    },
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
    {
      schema: {
        summary: "Acknowledge several inbound messages",
        description: "Which were acknowledged and which were not held here (see the single acknowledgement's 404).",
        body: AckRequest,
        response: { 200: AckResult, 400: ErrorAnswer },
      },
      config: { invalid: 'send {"message_ids": ["…"]}' },
    },
    async (req) => {
      const stream = need();
      const ids = [...new Set(req.body.message_ids)];
      const done = await Promise.all(ids.map((id) => stream.ack(id)));
      return { acknowledged: ids.filter((_, i) => done[i]), not_found: ids.filter((_, i) => !done[i]) };
    },
  );
};

/** The stream's events from `cursor` on, written to the hijacked reply until either side ends it. */
function serveEvents(
  stream: AppStream,
  cursor: ReturnType<typeof appCursor>,
  reply: FastifyReply,
  openStreams: Set<() => void>,
): void {
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
}
