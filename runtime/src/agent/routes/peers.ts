// The local API's GET /peers/{agent}/capabilities: what the runtime knows of a peer's
// capabilities (peer-capabilities.ts), refreshed on request.
import type { FastifyPluginAsyncZod } from "@fastify/type-provider-zod";
import { notFound } from "../../protocol/errors.ts";
import { ErrorAnswer, PeerCapabilitiesView, PeerParam, PeerQuery } from "../../protocol/local-api.ts";

export interface PeerRouteDeps {
  peers: { get(agent: string, opts?: { refresh?: boolean }): Promise<PeerCapabilitiesView | undefined> };
}

/**
 * GET /peers/{agent}/capabilities[?refresh=true] of the local API: what the runtime knows of a
 * peer's capabilities (peer-capabilities.ts). The agent id is one path segment, percent-encoded
 * when it is a URL.
 */
export const peerRoutes: FastifyPluginAsyncZod<PeerRouteDeps> = async (app, { peers }) => {
  app.get(
    "/peers/:agent/capabilities",
    {
      schema: {
        summary: "What the runtime knows of a peer's capabilities (endpoint, announcement, greeting)",
        description: `The baseline is the capability document at the peer's endpoint (endpoint discovery, spec 4.3:
fetched on first use, kept as its ETag and Cache-Control max-age say) or, when newer, the
last \`capabilities.update\` announcement received on a followed topic. A greeting's
capability part is merged over it, capability by capability (then \`source: greeting\`, and
\`baseline\` says what is under it). 404 when none of them is known. \`agent\` is one
percent-encoded path segment (400 over 512 characters). \`refresh=true\` fetches the endpoint
document again whatever the cache says.
`,
        params: PeerParam,
        querystring: PeerQuery,
        response: { 200: PeerCapabilitiesView, 400: ErrorAnswer, 404: ErrorAnswer, 503: ErrorAnswer },
      },
    },
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
