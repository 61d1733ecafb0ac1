// Request validation with zod: schemas whose routes get the document exactly as it was sent, the
// 400 invalid_format that names the fields a request failed, and the route schema's summary and
// description that the OpenAPI generator reads.
import { hasZodFastifySchemaValidationErrors } from "@fastify/type-provider-zod";
import type { FastifyError } from "fastify";
import { z } from "zod";
import { badRequest, type ProtocolError } from "../protocol/errors.ts";
import { canonicalProblem, markCanonical } from "../protocol/signing.ts";
import { describeIssues } from "../contract/issues.ts";

declare module "fastify" {
  interface FastifySchema {
    /** What the route does, for the OpenAPI document generated from the routes. */
    summary?: string;
    description?: string;
    /** The request body as the OpenAPI document describes it, where the route checks more loosely and says what is wrong itself. */
    documentedBody?: unknown;
  }
  interface FastifyContextConfig {
    /** How the route describes a request its schemas refuse: "invalid subscription: …". */
    invalid?: string;
  }
}

/**
 * `schema`, but the route gets the document exactly as it was sent: same key order, unknown
 * fields kept. For messages, which are stored and handed on as their sender wrote them (a
 * parsed copy would reorder their keys).
 */
export function asSent<T extends z.ZodType>(schema: T) {
  return z
    .unknown()
    .superRefine((value, ctx) => {
      // What cannot be canonicalized cannot be verified, and what is nested without bound
      // cannot be stored: 400 here, before any signature, store or handler sees it.
      const problem = canonicalProblem(value);
      if (problem) return void ctx.addIssue({ code: "custom", message: problem, path: [] });
      markCanonical(value);
      const parsed = schema.safeParse(value);
      if (!parsed.success) for (const issue of parsed.error.issues) ctx.addIssue({ ...issue });
    })
    .transform((value) => value as z.output<T>);
}

const PARTS: Record<string, string> = { body: "body", querystring: "query", params: "path", headers: "headers" };

/**
 * A request refused by a route's zod schemas, as the spec's 400 `invalid_format` naming the
 * failing fields (`headers.date: Invalid ISO datetime`); undefined for any other error.
 */
export function invalidRequest(err: unknown, title: string | undefined): ProtocolError | undefined {
  if (!hasZodFastifySchemaValidationErrors(err)) return undefined;
  const part = (err as FastifyError).validationContext ?? "request";
  const issues = err.validation.map((v) => ({
    path: v.instancePath.split("/").filter(Boolean),
    message: v.message ?? "invalid",
  }));
  return badRequest(
    `${title ?? `invalid ${PARTS[part] ?? part}`}: ${describeIssues({ issues } as Pick<z.ZodError, "issues"> as z.ZodError)}`,
  );
}
