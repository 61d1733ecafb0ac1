import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { describeExit, spawnProcess, type ExitInfo } from "../../../e2e/support/process.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { signMessage } from "../../src/protocol/signing.ts";
import {
  identity,
  message,
  peerOf,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
  type TestIdentity,
} from "../support/fixtures.ts";
import { onFreePorts } from "../support/free-ports.ts";
import { untilReady } from "../support/runtime-process.ts";
import { startHandler } from "../support/agent-harness.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";

/**
 * Tracing as users run it: real ifp-runtime processes configured only by OTEL_* variables,
 * exporting OTLP/HTTP JSON to a collector in this test.
 */

const BIN = new URL("../../bin/ifp-runtime.ts", import.meta.url).pathname;

interface ExportedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  status?: { code?: number };
}

/** An OTLP/HTTP receiver: collects the JSON trace exports POSTed to /v1/traces. */
async function otlpReceiver() {
  const spans: ExportedSpan[] = [];
  const requests: { path: string; contentType: string }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      requests.push({ path: req.url ?? "", contentType: String(req.headers["content-type"]) });
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as any;
        for (const rs of body.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a: any) => a.key === "service.name")?.value?.stringValue ?? "";
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              const attributes: Record<string, unknown> = {};
              for (const a of s.attributes ?? []) attributes[a.key] = Object.values(a.value ?? {})[0];
              spans.push({
                service,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId || undefined,
                name: s.name,
                kind: s.kind,
                attributes,
                status: s.status,
              });
            }
          }
        }
      } catch {
        // not JSON: counted in requests, no spans
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

let nats: NatsServer;
let tls: Awaited<ReturnType<typeof localhostTls>>;
let otlp: Awaited<ReturnType<typeof otlpReceiver>>;
const running: { stop(): Promise<ExitInfo | undefined> }[] = [];

beforeAll(async () => {
  [nats, tls, otlp] = await Promise.all([startNats(), localhostTls(), otlpReceiver()]);
});
afterAll(async () => {
  for (const r of running.reverse()) await r.stop();
  await otlp?.close();
  await nats?.close();
});

/**
 * ifp-runtime MODE as a process, with tracing configured by the environment alone, on a free
 * port (chosen again when it was taken before the runtime listened). Its output is kept (and
 * printed when a test fails); stop() is SIGTERM, bounded, and says how it ended.
 */
function spawnRuntime(mode: "agent" | "relay", args: string[], env: Record<string, string>) {
  return onFreePorts(["https"], (ports) => spawnOn(ports.https, mode, args, env));
}

async function spawnOn(port: number, mode: "agent" | "relay", args: string[], env: Record<string, string>) {
  const child = spawnProcess(
    `ifp-runtime ${mode} (${env.OTEL_SERVICE_NAME ?? "untraced"})`,
    process.execPath,
    [
      BIN,
      mode,
      ...args,
      "--port",
      String(port),
      "--metrics-port",
      "0",
      "--host",
      "127.0.0.1",
      "--tls-cert",
      tls.files.cert,
      "--tls-key",
      tls.files.key,
      "--nats",
      nats.url,
    ],
    { env: { ...process.env, IFP_LOG_LEVEL: "warn", ...env } },
  );
  const base = `https://localhost:${port}`;
  const r = { base, output: () => child.log(), stop: () => child.stop() };
  running.push(r);
  await untilReady(child, base, tls.ca);
  return r;
}

const tracingEnv = (service: string) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
  OTEL_SERVICE_NAME: service,
  OTEL_BSP_SCHEDULE_DELAY: "100",
});

type AgentPorts = { https: number; localApi: number };

/** The agent `self` as a process on `ports`, or on free ones (chosen again when one was taken). */
async function spawnAgent(
  self: TestIdentity,
  spec: Omit<AgentSpecInput, "agentId">,
  env: Record<string, string>,
  ports?: AgentPorts,
) {
  const dir = tempDir();
  const manifest = writeAgentManifest(dir, { agentId: self.agentId, ...spec });
  const key = writeKey(dir, self);
  const on = async ({ https, localApi }: AgentPorts) => {
    const args = ["--manifest", manifest, "--signing-key", key, "--local-api-port", String(localApi)];
    const r = await spawnOn(https, "agent", [...args, "--ca-file", tls.files.ca], env);
    return { ...r, localApi: `http://127.0.0.1:${localApi}` };
  };
  return ports ? on(ports) : onFreePorts(["https", "localApi"], on);
}

/** The spans of one trace, once every named span has been exported. */
async function traceOf(traceId: string, names: string[]): Promise<ExportedSpan[]> {
  return waitFor(
    `spans ${names.join(", ")} of trace ${traceId}`,
    async () => {
      const spans = otlp.spans.filter((s) => s.traceId === traceId);
      return names.every((n) => spans.some((s) => s.name === n)) ? spans : undefined;
    },
    30_000,
    200,
  );
}

function one(spans: ExportedSpan[], name: string, service?: string): ExportedSpan {
  const found = spans.filter((s) => s.name === name && (service === undefined || s.service === service));
  expect(found, `${name} in ${service}`).toHaveLength(1);
  return found[0]!;
}

const APP_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const APP_SPAN = "00f067aa0ba902b7";

describe("tracing across agents and a relay", () => {
  it("follows one message A → relay → B in one trace, each hop's span a child of the right one", async () => {
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    const relayManifest = writeRelayManifest(
      tempDir(),
      { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
      "hub",
    );
    const relay = await spawnRuntime("relay", ["--manifest", relayManifest], tracingEnv("relay-hub"));
    const handler = await startHandler();
    try {
      await spawnAgent(
        bob,
        { peers: [peerOf(alice)], relay: { urls: [relay.base], pollInterval: "300ms" }, handler: { url: handler.url } },
        tracingEnv("bob"),
      );
      // The relay is the test's own: trusted, so bodies go through it unencrypted (docs/encryption.md).
      const a = await spawnAgent(
        alice,
        {
          peers: [{ ...peerOf(bob), relay: { urls: [relay.base] } }],
          outbound: { backoff: ["300ms"], retryFor: "30s" },
          encryption: { relayTrust: [{ url: relay.base, level: "self-operated" }] },
        },
        tracingEnv("alice"),
      );

      // The application sends within a trace of its own: the runtime continues it.
      const res = await fetch(`${a.localApi}/outbox`, {
        method: "POST",
        headers: { "content-type": "application/json", traceparent: `00-${APP_TRACE}-${APP_SPAN}-01` },
        body: JSON.stringify({ to: "bob-agent", text: "secret plans for the weekend" }),
      });
      expect(res.status).toBe(202);
      const sent = (await res.json()) as { message_id: string; message: any };
      await waitFor(
        "handed to bob's application",
        async () => handler.received.some((r) => r.body.headers.message_id === sent.message_id),
        30_000,
      );

      // bob follows its mailbox on the relay's event stream: the relay's hop is a push over SSE.
      const spans = await traceOf(APP_TRACE, [
        "ifp.outbox.send",
        "ifp.outbound.attempt",
        "ifp.relay.publish",
        "ifp.relay.push",
        "ifp.relay.intake",
        "ifp.handoff.deliver",
      ]);
      const send = one(spans, "ifp.outbox.send", "alice");
      const attempt = one(spans, "ifp.outbound.attempt", "alice");
      const publish = one(spans, "ifp.relay.publish", "relay-hub");
      const retrieve = one(spans, "ifp.relay.push", "relay-hub");
      const intake = one(spans, "ifp.relay.intake", "bob");
      const handoff = one(spans, "ifp.handoff.deliver", "bob");
      expect(send.parentSpanId).toBe(APP_SPAN);
      expect(attempt.parentSpanId).toBe(send.spanId);
      expect(publish.parentSpanId).toBe(send.spanId);
      expect(retrieve.parentSpanId).toBe(publish.spanId);
      expect(intake.parentSpanId).toBe(send.spanId);
      expect(handoff.parentSpanId).toBe(intake.spanId);
      for (const s of [send, attempt, publish, retrieve, intake, handoff])
        expect(s.attributes["ifp.message_id"]).toBe(sent.message_id);
      expect(attempt.attributes["ifp.outcome"]).toBe("delivered");
      expect(attempt.attributes["ifp.recipient"]).toBe("bob-agent");
      expect(handoff.attributes["http.response.status_code"]).toBe(200);
      expect(retrieve.attributes["ifp.transport"]).toBe("sse");

      // The context travels in the message, signed like every header present, and arrives as sent.
      const delivered = handler.received.find((r) => r.body.headers.message_id === sent.message_id)!.body;
      expect(delivered.headers.extensions["trace-context"]).toEqual({
        traceparent: `00-${APP_TRACE}-${send.spanId}-01`,
      });
      expect(sent.message.headers.extensions["trace-context"]).toEqual(delivered.headers.extensions["trace-context"]);
      expect(delivered.security.signatures[0].signed_headers).toContain("extensions");
      // Exported as OTLP/HTTP JSON to the standard path.
      expect(otlp.requests.every((r) => r.path === "/v1/traces" && r.contentType.startsWith("application/json"))).toBe(
        true,
      );
      // Spans name messages, never their content.
      expect(JSON.stringify(otlp.spans)).not.toContain("secret plans");
    } finally {
      await handler.close();
    }
  });

  it("follows a direct HTTPS exchange and its reply in one trace", async () => {
    const carol = identity("carol-agent");
    const dave = identity("dave-agent");
    const handler = await startHandler();
    const daveHandler = await startHandler();
    try {
      // carol names dave's port before he listens on it: both start again when one of his was taken.
      const [c, d] = await onFreePorts(["https", "localApi"], async (davePorts) => {
        const c = await spawnAgent(
          carol,
          { handler: { url: handler.url }, peers: [{ ...peerOf(dave), url: `https://localhost:${davePorts.https}` }] },
          tracingEnv("carol"),
        );
        try {
          const spec = { handler: { url: daveHandler.url }, peers: [{ ...peerOf(carol), url: c.base }] };
          return [c, await spawnAgent(dave, spec, tracingEnv("dave"), davePorts)] as const;
        } catch (err) {
          await c.stop();
          throw err;
        }
      });
      const sent = await new LocalApiClient(d.localApi).send({ to: "carol-agent", text: "hello carol" });
      await waitFor(
        "carol's application has it",
        async () => handler.received.some((r) => r.body.headers.message_id === sent.message_id),
        30_000,
      );
      const first = handler.received.find((r) => r.body.headers.message_id === sent.message_id)!.body;
      const traceId = (first.headers.extensions["trace-context"].traceparent as string).split("-")[1]!;

      const spans = await traceOf(traceId, [
        "ifp.outbox.send",
        "ifp.outbound.attempt",
        "ifp.inbox.receive",
        "ifp.handoff.deliver",
      ]);
      const send = one(spans, "ifp.outbox.send", "dave");
      const attempt = one(spans, "ifp.outbound.attempt", "dave");
      const receive = one(spans, "ifp.inbox.receive", "carol");
      const handoff = one(spans, "ifp.handoff.deliver", "carol");
      expect(send.parentSpanId).toBeUndefined();
      expect(attempt.parentSpanId).toBe(send.spanId);
      expect(receive.parentSpanId).toBe(send.spanId);
      expect(receive.kind).toBe(2); // SERVER
      expect(receive.attributes).toMatchObject({
        "ifp.message_id": sent.message_id,
        "ifp.sender": "dave-agent",
        "ifp.conversation_id": first.headers.conversation_id,
        "http.response.status_code": 202,
      });
      expect(handoff.parentSpanId).toBe(receive.spanId);

      // carol's application answers: the reply goes on in the same trace, under the message it answers.
      const reply = await fetch(`${c.localApi}/outbox`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ in_reply_to: sent.message_id, to: "dave-agent", text: "hi dave" }),
      });
      expect(reply.status).toBe(202);
      const replied = (await reply.json()) as { message: any };
      expect((replied.message.headers.extensions["trace-context"].traceparent as string).split("-")[1]).toBe(traceId);
      await waitFor(
        "dave's application has the reply",
        async () => daveHandler.received.some((r) => r.body.headers.thread?.in_reply_to === sent.message_id),
        30_000,
      );
      const all = await waitFor(
        "the reply's spans",
        async () => {
          const s = otlp.spans.filter((x) => x.traceId === traceId);
          const has = (name: string, service: string) => s.some((x) => x.name === name && x.service === service);
          return has("ifp.handoff.deliver", "dave") && has("ifp.outbound.attempt", "carol") ? s : undefined;
        },
        30_000,
        200,
      );
      const replySend = one(all, "ifp.outbox.send", "carol");
      expect(replySend.parentSpanId).toBe(send.spanId);
      expect(one(all, "ifp.inbox.receive", "dave").parentSpanId).toBe(replySend.spanId);
      expect(one(all, "ifp.outbound.attempt", "carol").parentSpanId).toBe(replySend.spanId);
    } finally {
      await handler.close();
      await daveHandler.close();
    }
  });

  it("ignores a malformed or hostile trace context: accepted, and traced as a new trace", async () => {
    const erin = identity("erin-agent");
    const mallory = identity("mallory-agent");
    const e = await spawnAgent(erin, { peers: [peerOf(mallory)] }, tracingEnv("erin"));
    const bad: unknown[] = [
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      { traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01" },
      { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01" },
      { traceparent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" },
      { traceparent: `00-${"a".repeat(5000)}` },
      { traceparent: 42 },
      { traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01" },
      null,
      [],
    ];
    const ids: string[] = [];
    for (const tc of bad) {
      const m = signMessage(
        message(mallory.agentId, erin.agentId, { extensions: { "trace-context": tc } }),
        mallory.signing,
      );
      ids.push(m.headers.message_id);
      const res = await httpsRequest(`${e.base}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(m),
      });
      expect(res.status, JSON.stringify(tc)).toBe(202);
    }
    // A request refused before its message is read still has its span.
    const refused = await httpsRequest(`${e.base}/.well-known/agent/inbox`, {
      method: "POST",
      ca: tls.ca,
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(refused.status).toBe(400);
    const receives = await waitFor(
      "erin's inbox spans",
      async () => {
        const s = otlp.spans.filter((x) => x.service === "erin" && x.name === "ifp.inbox.receive");
        return s.length >= bad.length + 1 ? s : undefined;
      },
      30_000,
      200,
    );
    for (const id of ids) {
      const s = receives.find((x) => x.attributes["ifp.message_id"] === id);
      expect(s, id).toBeDefined();
      expect(s!.parentSpanId).toBeUndefined();
      expect(s!.traceId).not.toBe("00000000000000000000000000000000");
      expect(s!.traceId).not.toBe(APP_TRACE);
    }
    const failed = receives.find((x) => x.attributes["ifp.message_id"] === undefined);
    expect(failed?.attributes["http.response.status_code"]).toBe(400);
    expect(failed?.attributes["ifp.error_code"]).toBe("invalid_format");
    expect(failed?.status?.code).toBe(2); // ERROR
  });

  it("without OTEL_* configuration exports nothing and adds no trace context", async () => {
    const frank = identity("frank-agent");
    const grace = identity("grace-agent");
    const handler = await startHandler();
    try {
      const g = await spawnAgent(
        grace,
        { handler: { url: handler.url }, peers: [peerOf(frank)] },
        { OTEL_SERVICE_NAME: "grace" },
      );
      const f = await spawnAgent(frank, { peers: [{ ...peerOf(grace), url: g.base }] }, { OTEL_SERVICE_NAME: "frank" });
      const sent = await new LocalApiClient(f.localApi).send({ to: "grace-agent", text: "untraced" });
      expect(sent.message.headers.extensions).toBeUndefined();
      await waitFor(
        "grace's application has it",
        async () => handler.received.some((r) => r.body.headers.message_id === sent.message_id),
        30_000,
      );
      // A clean stop ends tracing after the runtime (ifp-runtime shuts the exporter down, which
      // flushes): whatever either would have exported has been sent by the time it exits 0.
      for (const r of [f, g]) expect(describeExit(await r.stop())).toBe("exited with code 0");
      await consistently(
        "no spans of grace or frank",
        () => otlp.spans.every((s) => s.service !== "grace" && s.service !== "frank"),
        1_000,
        100,
      );
    } finally {
      await handler.close();
    }
  });
});
