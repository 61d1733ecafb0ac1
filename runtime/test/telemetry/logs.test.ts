import { createPrivateKey } from "node:crypto";
import { Writable } from "node:stream";
import pino from "pino";
import { LOG_FORMAT } from "../../src/telemetry/log-format.ts";
import { describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { startAgent } from "../../src/agent/main.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { startRelay } from "../../src/relay/main.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import type { RelaySpecInput } from "../../src/resources/relay.ts";
import {
  identity,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
  type TestIdentity,
} from "../support/fixtures.ts";
import { startHandler, withNatsAndTls, type Tls } from "../support/agent-harness.ts";
import { clientOf, randomName, webhook, type RelayEnv } from "../support/relay-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => {
  nats = n;
  tls = t;
});

/** A debug-level JSON logger whose lines are collected, raw and parsed. */
function collectedLog() {
  const lines: Record<string, unknown>[] = [];
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean)) {
        raw.push(line);
        lines.push(JSON.parse(line) as Record<string, unknown>);
      }
      done();
    },
  });
  return { lines, raw, logger: pino({ ...LOG_FORMAT, level: "debug", base: { component: "test" } }, sink) };
}

/** An agent whose log lines (JSON, debug level) are collected. */
async function loggedAgent(self: TestIdentity, spec: Omit<AgentSpecInput, "agentId">) {
  const { lines, raw, logger } = collectedLog();
  const dir = tempDir();
  const running = await startAgent({
    manifest: writeAgentManifest(dir, { agentId: self.agentId, ...spec }),
    port: 0,
    host: "127.0.0.1",
    tlsCert: tls.files.cert,
    tlsKey: tls.files.key,
    signingKey: writeKey(dir, self),
    nats: { url: nats.url },
    localApiPort: 0,
    caFile: tls.files.ca,
    logger,
  });
  await waitFor(
    "agent ready",
    async () => (await httpsRequest(`${running.url}/readyz`, { ca: tls.ca })).status === 200,
    30_000,
  );
  return Object.assign(running, { lines, raw });
}

/** A relay serving `agents`, whose log lines (JSON, debug level) are collected. */
async function loggedRelay(agents: TestIdentity[], spec: Partial<RelaySpecInput> = {}) {
  const { lines, raw, logger } = collectedLog();
  const running = await startRelay({
    manifest: writeRelayManifest(
      tempDir(),
      { url: "https://localhost", agents: agents.map(peerOf), ...spec },
      randomName(),
    ),
    port: 0,
    host: "127.0.0.1",
    tlsCert: tls.files.cert,
    tlsKey: tls.files.key,
    nats: { url: nats.url },
    caFile: tls.files.ca,
    logger,
  });
  await waitFor(
    "relay ready",
    async () => (await httpsRequest(`${running.url}/readyz`, { ca: tls.ca })).status === 200,
    30_000,
  );
  return Object.assign(running, { lines, raw });
}

/** Every form of a key that could end up in a log line. */
function keyMaterial(id: TestIdentity): string[] {
  const jwk = createPrivateKey(id.privateKeyPem).export({ format: "jwk" });
  const pemBody = id.privateKeyPem
    .split("\n")
    .filter((l) => l && !l.startsWith("-----"))
    .join("");
  return [jwk.d!, jwk.x!, id.publicKey, pemBody, pemBody.slice(0, 32)];
}

describe("structured logs", () => {
  it("name the message on every line about it, with the request id, and never carry bodies or keys", async () => {
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    const mallory = identity("mallory-agent");
    const handler = await startHandler();
    const b = await loggedAgent(bob, { handler: { url: handler.url }, peers: [peerOf(alice), peerOf(mallory)] });
    const a = await loggedAgent(alice, { peers: [{ ...peerOf(bob), url: b.url.replace("127.0.0.1", "localhost") }] });
    try {
      const secret = "the launch code is 0000-SECRET-BODY";
      const sent = await new LocalApiClient(a.localApiUrl).send({ to: "bob-agent", text: secret, subject: "plans" });
      await waitFor(
        "bob's application has it",
        async () => handler.received.some((r) => r.body.headers.message_id === sent.message_id),
        30_000,
      );
      await waitFor(
        "alice logged the delivery",
        async () => a.lines.some((l) => l.msg === "message delivered"),
        30_000,
      );
      const conversation = sent.message.headers.conversation_id;

      // A forged message (mallory's signature over other content) is refused; its line names it too.
      const forged = signed(mallory, "bob-agent", {}, "innocent");
      forged.body = { text: secret };
      const refused = await httpsRequest(`${b.url}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(forged),
      });
      expect(refused.status).toBe(401);
      await waitFor(
        "bob logged the refusal",
        async () => b.lines.some((l) => l.message_id === forged.headers.message_id),
        10_000,
      );

      const accepted = b.lines.find((l) => l.msg === "message accepted" && l.message_id === sent.message_id);
      expect(accepted).toMatchObject({
        message_id: sent.message_id,
        conversation_id: conversation,
        sender: "alice-agent",
        level: "debug",
      });
      expect(accepted?.reqId).toEqual(expect.any(String));
      const handed = b.lines.find((l) => l.msg === "message handed to the application");
      expect(handed).toMatchObject({
        message_id: sent.message_id,
        conversation_id: conversation,
        sender: "alice-agent",
      });
      const delivered = a.lines.find((l) => l.msg === "message delivered");
      expect(delivered).toMatchObject({
        message_id: sent.message_id,
        conversation_id: conversation,
        sender: "alice-agent",
        to: "bob-agent",
      });
      const refusal = b.lines.find((l) => l.message_id === forged.headers.message_id);
      expect(refusal).toMatchObject({
        message_id: forged.headers.message_id,
        conversation_id: forged.headers.conversation_id,
        sender: "mallory-agent",
        code: "invalid_signature",
      });
      expect(refusal?.reqId).toEqual(expect.any(String));
      expect(refusal?.reqId).not.toBe(accepted?.reqId);

      // Nothing of a body, a signature or a key, on any line of either agent.
      const everything = [...a.raw, ...b.raw].join("\n");
      expect(everything).not.toContain("SECRET-BODY");
      expect(everything).not.toContain("innocent");
      for (const sig of [sent.message.security!.signatures![0]!.sig, forged.security!.signatures![0]!.sig])
        expect(everything).not.toContain(sig);
      for (const id of [alice, bob, mallory]) for (const k of keyMaterial(id)) expect(everything).not.toContain(k);
    } finally {
      await a.close();
      await b.close();
      await handler.close();
    }
  });

  it("name the message on a relay's lines about it, publish and refusal with the request id, push with the recipient, and never carry bodies or keys", async () => {
    const alice = identity("alice-agent");
    const bob = identity("bob-agent");
    const http = new HttpClient({ extraCa: tls.ca });
    const env: RelayEnv = { nats, tls, http, close: () => http.close() };
    // bob's webhook never takes it: one retry, then the push is given up.
    const hook = await webhook(env, () => 503);
    const relay = await loggedRelay([alice, bob], { delivery: { retries: 1, backoffDelay: "100ms", timeout: "2s" } });
    try {
      await clientOf(env, relay, bob).registerWebhook(hook.url);
      const secret = "the launch code is 0000-SECRET-BODY";
      const m = signed(alice, "bob-agent", { conversation_id: "conv:launch" }, secret);
      expect((await clientOf(env, relay, alice).publish(m)).status).toBe(202);
      // A message from bob, published by alice: refused, and its line names it too.
      const forged = signed(bob, "alice-agent", { conversation_id: "conv:forged" }, "innocent");
      expect((await clientOf(env, relay, alice).publish(forged)).status).toBe(401);
      await waitFor(
        "the push given up",
        async () => relay.lines.some((l) => l.msg === "push given up; moved to dead letters"),
        30_000,
      );

      const about = {
        message_id: m.headers.message_id,
        conversation_id: m.headers.conversation_id,
        sender: "alice-agent",
      };
      const published = relay.lines.find((l) => l.msg === "message published");
      expect(published).toMatchObject({ ...about, recipients: 1, level: "debug" });
      expect(published?.reqId).toEqual(expect.any(String));
      const refusal = relay.lines.find((l) => l.message_id === forged.headers.message_id);
      expect(refusal).toMatchObject({
        message_id: forged.headers.message_id,
        conversation_id: forged.headers.conversation_id,
        sender: "alice-agent",
        code: "invalid_signature",
      });
      expect(refusal?.reqId).toEqual(expect.any(String));
      expect(refusal?.reqId).not.toBe(published?.reqId);
      // Push runs apart from any request: its lines name the message and the recipient.
      expect(relay.lines.find((l) => l.msg === "webhook answered 503")).toMatchObject({
        ...about,
        agent: "bob-agent",
        attempt: 1,
        level: "warn",
      });
      expect(relay.lines.find((l) => l.msg === "push given up; moved to dead letters")).toMatchObject({
        ...about,
        agent: "bob-agent",
        level: "error",
      });
      // Every line that mentions either message carries its fields.
      for (const [line, parsed] of relay.raw.map((r, i) => [r, relay.lines[i]!] as const)) {
        for (const x of [m, forged])
          if (line.includes(x.headers.message_id))
            expect(parsed, line).toMatchObject({
              message_id: x.headers.message_id,
              conversation_id: x.headers.conversation_id,
              sender: expect.any(String),
            });
      }

      // Nothing of a body, a signature or a key, on any line.
      const everything = relay.raw.join("\n");
      expect(everything).not.toContain("SECRET-BODY");
      expect(everything).not.toContain("innocent");
      for (const sig of [m.security!.signatures![0]!.sig, forged.security!.signatures![0]!.sig])
        expect(everything).not.toContain(sig);
      for (const id of [alice, bob]) for (const k of keyMaterial(id)) expect(everything).not.toContain(k);
    } finally {
      await relay.close();
      await hook.close();
      await env.close();
    }
  });
});
