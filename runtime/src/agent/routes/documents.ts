// The agent's published documents on its HTTPS server: GET …/capabilities and …/identity under
// /.well-known/agent and /.well-known/iface, with ETags for conditional requests.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { etagMatches } from "../../protocol/documents.ts";
import { WELL_KNOWN, WELL_KNOWN_IFP, type Documents } from "../documents.ts";

const DOC_CACHE = "public, max-age=300, must-revalidate";
/**
 * An identity document built from the request's Host (no spec.baseUrl; the Host only when it is
 * one of the agent's own names, net/own-base.ts): a shared cache keeps it by Host or not at all.
 */
const HOST_DOC_CACHE = "private, max-age=300, must-revalidate";

/** The capability and identity documents (spec 2.2, 2.3), with ETags for conditional GETs. */
export const documentRoutes: FastifyPluginAsync<{ documents: Documents }> = async (app, { documents }) => {
  const serve = (
    req: FastifyRequest,
    reply: FastifyReply,
    served: { etag: string; doc: unknown },
    fromHost = false,
  ) => {
    reply.header("etag", served.etag).header("cache-control", fromHost ? HOST_DOC_CACHE : DOC_CACHE);
    if (fromHost) reply.header("vary", "Host");
    if (etagMatches(req.headers["if-none-match"], served.etag)) return reply.code(304).send();
    return reply.type("application/json; charset=utf-8").send(served.doc);
  };
  for (const base of [WELL_KNOWN, WELL_KNOWN_IFP]) {
    app.get(`${base}/capabilities`, (req, reply) => serve(req, reply, documents.capabilityDocument));
    app.get(`${base}/identity`, (req, reply) =>
      serve(req, reply, documents.identity(req.host), documents.identityFromHost),
    );
  }
};
