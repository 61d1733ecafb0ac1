// JSON request bodies parsed as fastify parses them, with their bytes kept as they arrived, for
// the agent's inbox, which stores a message as it was sent.
import type { FastifyInstance, FastifyRequest } from "fastify";

const sent = new WeakMap<FastifyRequest, Buffer>();

/**
 * JSON bodies of this app (or plugin) are parsed as fastify parses them (empty, invalid and
 * prototype-poisoning bodies refused alike, within the body limit) and their bytes kept as they
 * arrived: rawJsonOf(req) gives them to a route that stores what was sent, byte for byte.
 */
export function keepRawJson(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    sent.set(req, body as Buffer);
    parse(req, body as unknown as string, done);
  });
}

/** The bytes of the request's JSON body as they arrived (keepRawJson); undefined for any other request. */
export function rawJsonOf(req: FastifyRequest): Buffer | undefined {
  return sent.get(req);
}
