import { readFileSync } from "node:fs";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { identity } from "../../test/support/fixtures.ts";
import { Agent } from "../resources/agent.ts";
import { Documents } from "./documents.ts";
import { buildLocalApi } from "./local-api.ts";

const spec = parse(readFileSync(new URL("../../../docs/local-api.openapi.yaml", import.meta.url), "utf8"));

describe("local application API", () => {
  const self = identity("alice-agent");
  const agent = Agent.parse({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", spec: { agentId: "alice-agent" } });
  const app = buildLocalApi({
    agent,
    signing: self.signing,
    documents: new Documents(agent, self.publicKey, "2026-01-01T00:00:00Z"),
    outbox: { enqueue: async () => ({ duplicate: false, seq: 1 }) },
    states: { get: async () => undefined, begin: async () => {}, deadLetters: async () => [] },
    peers: { get: async () => undefined },
    received: async () => undefined,
    logger: pino({ level: "silent" }),
  });

  it("serves exactly the paths its OpenAPI document describes", async () => {
    await app.ready();
    for (const [path, ops] of Object.entries(spec.paths as Record<string, Record<string, unknown>>)) {
      for (const method of Object.keys(ops)) {
        expect(
          app.hasRoute({
            method: method.toUpperCase() as "GET",
            url: path
              .replace(/\{(\w+)\}/g, ":$1")
              .replace(":message_id", ":id")
              .replace(":agent_id", ":agent"),
          }),
          `${method} ${path}`,
        ).toBe(true);
      }
    }
  });

  it("answers errors with the spec's error body", async () => {
    const res = await app.inject({ method: "POST", url: "/outbox", payload: { phase: "context" } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      status: "error",
      code: "invalid_format",
      message: expect.stringMatching(/`to` is required/),
    });
    const missing = await app.inject({ method: "GET", url: "/nope" });
    expect(missing.json()).toMatchObject({ status: "error", code: "not_found" });
  });

  it("signs what it queues", async () => {
    const res = await app.inject({ method: "POST", url: "/outbox", payload: { to: "bob-agent", text: "hi" } });
    expect(res.statusCode).toBe(202);
    expect(res.json().message.security.signatures[0]).toMatchObject({
      alg: "ed25519",
      key_id: "alice-agent#key-1",
      signed_body: true,
    });
  });
});
