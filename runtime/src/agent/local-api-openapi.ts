// The generator of docs/local-api.openapi.yaml from the local API's routes and their zod schemas
// (`npm run gen` runs it; local-api-openapi.test.ts checks the committed file against it).
import type { RouteOptions } from "fastify";
import pino from "pino";
import { stringify } from "yaml";
import { z } from "zod";
import { ErrorAnswer } from "../protocol/local-api.ts";
import { Agent } from "../resources/agent.ts";
import { buildLocalApi, type LocalApiDeps } from "./local-api.ts";

/**
 * docs/local-api.openapi.yaml, generated from the local API's routes: their zod schemas
 * (protocol/local-api.ts) and the summary and description each route carries. `npm run gen`
 * writes it; a test fails when the committed file drifts (local-api-openapi.test.ts). What no
 * route says (where the API listens, its security, the webhooks the runtime calls) is below.
 */

const DESCRIPTION = `The two directions between an agent's runtime and the user's application.

Where it listens. On the pod's loopback, http://127.0.0.1:<spec.localApi.port> (default
8081), without authentication: for a sidecar in the agent's pod. With
spec.localApi.service.enabled, also over HTTPS on spec.localApi.service.port (default 9443)
behind the ClusterIP Service \`<agent>-local-api\`, for applications in other pods: the
serving certificate is the agent's own (it names \`<agent>-local-api.<ns>.svc\`), and every
request needs \`Authorization: Bearer <token>\` with the token of the Secret
\`<agent>-local-api\` (key \`token\`). A missing or wrong token is answered 401 (\`unauthorized\`);
a client address that has sent 20 wrong tokens within a minute gets 429 (\`rate_limited\`, with
Retry-After) for every request, the right token too, until its allowance refills. The
runtime re-reads the token file within a second of a change. Both listeners serve the same
routes but one: GET /messages/watch, which follows everything the inbox accepts, is served on
the loopback only (the token sends as the agent; it does not read the agent's inbox).

Outbound — the application queues messages; the runtime fills the headers, signs, stores
durably and delivers them.

Inbound — with spec.handler set, every accepted message is POSTed to spec.handler.url (see
\`webhooks.message\`). Without spec.handler, the application reads them from this API instead:
GET /messages/stream (Server-Sent Events) or GET /messages (pull), and acknowledges each one
once handled. Failures of outbound messages are reported to spec.notify.url (see
\`webhooks.notification\`).

A typed TypeScript client ships in the package: \`import { LocalApiClient } from "ifp-operator/client"\`.
`;

/** Where the API listens, who may call it, and what the runtime POSTs to the application (webhooks). */
const FRAME = {
  servers: [
    {
      url: "http://127.0.0.1:8081",
      description: "loopback, in the agent's pod, no token",
    },
    {
      url: "https://{agent}-local-api.{namespace}.svc:9443",
      description: "the Service of spec.localApi.service, bearer token required",
      variables: {
        agent: {
          default: "alice",
        },
        namespace: {
          default: "default",
        },
      },
    },
  ],
  security: [
    {},
    {
      bearer: [],
    },
  ],
  webhooks: {
    message: {
      post: {
        summary: "An accepted inbound message, POSTed to spec.handler.url",
        description:
          "At least once: acknowledged on any 2xx, otherwise retried with exponential backoff\n(1 s doubling to 5 min, with jitter) and dead-lettered after spec.handler.deadLetterAfter.\nDrop a repeat by its Idempotency-Key. Messages with protocol problems or unmet capability\nconditions are answered by the runtime with an error-phase message and not delivered.\n",
        parameters: [
          {
            name: "Idempotency-Key",
            in: "header",
            required: true,
            schema: {
              type: "string",
            },
            description: "<sender> <message_id>, the sender prefixed unsigned: for an accepted unsigned message",
          },
          {
            name: "Ifp-Message-Id",
            in: "header",
            required: true,
            schema: {
              type: "string",
            },
          },
          {
            name: "Ifp-Sender",
            in: "header",
            required: true,
            schema: {
              type: "string",
            },
            description: "the verified signer",
          },
          {
            name: "Ifp-Auth-Level",
            in: "header",
            required: true,
            schema: {
              type: "string",
              enum: ["-1", "0", "1", "2", "3"],
            },
            description:
              "IFP-5 authentication level (docs/identity.md): 0 introduction token, 1 a did:key no peer entry names or a key looked up at a configured url, 2 key in spec.peers (a did:key named there included) or in the identity document of an https agent id, 3 given by no key source; -1 unsigned (only with requireSignature: false)",
          },
          {
            name: "Ifp-Auth-Source",
            in: "header",
            required: true,
            schema: {
              type: "string",
              enum: ["none", "introduction", "identity-document", "peers", "did:key"],
            },
            description: "where the key that established the level came from",
          },
          {
            name: "Ifp-Encrypted",
            in: "header",
            required: false,
            schema: {
              type: "string",
            },
            description:
              "the scheme the body was encrypted under end to end (the runtime decrypted it); absent for a clear message",
          },
          {
            name: "Ifp-Delivery-Attempt",
            in: "header",
            required: true,
            schema: {
              type: "string",
            },
          },
          {
            name: "Ifp-Handoff-Signature",
            in: "header",
            required: false,
            schema: {
              type: "string",
              pattern: "^t=[0-9]+,v2=[0-9a-f]{64}$",
            },
            description:
              "HMAC-SHA256 with the hand-off secret over the timestamp, Idempotency-Key and every Ifp- header above, and the body (docs/agent.md#hand-off-signature); believe the headers only when it verifies. Absent when the runtime has no hand-off secret",
          },
        ],
        requestBody: {
          content: {
            "application/json": {
              schema: {
                $ref: "#/components/schemas/Message",
              },
            },
          },
        },
        responses: {
          "2XX": {
            description: "Taken",
          },
        },
      },
    },
    notification: {
      post: {
        summary: "A message could not be delivered, POSTed to spec.notify.url",
        requestBody: {
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["event", "agent_id", "message_id", "reason", "at"],
                properties: {
                  event: {
                    enum: ["undeliverable", "failed", "dead_letter"],
                  },
                  agent_id: {
                    type: "string",
                  },
                  message_id: {
                    type: "string",
                  },
                  recipient: {
                    type: "string",
                  },
                  reason: {
                    type: "string",
                  },
                  attempts: {
                    type: "integer",
                  },
                  queued_at: {
                    type: "string",
                    format: "date-time",
                  },
                  at: {
                    type: "string",
                    format: "date-time",
                  },
                },
              },
            },
          },
        },
        responses: {
          "2XX": {
            description: "Received",
          },
        },
      },
    },
  },
  securitySchemes: {
    bearer: {
      type: "http",
      scheme: "bearer",
      description: "The token of the Secret `<agent>-local-api` (key `token`); on the HTTPS listener only",
    },
  },
};

type Schema = Record<string, unknown>;

/** A zod schema as JSON Schema 2020-12, its named parts ($defs, `id`) moved to `components`. */
function jsonSchema(schema: z.ZodType, io: "input" | "output", components: Record<string, Schema>): Schema {
  const converted = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as Schema;
  const { $schema: _s, $defs, id, ...rest } = converted as Schema & { $defs?: Record<string, Schema>; id?: string };
  for (const [name, def] of Object.entries($defs ?? {})) components[name] = refs(def);
  if (typeof id === "string") {
    components[id] = refs(rest);
    return { $ref: `#/components/schemas/${id}` };
  }
  return refs(rest);
}

/** $defs references as components references. */
function refs<T>(value: T): T {
  return JSON.parse(JSON.stringify(value).replaceAll('"#/$defs/', '"#/components/schemas/')) as T;
}

const isZod = (v: unknown): v is z.ZodType => v instanceof z.ZodType;

const RESPONSE_TEXT: Record<string, string> = {
  "200": "OK",
  "202": "Accepted",
  "204": "No content",
};

function parameters(schema: unknown, where: "path" | "query", components: Record<string, Schema>): Schema[] {
  if (!isZod(schema)) return [];
  const s = jsonSchema(schema, "input", components) as { properties?: Record<string, Schema>; required?: string[] };
  return Object.entries(s.properties ?? {}).map(([name, p]) => {
    const { description, ...rest } = p;
    return {
      name,
      in: where,
      ...(where === "path" || s.required?.includes(name) ? { required: true } : {}),
      ...(description ? { description } : {}),
      schema: rest,
    };
  });
}

function operation(route: RouteOptions, components: Record<string, Schema>): Schema {
  const schema = (route.schema ?? {}) as Record<string, unknown>;
  const body = schema.documentedBody ?? schema.body;
  const responses: Record<string, unknown> = {};
  for (const [code, r] of Object.entries((schema.response ?? {}) as Record<string, unknown>)) {
    if (r === ErrorAnswer) responses[code] = { $ref: "#/components/responses/Error" };
    else if (isZod(r))
      responses[code] = {
        description: RESPONSE_TEXT[code] ?? "OK",
        content: { "application/json": { schema: jsonSchema(r, "output", components) } },
      };
    else responses[code] = r;
  }
  const params = [
    ...parameters(schema.params, "path", components),
    ...parameters(schema.querystring, "query", components),
  ];
  return {
    ...(schema.summary ? { summary: schema.summary } : {}),
    ...(schema.description ? { description: schema.description } : {}),
    ...(params.length ? { parameters: params } : {}),
    ...(isZod(body)
      ? {
          requestBody: {
            required: true,
            content: { "application/json": { schema: jsonSchema(body, "input", components) } },
          },
        }
      : {}),
    responses,
  };
}

/** The routes of the local API as it is built (never listening). */
async function routes(): Promise<RouteOptions[]> {
  const seen: RouteOptions[] = [];
  const agent = Agent.parse({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", spec: { agentId: "openapi" } });
  const deps = { agent, watch: {}, logger: pino({ level: "silent" }) } as unknown as LocalApiDeps;
  const app = buildLocalApi(deps, undefined, (r) => seen.push(r));
  await app.ready();
  await app.close();
  return seen.filter((r) => r.method !== "HEAD");
}

/** The OpenAPI document of the local API. */
export async function localApiOpenApi(): Promise<Schema> {
  const components: Record<string, Schema> = {};
  // The error body every refusal has (components/responses/Error).
  jsonSchema(ErrorAnswer, "output", components);
  const paths: Record<string, Record<string, Schema>> = {};
  for (const route of await routes()) {
    const path = route.url.replace(/:(\w+)/g, "{$1}");
    for (const method of [route.method].flat()) {
      paths[path] = { ...paths[path], [String(method).toLowerCase()]: operation(route, components) };
    }
  }
  return {
    openapi: "3.1.0",
    info: { title: "ifp-runtime local application API", version: "0.1.0", description: DESCRIPTION },
    servers: FRAME.servers,
    security: FRAME.security,
    paths,
    webhooks: FRAME.webhooks,
    components: {
      securitySchemes: FRAME.securitySchemes,
      responses: {
        Error: {
          description: "Error body of the specification (section 2.7)",
          content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
        },
      },
      schemas: Object.fromEntries(Object.entries(components).sort(([a], [b]) => a.localeCompare(b))),
    },
  };
}

export const LOCAL_API_OPENAPI = "docs/local-api.openapi.yaml";

const HEADER =
  "# Generated from runtime/src/protocol/local-api.ts and the local API's routes by `npm run gen`; do not edit.\n";

/** The text of docs/local-api.openapi.yaml. */
export async function localApiOpenApiText(): Promise<string> {
  return HEADER + stringify(await localApiOpenApi(), { lineWidth: 0, aliasDuplicateObjects: false });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(new URL(`../../../${LOCAL_API_OPENAPI}`, import.meta.url), await localApiOpenApiText());
  process.stdout.write(`wrote ${LOCAL_API_OPENAPI}\n`);
}
