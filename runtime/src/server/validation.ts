// Request validation with zod: schemas whose routes get the document exactly as it was sent (an
// IFP-4 message checked first by a validator ajv compiles from the same zod schema), the 400
// invalid_format that names the fields a request failed, and the route schema's summary and
// description that the OpenAPI generator reads.
import {
  hasZodFastifySchemaValidationErrors,
  validatorCompiler as zodValidatorCompiler,
} from "@fastify/type-provider-zod";
import { Ajv2020 } from "ajv/dist/2020.js";
import type { FastifyError } from "fastify";
import { z } from "zod";
import { badRequest, type ProtocolError } from "../protocol/errors.ts";
import { encryptedBodyIssues, Message, MessageShape } from "../protocol/message.ts";
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
 * parsed copy would reorder their keys). `compiled`, when given, is true only for documents
 * `schema` accepts (compiledCheck): such a document is taken without zod (validatorCompiler,
 * acceptsAsSent), and zod judges, and words the refusal of, every other.
 */
export function asSent<T extends z.ZodType>(schema: T, compiled?: (value: unknown) => boolean) {
  const sent = z
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
  if (compiled)
    compiledChecks.set(sent, (value) => {
      if (canonicalProblem(value) !== undefined || !compiled(value)) return false;
      markCanonical(value);
      return true;
    });
  return sent;
}

/** The compiled checks of the schemas asSent made: true only for a document the schema accepts as sent. */
const compiledChecks = new WeakMap<object, (value: unknown) => boolean>();

/** Whether the compiled check of `schema` (an asSent schema given one) takes `value` as it is; false says nothing. */
export function acceptsAsSent(schema: object, value: unknown): boolean {
  return compiledChecks.get(schema)?.(value) ?? false;
}

/**
 * The routes' validator: zod's (@fastify/type-provider-zod), behind the compiled check of an
 * asSent schema given one — a body it takes is the route's as it came, any other zod's to
 * accept or to refuse with its issues.
 */
export const validatorCompiler: typeof zodValidatorCompiler = (route) => {
  const zod = zodValidatorCompiler(route);
  const compiled = compiledChecks.get(route.schema as object);
  return compiled ? (data) => (compiled(data) ? { value: data } : zod(data)) : zod;
};

/**
 * A check ajv compiles, at its first call, from the JSON Schema zod derives of `shape`
 * (z.toJSONSchema): true only for a document `shape` accepts. JSON Schema has no refinements,
 * so `shape` has none, and `refined` is what a refinement of the schema a route uses asks
 * beyond it. Lengths count code points in both; formats are left to the patterns zod writes
 * beside them (an ISO date-time's).
 */
export function compiledCheck<T extends z.ZodType>(
  shape: T,
  refined: (value: z.output<T>) => boolean = () => true,
): (value: unknown) => boolean {
  let validate: ((value: unknown) => boolean) | undefined;
  return (value) => {
    validate ??= new Ajv2020({ formats: { "date-time": true } }).compile(
      z.toJSONSchema(shape, { io: "input", unrepresentable: "throw" }),
    );
    return validate(value) && refined(value as z.output<T>);
  };
}

/** An IFP-4 message as a route's body, as it was sent: Message, checked first by a validator compiled from it. */
export const SentMessage = asSent(
  Message,
  compiledCheck(MessageShape, (m) => encryptedBodyIssues(m).length === 0),
);

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
