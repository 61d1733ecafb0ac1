import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { invalidSignature } from "../../protocol/errors.ts";
import { SubscribeRequest, SubscribeResponse } from "../../protocol/relay-api.ts";
import type { Subscriptions } from "../subscriptions.ts";

/** POST /relay/subscribe changes the caller's topics and webhook; GET /relay/subscribe shows them. */
export const subscriptionRoutes: FastifyPluginAsyncZod<{ subs: Pick<Subscriptions, "subscribe" | "unsubscribe" | "setPush" | "state"> }> = async (app, { subs }) => {
  const state = (agent: string): SubscribeResponse => ({ status: "subscribed", ...subs.state(agent) });

  app.post(
    "/relay/subscribe",
    { schema: { body: SubscribeRequest, response: { 200: SubscribeResponse } }, config: { operation: "subscribe", invalid: "invalid subscription" } },
    async (req) => {
      const { agent, body } = req;
      // One agent can never subscribe for another.
      for (const named of [body.subscribe?.agent, body.unsubscribe?.agent, body.push?.agent]) {
        if (named !== undefined && named !== agent) throw invalidSignature(`the request is signed by ${agent} but names agent ${named}`);
      }
      if (body.subscribe) await subs.subscribe(agent, body.subscribe.topics);
      if (body.unsubscribe) await subs.unsubscribe(agent, body.unsubscribe.topics);
      if (body.push) await subs.setPush(agent, body.push.webhook);
      return state(agent);
    },
  );

  app.get("/relay/subscribe", { schema: { response: { 200: SubscribeResponse } } }, async (req) => state(req.agent));
};
