// The one way a JSON request body is read, for every app of the runtime (the inbox, the relay,
// the local API; the A2A face checks its own bodies the same way, a2a/routes.ts): parsed as
// fastify parses JSON (empty, invalid and prototype-poisoning bodies refused, within the body
// limit), then refused with 400 when it nests deeper than MAX_JSON_DEPTH — before a schema, a
// signature check or JSON.stringify walks it recursively and fails as a 500.
import type { FastifyInstance, FastifyRequest } from "fastify";
import { badRequest } from "../protocol/errors.ts";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "../protocol/signing.ts";

type Done = (err: Error | null, value?: unknown) => void;

/** A content-type parser of JSON bodies for `app`, taking the body's bytes (parseAs: "buffer"). */
export function jsonBodyParser(app: FastifyInstance): (req: FastifyRequest, body: Buffer, done: Done) => void {
  const parse = app.getDefaultJsonParser("error", "error");
  return (req, body, done) =>
    parse(req, body.toString("utf8"), (err, value) => {
      if (err) return done(err);
      if (nestedDeeperThan(value))
        return done(badRequest(`the body is nested deeper than ${MAX_JSON_DEPTH} levels of objects and arrays`));
      done(null, value);
    });
}

/** `app` (or a plugin's scope) reads application/json bodies with jsonBodyParser, `keep` seeing each body's bytes first. */
export function readJsonBodies(app: FastifyInstance, keep?: (req: FastifyRequest, body: Buffer) => void): void {
  const parse = jsonBodyParser(app);
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    keep?.(req, body as Buffer);
    parse(req, body as Buffer, done);
  });
}
