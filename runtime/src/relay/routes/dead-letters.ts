// The relay's GET and DELETE /relay/dead-letters: the caller's copies whose push was given up.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { notFound } from "../../protocol/errors.ts";
import { DeadLetterList, MessageIdPath, PageQuery } from "../../protocol/relay-api.ts";
import type { Mailboxes } from "../mailbox.ts";

/** The caller's dead letters: copies whose webhook push was given up. */
export const deadLetterRoutes: FastifyPluginAsyncZod<{
  mailboxes: Pick<Mailboxes, "deadLetters" | "removeDeadLetter">;
}> = async (app, { mailboxes }) => {
  app.get(
    "/relay/dead-letters",
    { schema: { querystring: PageQuery, response: { 200: DeadLetterList } }, config: { operation: "dead-letters" } },
    async (req, reply) => {
      const { limit, after } = req.query;
      const letters = await mailboxes.deadLetters(req.agent, after, limit);
      const last = letters.at(-1);
      if (last) reply.header("ifp-next-after", String(last.seq));
      return { dead_letters: letters.map(({ seq: _seq, ...d }) => d) };
    },
  );

  app.delete(
    "/relay/dead-letters/*",
    { schema: { params: MessageIdPath }, config: { operation: "dead-letters" } },
    async (req, reply) => {
      const id = req.params["*"];
      if (!id || id.length > 256 || !(await mailboxes.removeDeadLetter(req.agent, id)))
        throw notFound(`you have no dead letter ${id}`);
      return reply.code(204).send();
    },
  );
};
