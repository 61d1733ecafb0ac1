// The relay's /relay/messages: the caller's waiting copies paged through, and acknowledged one
// by one or in a batch.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { notFound } from "../../protocol/errors.ts";
import { AckRequest, AckResponse, MessageIdPath, MessageList, PageQuery } from "../../protocol/relay-api.ts";
import type { RelayAuthenticator } from "../auth.ts";
import { copySpan, type Mailboxes } from "../mailbox.ts";
import { SPAN_ATTRIBUTES, tracingEnabled } from "../../telemetry/tracing.ts";

/**
 * The caller's mailbox: GET /relay/messages pages through the waiting copies (reading removes
 * nothing); DELETE /relay/messages/{id} and POST /relay/messages/ack acknowledge them. Each
 * acknowledgement counts one request against the per-agent limit: a DELETE is one signed
 * request, a batch of n ids costs what n DELETEs cost.
 */
export const messageRoutes: FastifyPluginAsyncZod<{
  mailboxes: Pick<Mailboxes, "list" | "ack" | "ackMany">;
  limitAgent: RelayAuthenticator["limitAgent"];
}> = async (app, { mailboxes, limitAgent }) => {
  app.get(
    "/relay/messages",
    { schema: { querystring: PageQuery, response: { 200: MessageList } }, config: { operation: "retrieve" } },
    async (req, reply) => {
      const { limit, after } = req.query;
      const copies = await mailboxes.list(req.agent, after, limit);
      // One span per copy handed out, a child of the publish that stored it.
      if (tracingEnabled()) {
        const startTime = Date.now() - reply.elapsedTime;
        for (const c of copies)
          copySpan("ifp.relay.retrieve", c, "pull", { startTime }).setAttribute(SPAN_ATTRIBUTES.status, 200).end();
      }
      const last = copies.at(-1);
      if (last) reply.header("ifp-next-after", String(last.seq));
      if (last && copies.length === limit)
        reply.header("link", `</relay/messages?limit=${limit}&after=${last.seq}>; rel="next"`);
      // The copies' texts as stored, joined: no message is parsed or serialised again on the way out.
      // (A string is sent as it is: the schema above describes it, nothing serialises it.)
      return reply.type("application/json; charset=utf-8").send(`[${copies.map((c) => c.text).join(",")}]` as never);
    },
  );

  app.delete(
    "/relay/messages/*",
    { schema: { params: MessageIdPath }, config: { operation: "ack" } },
    async (req, reply) => {
      const id = req.params["*"];
      if (!id || id.length > 256 || !(await mailboxes.ack(req.agent, id)))
        throw notFound(`you have no waiting message ${id}`);
      return reply.code(204).send();
    },
  );

  // Many acknowledgements in one signed request, for agents working through a backlog.
  app.post(
    "/relay/messages/ack",
    {
      schema: { body: AckRequest, response: { 200: AckResponse } },
      config: { operation: "ack", invalid: "invalid acknowledgement" },
    },
    // The signed request took one; each further id one more, before anything is removed (429 past the limit).
    async (req) => mailboxes.ackMany(req.agent, req.body.message_ids, (n) => n > 1 && limitAgent(req.agent, n - 1)),
  );
};
