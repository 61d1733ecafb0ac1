// NATS outages the runtimes must live through: started before NATS exists, the relay's
// subscription watch across a restart of nats-server, and open SSE and WebSocket streams
// while nats-server goes away and comes back.
import type { IncomingMessage } from "node:http";
import { request } from "node:https";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { consistently, waitFor } from "../../../e2e/support/wait.ts";
import { startAgent } from "../../src/agent/main.ts";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import { startRelay, type RunningRelay } from "../../src/relay/main.ts";
import { startHandler } from "../support/agent-harness.ts";
import {
  identity,
  peerOf,
  signed,
  tempDir,
  writeAgentManifest,
  writeKey,
  writeRelayManifest,
} from "../support/fixtures.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  clientOf,
  ids,
  openWs,
  randomName,
  runRelay,
  type RelayEnv,
} from "../support/relay-harness.ts";
import { HttpClient } from "../../src/net/http-client.ts";

let tls: Awaited<ReturnType<typeof localhostTls>>;
let http: HttpClient;
beforeAll(async () => {
  tls = await localhostTls();
  http = new HttpClient({ extraCa: tls.ca });
});
afterAll(async () => {
  await http?.close();
});

const silent = () => pino({ level: process.env.IFP_TEST_LOG ?? "silent" });
const status = async (url: string) => (await httpsRequest(url, { ca: tls.ca })).status;

describe("a runtime started while NATS is unreachable", () => {
  it("agent: listens at once, answers the inbox 503 with Retry-After, and becomes ready when NATS appears", async () => {
    const natsPort = await freePort();
    const pete = identity("pete-agent");
    const self = identity("early-agent");
    const dir = tempDir();
    const handler = await startHandler();
    const agent = await startAgent({
      manifest: writeAgentManifest(dir, {
        agentId: self.agentId,
        peers: [peerOf(pete)],
        handler: { url: handler.url },
      }),
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      signingKey: writeKey(dir, self),
      nats: { url: `nats://127.0.0.1:${natsPort}` },
      localApiPort: 0,
      logger: silent(),
    });
    const url = agent.url.replace("127.0.0.1", "localhost");
    const post = (body: unknown) =>
      httpsRequest(`${url}/.well-known/agent/inbox`, {
        method: "POST",
        ca: tls.ca,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    let nats: NatsServer | undefined;
    try {
      expect(await status(`${url}/healthz`)).toBe(200);
      expect(await status(`${url}/readyz`)).toBe(503);
      const early = signed(pete, self.agentId);
      const refused = await post(early);
      expect(refused.status).toBe(503);
      expect(Number(refused.headers["retry-after"])).toBeGreaterThan(0);
      expect(refused.json()).toMatchObject({ status: "error", code: "unavailable" });
      // Discovery does not need NATS.
      expect(await status(`${url}/.well-known/agent/capabilities`)).toBe(200);

      nats = await startNats({ port: natsPort });
      await waitFor("the agent to become ready", async () => (await status(`${url}/readyz`)) === 200, 30_000, 100);
      // The sender's retry of the refused message is taken and handed on.
      expect((await post(early)).status).toBe(202);
      await waitFor(
        "the hand-off",
        () => handler.received.some((r) => r.body.headers.message_id === early.headers.message_id),
        30_000,
      );
    } finally {
      await agent.close();
      await handler.close();
      await nats?.close();
    }
  });

  it("relay: answers publish 503 with Retry-After, and takes it once NATS appears", async () => {
    const natsPort = await freePort();
    const env = { tls, http, nats: { url: `nats://127.0.0.1:${natsPort}` } } as RelayEnv;
    const relay = await startRelay({
      manifest: writeRelayManifest(
        tempDir(),
        { url: "https://localhost", agents: [peerOf(alice), peerOf(bob)] },
        randomName("early"),
      ),
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      nats: { url: env.nats.url },
      logger: silent(),
    });
    let nats: NatsServer | undefined;
    try {
      expect(await status(`${baseUrl(relay)}/readyz`)).toBe(503);
      const m = signed(alice, "bob-agent");
      const refused = await clientOf(env, relay, alice).publish(m);
      expect(refused.status).toBe(503);
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);

      nats = await startNats({ port: natsPort });
      await waitFor(
        "the relay to become ready",
        async () => (await status(`${baseUrl(relay)}/readyz`)) === 200,
        30_000,
        100,
      );
      expect((await clientOf(env, relay, alice).publish(m)).status).toBe(202);
      expect(ids((await clientOf(env, relay, bob).pull()).messages)).toEqual([m.headers.message_id]);
    } finally {
      await relay.close();
      await nats?.close();
    }
  });
});

/** A signed GET /relay/events kept open; it records events and whether the stream ended. */
async function openSse(env: RelayEnv, relay: RunningRelay, who: typeof alice, lastEventId?: string) {
  const url = `${baseUrl(relay)}/relay/events`;
  const headers = await signRequest(
    { method: "GET", url, headers: lastEventId ? { "last-event-id": lastEventId } : {} },
    who.signing,
  );
  const events: { id: string; data: any }[] = [];
  const state = { ended: false };
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(url, { headers, ca: env.tls.ca }, resolve);
    req.on("error", reject);
    req.end();
  });
  expect(res.statusCode).toBe(200);
  let buf = "";
  res.on("data", (c: Buffer) => {
    buf += c.toString();
    for (let i: number; (i = buf.indexOf("\n\n")) >= 0; ) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const id = /^id: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (id && data) events.push({ id, data: JSON.parse(data) });
    }
  });
  res.on("close", () => (state.ended = true));
  res.on("error", () => (state.ended = true));
  return { events, state, close: () => res.destroy() };
}

describe("relay streams and subscriptions across a restart of nats-server", () => {
  let env: RelayEnv;
  let a: RunningRelay;
  let b: RunningRelay;
  beforeAll(async () => {
    env = { tls, http, nats: await startNats() } as RelayEnv;
    const name = randomName("outage");
    // Two replicas of one Relay.
    a = await runRelay(env, {}, name);
    b = await runRelay(env, {}, name);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await env?.nats.close();
  });

  it("keeps the subscription watch and open streams working, or ends the streams so a resume loses nothing", async () => {
    const sse = await openSse(env, a, bob);
    const ws = await openWs(env, a, bob);
    let wsClosed = false;
    ws.ws.on("close", () => (wsClosed = true));
    const before = signed(alice, "bob-agent");
    await clientOf(env, a, alice).publish(before);
    await waitFor("the first message on both streams", () => sse.events.length === 1 && ws.messages().length === 1);

    await env.nats.stop();
    await waitFor(
      "both replicas to notice",
      async () => (await status(`${baseUrl(a)}/readyz`)) === 503 && (await status(`${baseUrl(b)}/readyz`)) === 503,
      20_000,
      100,
    );
    // Long enough for the client's idle heartbeats to be missed, not just a blip.
    await consistently(
      "both replicas to stay unready while NATS is away",
      async () => (await status(`${baseUrl(a)}/readyz`)) === 503 && (await status(`${baseUrl(b)}/readyz`)) === 503,
      6_000,
      500,
    );
    await env.nats.restart();
    await waitFor(
      "both replicas to be ready again",
      async () => (await status(`${baseUrl(a)}/readyz`)) === 200 && (await status(`${baseUrl(b)}/readyz`)) === 200,
      30_000,
      100,
    );

    // Registered through one replica after the outage, used by the other: its watch resumed.
    await clientOf(env, b, carol).subscribe(["outage.news"]);
    const news = signed(alice, "topic:outage.news");
    await waitFor(
      "replica a to know carol's new subscription",
      async () => {
        const res = await clientOf(env, a, alice).publish(signed(alice, "topic:outage.news"));
        return res.status === 202 && JSON.parse(res.text).recipients === 1;
      },
      20_000,
      250,
    );
    expect(JSON.parse((await clientOf(env, a, alice).publish(news)).text)).toMatchObject({ recipients: 1 });
    expect(ids((await clientOf(env, a, carol).pull({ limit: 100 })).messages)).toContain(news.headers.message_id);

    // The open streams: either they carry the next message, or they have ended (and the
    // client resumes after its cursor, losing nothing). An open stream that stays silent is
    // the failure.
    const after = signed(alice, "bob-agent");
    await clientOf(env, a, alice).publish(after);
    await waitFor("the SSE stream to deliver or end", () => sse.events.length > 1 || sse.state.ended, 30_000);
    await waitFor("the WebSocket to deliver or close", () => ws.messages().length > 1 || wsClosed, 30_000);

    const sseIds =
      sse.state.ended && sse.events.length === 1
        ? [before.headers.message_id, ...(await drain(await openSse(env, a, bob, sse.events[0]!.id), 1))]
        : sse.events.map((e) => e.data.headers.message_id);
    expect(sseIds).toEqual(ids([before, after]));

    const wsIds =
      wsClosed && ws.messages().length === 1
        ? [before.headers.message_id, ...(await drainWs(await openWs(env, a, bob, ws.messages()[0].id), 1))]
        : ws.messages().map((f) => f.message.headers.message_id);
    expect(wsIds).toEqual(ids([before, after]));
    sse.close();
    await ws.close();
  });
});

async function drain(s: Awaited<ReturnType<typeof openSse>>, count: number): Promise<string[]> {
  await waitFor("the resumed SSE stream", () => s.events.length >= count, 20_000);
  s.close();
  return s.events.map((e) => e.data.headers.message_id);
}

async function drainWs(s: Awaited<ReturnType<typeof openWs>>, count: number): Promise<string[]> {
  await waitFor("the resumed WebSocket", () => s.messages().length >= count, 20_000);
  await s.close();
  return s.messages().map((f) => f.message.headers.message_id);
}
