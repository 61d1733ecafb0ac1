import pino from "pino";
import { describe, expect, it } from "vitest";
import { identity, message, peerOf, signed } from "../../test/support/fixtures.ts";
import { Verifier } from "../protocol/verify.ts";
import { Agent } from "../resources/agent.ts";
import { createRuntimeMetrics } from "../server/metrics.ts";
import { buildAgentApp } from "./app.ts";
import { Documents } from "./documents.ts";

// The inbox's routing and check order, through app.inject(); storing in JetStream is covered
// by runtime/test/agent/agent.test.ts against a real nats-server.
const self = identity("alice-agent");
const pete = identity("pete-agent");

function inbox(maxMessageBytes = 4096, more: { metadata?: object; spec?: object } = {}) {
  const agent = Agent.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: more.metadata,
    spec: { agentId: "alice-agent", peers: [peerOf(pete)], inbox: { maxMessageBytes }, ...more.spec },
  });
  const stored: string[] = [];
  const metrics = createRuntimeMetrics("agent");
  const app = buildAgentApp({
    agent,
    documents: new Documents(agent, self.publicKey, "2026-01-01T00:00:00Z"),
    verifier: new Verifier(agent.spec.peers),
    store: {
      accept: async (raw) => {
        // As the inbox stores it: the bytes that were sent, a parsed message as its JSON.
        const text =
          typeof raw === "string" || raw instanceof Uint8Array ? Buffer.from(raw).toString() : JSON.stringify(raw);
        const duplicate = stored.includes(text);
        stored.push(text);
        return { duplicate };
      },
    },
    metrics,
    logger: pino({ level: "silent" }),
    ready: () => true,
  });
  const post = (payload: string, headers: Record<string, string> = {}) =>
    app.inject({
      method: "POST",
      url: "/.well-known/agent/inbox",
      headers: { "content-type": "application/json", ...headers },
      payload,
    });
  const counted = async (result: string) =>
    (await metrics.inbox.get()).values.find((v) => v.labels.result === result)?.value ?? 0;
  return { app, stored, post, counted };
}

describe("agent inbox", () => {
  it("stores the message exactly as it was sent: key order and unknown fields", async () => {
    const { stored, post } = inbox();
    const { body, ...rest } = signed(pete, "alice-agent");
    const text = JSON.stringify({ zz_extension: { kept: true }, body, ...rest });
    const res = await post(text);
    expect(res.statusCode).toBe(202);
    expect(stored).toEqual([text]);
  });

  it("checks cheapest first: size, media type, JSON, schema, then the signature", async () => {
    const { post } = inbox(1024);
    const status = async (p: ReturnType<typeof post>) => {
      const res = await p;
      return `${res.statusCode} ${res.json().code}`;
    };
    // Too large, whatever it holds; not JSON media; not JSON; not IFP-4 — none of them signed.
    expect(await status(post(`{${"x".repeat(2000)}`))).toBe("413 payload_too_large");
    expect(await status(post("{}", { "content-type": "text/plain" }))).toBe("415 unsupported_media_type");
    expect(await status(post("{"))).toBe("400 invalid_format");
    const schema = await post(JSON.stringify({ ifp: 4, headers: { message_id: "x" }, body: {} }));
    expect(schema.json()).toMatchObject({
      status: "error",
      code: "invalid_format",
      message: expect.stringMatching(/^the message does not follow IFP-4: headers\.date: /),
    });
    // Well formed but unsigned: only now the signature.
    const { post: roomy } = inbox();
    expect(await status(roomy(JSON.stringify(message("pete-agent", "alice-agent"))))).toBe("401 invalid_signature");
  });

  it("counts every answer by its result, refusals before the route included", async () => {
    const { post, counted } = inbox(1024);
    await post(`{${"x".repeat(2000)}`);
    await post("{");
    expect(await counted("payload_too_large")).toBe(1);
    expect(await counted("invalid_format")).toBe(1);
    const { post: roomy, counted: roomyCounted } = inbox();
    const m = JSON.stringify(signed(pete, "alice-agent"));
    await roomy(m);
    await roomy(m);
    expect(await roomyCounted("accepted")).toBe(1);
    expect(await roomyCounted("duplicate")).toBe(1);
  });
});

describe("the identity document's endpoints", () => {
  const endpointsFor = async (app: ReturnType<typeof inbox>["app"], host: string) => {
    const res = await app.inject({ method: "GET", url: "/.well-known/agent/identity", headers: { host } });
    expect(res.statusCode).toBe(200);
    return res.json().endpoints.inbox as string;
  };

  it("name the configured base URL whatever Host the request gives: a forged Host gets the canonical document", async () => {
    const { app } = inbox(4096, { spec: { baseUrl: "https://alice.example/" } });
    const canonical = await app.inject({ method: "GET", url: "/.well-known/agent/identity" });
    const forged = await app.inject({
      method: "GET",
      url: "/.well-known/agent/identity",
      headers: { host: "attacker.example" },
    });
    expect(forged.body).toBe(canonical.body);
    expect(forged.body).not.toContain("attacker");
    expect(forged.json().endpoints.inbox).toBe("https://alice.example/.well-known/agent/inbox");
  });

  it("without a configured base URL name the Host only when it is one of the agent's own names, else its Service URL", async () => {
    const { app } = inbox(4096, {
      metadata: { name: "alice", namespace: "shop" },
      spec: { agentId: "https://Alice.Example./agents/alice" },
    });
    const service = "https://alice.shop.svc/.well-known/agent/inbox";
    expect(await endpointsFor(app, "localhost:8443")).toBe("https://localhost:8443/.well-known/agent/inbox");
    expect(await endpointsFor(app, "alice.shop.svc.cluster.local")).toBe(
      "https://alice.shop.svc.cluster.local/.well-known/agent/inbox",
    );
    // The host of its https agent id is its own, however written.
    expect(await endpointsFor(app, "ALICE.example.:443")).toBe("https://alice.example:443/.well-known/agent/inbox");
    for (const forged of ["attacker.example", "alice.shop.svc.attacker.example", "localhost@attacker.example", "a b"])
      expect(await endpointsFor(app, forged), forged).toBe(service);
  });
});
