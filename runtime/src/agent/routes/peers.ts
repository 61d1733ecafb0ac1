import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { z } from "zod";
import { notFound } from "../../protocol/errors.ts";
import type { PeerCapabilitiesView } from "../peer-capabilities.ts";

export interface PeerRouteDeps {
  peers: { get(agent: string, opts?: { refresh?: boolean }): Promise<PeerCapabilitiesView | undefined> };
}

const Query = z.object({
  refresh: z
    .enum(["true", "false", "1", "0"], { message: "refresh is true or false" })
    .optional()
    .transform((v) => v === "true" || v === "1"),
});

/**
 * GET /peers/{agent}/capabilities[?refresh=true] of the local API: what the runtime knows of a
 * peer's capabilities (peer-capabilities.ts). The agent id is one path segment, percent-encoded
 * when it is a URL.
 */
export const peerRoutes: FastifyPluginAsyncZod<PeerRouteDeps> = async (app, { peers }) => {
  app.get(
    "/peers/:agent/capabilities",
    { schema: { params: z.object({ agent: z.string().min(1).max(512) }), querystring: Query } },
    async (req) => {
      const entry = await peers.get(req.params.agent, { refresh: req.query.refresh });
      if (!entry)
        throw notFound(
          `no capability document known for ${req.params.agent}: none at its endpoint, and none from a greeting or an announcement`,
        );
      return entry;
    },
  );
};
