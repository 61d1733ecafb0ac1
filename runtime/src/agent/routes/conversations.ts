// The local API's GET /conversations/{id}: the runtime's records of a conversation, one per peer.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { notFound } from "../../protocol/errors.ts";
import { Conversation, ConversationParam, ErrorAnswer } from "../../protocol/local-api.ts";
import type { Conversations } from "../conversations.ts";

export interface ConversationRouteDeps {
  conversations?: Pick<Conversations, "list">;
}

/** GET /conversations/{id} of the local API: what the runtime knows of a conversation, one record per peer. */
export const conversationRoutes: FastifyPluginAsyncZod<ConversationRouteDeps> = async (app, deps) => {
  app.get(
    "/conversations/:id",
    {
      schema: {
        summary: "What the runtime knows of a conversation, one record per peer",
        description: `Kept for every conversation the agent takes part in (inbound messages once verified,
outbound ones once queued), per (peer, conversation_id): participants, the last phase,
the last sequence number either way, the highest authentication level the peer reached
(no downgrade, IFP-5 section 2), the peer's temperature from spec.peers, the number of
messages that reused a sequence number (IFP-5 4.2; refused with 409 \`sequence_conflict\`
when spec.inbox.sequenceCheck is \`strict\`) and the last 64 messages. A record is
forgotten once its conversation has been quiet for 7 days. 404 when none is known; 400
for an id over 256 characters.
`,
        params: ConversationParam,
        response: { 200: Conversation, 400: ErrorAnswer, 404: ErrorAnswer },
      },
    },
    async (req) => {
      const records = (await deps.conversations?.list(req.params.id)) ?? [];
      if (!records.length) throw notFound(`no conversation ${req.params.id} is known`);
      return { conversation_id: req.params.id, peers: records };
    },
  );
};
