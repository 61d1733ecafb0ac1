import { readFileSync } from "node:fs";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { identity } from "../../test/support/fixtures.ts";
import { Agent } from "../resources/agent.ts";
import { Documents } from "./documents.ts";
import { InboxWatch } from "./inbox-watch.ts";
import { buildLocalApi } from "./local-api.ts";
import { agentNames } from "./names.ts";

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
    redrive: async () => ({ outcome: "not_found" as const }),
    peers: { get: async () => undefined },
    received: async () => undefined,
    // Served on the loopback listener only, as this one is; nothing here reaches NATS.
    watch: new InboxWatch(undefined as never, agentNames("alice-agent"), pino({ level: "silent" })),
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

describe("POST /outbox refuses bad input with the documented 400 body, queuing nothing", () => {
  const self = identity("alice-agent");
  const agent = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    spec: { agentId: "alice-agent", inbox: { maxMessageBytes: 4096 } },
  });
  const queued: unknown[] = [];
  const app = buildLocalApi({
    agent,
    signing: self.signing,
    documents: new Documents(agent, self.publicKey, "2026-01-01T00:00:00Z"),
    outbox: {
      enqueue: async (m) => {
        queued.push(m);
        return { duplicate: false, seq: queued.length };
      },
    },
    states: { get: async () => undefined, begin: async () => {}, deadLetters: async () => [] },
    redrive: async () => ({ outcome: "not_found" as const }),
    peers: { get: async () => undefined },
    received: async () => undefined,
    logger: pino({ level: "silent" }),
  });
  const post = (payload: string, contentType = "application/json") =>
    app.inject({ method: "POST", url: "/outbox", headers: { "content-type": contentType }, payload });
  const refused = async (payload: string, status: number, code: string, message: RegExp) => {
    const res = await post(payload);
    expect(res.statusCode, payload.slice(0, 80)).toBe(status);
    expect(res.headers["content-type"]).toMatch(/^application\/json/);
    expect(res.json()).toEqual({ status: "error", code, message: expect.stringMatching(message) });
  };

  it("wrong types, field by field", async () => {
    await refused('{"to": 5, "text": "x"}', 400, "invalid_format", /^invalid outbox request: to/);
    await refused('{"to": "bob-agent", "text": 7}', 400, "invalid_format", /^invalid outbox request: text/);
    await refused('{"to": "bob-agent", "sequence": "1"}', 400, "invalid_format", /^invalid outbox request: sequence/);
    await refused('{"to": "bob-agent", "sequence": -1}', 400, "invalid_format", /^invalid outbox request: sequence/);
    await refused('{"to": "bob-agent", "priority": "now"}', 400, "invalid_format", /^invalid outbox request: priority/);
    await refused('{"to": [], "text": "x"}', 400, "invalid_format", /^invalid outbox request: to/);
    await refused('{"headers": {"to": "b"}}', 400, "invalid_format", /^the message is not valid IFP-4/);
    expect(queued).toEqual([]);
  });

  it("unknown fields of the short form, which would otherwise be dropped unsent", async () => {
    await refused('{"to": "bob-agent", "txt": "hello"}', 400, "invalid_format", /^invalid outbox request: .*txt/);
    await refused('{"to": "bob-agent", "text": "x", "__proto__": {"x": 1}}', 400, "invalid_format", /./);
    expect(queued).toEqual([]);
  });

  it("a body that is no JSON object, or no JSON, or not JSON at all", async () => {
    for (const body of ["[]", '"x"', "5", "null", "true"])
      await refused(body, 400, "invalid_format", /^invalid outbox request: /);
    await refused('{"to": "bob-agent",', 400, "invalid_format", /^the body is not valid JSON/);
    await refused("", 400, "invalid_format", /empty/);
    const text = await post('{"to": "bob-agent"}', "text/plain");
    expect([text.statusCode, text.json().code]).toEqual([415, "unsupported_media_type"]);
    expect(queued).toEqual([]);
  });

  it("JSON nested too deep, on every endpoint that takes a body: 400 naming the depth, never a 5xx", async () => {
    const deep = `${"[".repeat(1_500)}${"]".repeat(1_500)}`;
    for (const [url, payload] of [
      ["/outbox", `{"to": "bob-agent", "text": "x", "extensions": {"a": ${deep}}}`],
      ["/outbox", deep],
      ["/messages/ack", `{"ids": ${deep}}`],
      ["/dead-letters/redrive", `{"limit": ${deep}}`],
    ] as const) {
      const res = await app.inject({ method: "POST", url, headers: { "content-type": "application/json" }, payload });
      expect([res.statusCode, res.json()], url).toEqual([
        400,
        { status: "error", code: "invalid_format", message: expect.stringMatching(/nested deeper than 100 levels/) },
      ]);
    }
    expect(queued).toEqual([]);
  });

  it("a body over spec.inbox.maxMessageBytes: 413", async () => {
    await refused(
      JSON.stringify({ to: "bob-agent", text: "x".repeat(5000) }),
      413,
      "payload_too_large",
      /exceeds the size limit/,
    );
    expect(queued).toEqual([]);
    // Just under the limit is taken.
    const ok = await post(JSON.stringify({ to: "bob-agent", text: "x".repeat(3000) }));
    expect(ok.statusCode).toBe(202);
    expect(queued).toHaveLength(1);
  });
});
