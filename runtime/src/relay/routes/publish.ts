// The relay's POST /relay/publish and /relay/publish/batch, with `?recipient=` narrowing a
// publish to some of its direct recipients.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { z } from "zod";
import { PublishBatchRequest, PublishBatchResponse, PublishResponse } from "../../protocol/relay-api.ts";
import { SentMessage } from "../../server/validation.ts";
import { messageLog, namedOnFailure } from "../../telemetry/logs.ts";
import { tracingEnabled } from "../../telemetry/tracing.ts";
import type { RelayAuthenticator } from "../auth.ts";
import type { PublishIntake } from "../intake.ts";

export interface PublishRouteDeps {
  intake: PublishIntake;
  /** The per-agent limit: a batch of n messages counts n requests (its signed request already took one). */
  limitAgent: RelayAuthenticator["limitAgent"];
  /** The body limit of a batch (a lone publish has the server's, spec.limits.maxMessageBytes). */
  batchBodyLimit: number;
}

/** `?recipient=` (repeatable): narrows a publish to some of the message's direct recipients. */
const PublishQuery = z.object({ recipient: z.union([z.string(), z.array(z.string()).max(100)]).optional() });
const recipientsOf = (q: { recipient?: string | string[] }): string[] | undefined =>
  q.recipient === undefined ? undefined : [q.recipient].flat();

/** POST /relay/publish: one copy per recipient and topic subscriber, stored before the 202; and its batch. */
export const publishRoutes: FastifyPluginAsyncZod<PublishRouteDeps> = async (app, deps) => {
  const startOf = (elapsedMs: number) => (tracingEnabled() ? Date.now() - elapsedMs : undefined);
  app.post(
    "/relay/publish",
    {
      schema: { body: SentMessage, querystring: PublishQuery, response: { 202: PublishResponse } },
      config: { operation: "publish", invalid: "the message does not follow IFP-4", strangers: true },
    },
    async (req, reply) => {
      const answer = await namedOnFailure(
        req,
        () => messageLog(req.body, req.agent),
        () =>
          deps.intake.publish(req.body, req.agent, {
            recipients: recipientsOf(req.query),
            log: req.log,
            startTime: startOf(reply.elapsedTime),
            address: req.clientAddress,
          }),
      );
      return reply.code(202).send(answer);
    },
  );

  // Many messages in one signed request: each is checked and stored as a lone publish would
  // be and gets its own result; the answer comes once every accepted one is stored.
  app.post(
    "/relay/publish/batch",
    {
      bodyLimit: deps.batchBodyLimit,
      schema: { body: PublishBatchRequest, querystring: PublishQuery, response: { 200: PublishBatchResponse } },
      config: { operation: "publish", invalid: "invalid batch", strangers: true },
    },
    async (req, reply) => {
      const { messages } = req.body;
      if (messages.length > 1) deps.limitAgent(req.agent, messages.length - 1);
      const opts = {
        recipients: recipientsOf(req.query),
        log: req.log,
        startTime: startOf(reply.elapsedTime),
        address: req.clientAddress,
      };
      return { results: await Promise.all(messages.map((m) => deps.intake.publishCarried(m, req.agent, opts))) };
    },
  );
};
