// JSON request bodies parsed as fastify parses them, with their bytes kept as they arrived, for
// the agent's inbox, which stores a message as it was sent.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { readJsonBodies } from "./json-body.ts";

const sent = new WeakMap<FastifyRequest, Buffer>();

/**
 * JSON bodies of this app (or plugin) are parsed as every JSON body is (json-body.ts) and their
 * bytes kept as they arrived: rawJsonOf(req) gives them to a route that stores what was sent,
 * byte for byte.
 */
export function keepRawJson(app: FastifyInstance): void {
  readJsonBodies(app, (req, body) => sent.set(req, body));
}

/** The bytes of the request's JSON body as they arrived (keepRawJson); undefined for any other request. */
export function rawJsonOf(req: FastifyRequest): Buffer | undefined {
  return sent.get(req);
}
