// The relay's /relay/subscribe: the caller's topic subscriptions and webhook, changed by POST
// and shown by GET.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { badRequest, invalidSignature } from "../../protocol/errors.ts";
import { pushUrlRefusal, type TargetPolicy } from "../../net/targets.ts";
import { SubscribeRequest, SubscribeResponse } from "../../protocol/relay-api.ts";
import type { Subscriptions } from "../subscriptions.ts";

/** POST /relay/subscribe changes the caller's topics and webhook; GET /relay/subscribe shows them. */
export const subscriptionRoutes: FastifyPluginAsyncZod<{
  subs: Pick<Subscriptions, "subscribe" | "unsubscribe" | "setPush" | "state">;
  targets: TargetPolicy;
}> = async (app, { subs, targets }) => {
  const state = (agent: string): SubscribeResponse => ({ status: "subscribed", ...subs.state(agent) });

  app.post(
    "/relay/subscribe",
    {
      schema: { body: SubscribeRequest, response: { 200: SubscribeResponse } },
      config: { operation: "subscribe", invalid: "invalid subscription" },
    },
    async (req) => {
      const { agent, body } = req;
      // One agent can never subscribe for another.
      for (const named of [body.subscribe?.agent, body.unsubscribe?.agent, body.push?.agent]) {
        if (named !== undefined && named !== agent)
          throw invalidSignature(`the request is signed by ${agent} but names agent ${named}`);
      }
      // A webhook must resolve to an address pushes may reach (each push checks again, on the
      // address it connects to); a name that does not resolve now is refused too.
      if (body.push?.webhook) await checkWebhook(targets, body.push.webhook);
      if (body.subscribe) await subs.subscribe(agent, body.subscribe.topics);
      if (body.unsubscribe) await subs.unsubscribe(agent, body.unsubscribe.topics);
      if (body.push) await subs.setPush(agent, body.push.webhook);
      return state(agent);
    },
  );

  app.get("/relay/subscribe", { schema: { response: { 200: SubscribeResponse } } }, async (req) => state(req.agent));
};

async function checkWebhook(targets: TargetPolicy, webhook: string): Promise<void> {
  const why = await pushUrlRefusal(targets, webhook);
  if (why) throw badRequest(`webhook ${why}`);
}
