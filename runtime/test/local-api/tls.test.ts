import { writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { onFreePorts, startedTogether } from "../support/free-ports.ts";
import { startAgent } from "../../src/agent/main.ts";
import { LocalApiError, type InboundDelivery } from "../../src/client/local.ts";
import { type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, tempDir, writeAgentManifest, writeKey } from "../support/fixtures.ts";
import { runLocalApiAgent, type LocalApiAgent } from "../support/local-api-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const fast = { backoff: ["300ms"], retryFor: "30s" };

describe("the local API's TLS listener for applications in other pods", () => {
  const alice = identity("alice-agent");
  const bob = identity("bob-agent");
  let a: LocalApiAgent;
  let b: LocalApiAgent;

  beforeAll(async () => {
    // alice and bob name each other's port: chosen together, and again when one was taken.
    [a, b] = await onFreePorts(["alice", "bob"], ({ alice: aPort, bob: bPort }) =>
      startedTogether(
        [
          runLocalApiAgent({
            self: alice,
            port: aPort,
            natsUrl: nats.url,
            tls,
            spec: { peers: [{ ...peerOf(bob), url: `https://localhost:${bPort}` }], outbound: fast },
          }),
          runLocalApiAgent({
            self: bob,
            port: bPort,
            natsUrl: nats.url,
            tls,
            token: "b".repeat(43),
            spec: { peers: [{ ...peerOf(alice), url: `https://localhost:${aPort}` }], outbound: fast },
          }),
        ] as const,
        (agent) => agent.close(),
      ),
    );
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  it("refuses a request without a token, with a wrong one or another scheme: 401 and the error body", async () => {
    for (const headers of [
      {} as Record<string, string>,
      { authorization: "Bearer wrong-token-wrong-token" },
      { authorization: `Basic ${"t".repeat(43)}` },
      { authorization: "Bearer" },
      { authorization: `Bearer ${"t".repeat(43)} extra` },
    ]) {
      const res = await a.request("/healthz", { headers });
      expect(res.status, JSON.stringify(headers)).toBe(401);
      expect(res.json()).toEqual({ status: "error", code: "unauthorized", message: expect.any(String) });
      expect(res.headers["www-authenticate"]).toMatch(/^Bearer/);
    }
    // Also before any route or body is looked at.
    const post = await a.request("/outbox", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(post.status).toBe(401);
    const unknown = await a.request("/nope");
    expect(unknown.status).toBe(401);
  });

  it("serves the same routes as the loopback listener with the right token", async () => {
    const ok = await a.request("/healthz", { headers: { authorization: `Bearer ${"t".repeat(43)}` } });
    expect(ok.status).toBe(200);
    expect(ok.json()).toEqual({ status: "ok" });
    await expect(a.remote().deadLetters()).resolves.toEqual([]);
    await expect(a.remote().status("nope")).rejects.toMatchObject({ status: 404, code: "not_found" });
    // The loopback listener stays open to the pod without a token.
    await expect(a.local().deadLetters()).resolves.toEqual([]);
  });

  it("a sender application sending through the TLS listener reaches a peer runtime, whose application reads it from its stream", async () => {
    const queued = await a.remote().send({ to: "bob-agent", phase: "context", text: "through the Service" });
    expect(queued.status).toBe("queued");
    const got: InboundDelivery[] = [];
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 20_000);
    for await (const d of b.remote().messages({ signal: ac.signal })) {
      got.push(d);
      break;
    }
    clearTimeout(timer);
    expect(got[0]).toMatchObject({
      message_id: queued.message_id,
      sender: "alice-agent",
      auth_level: 2,
      message: { body: { text: "through the Service" } },
    });
    await b.remote().ack(queued.message_id);
    await waitFor(
      "the delivery recorded",
      async () => (await a.remote().status(queued.message_id)).state === "delivered",
    );
  });

  it("takes a changed token file into use without a restart", async () => {
    const old = "t".repeat(43);
    const fresh = "n".repeat(43);
    a.setToken(fresh);
    await waitFor(
      "the new token accepted",
      async () => (await a.request("/healthz", { headers: { authorization: `Bearer ${fresh}` } })).status === 200,
    );
    expect((await a.request("/healthz", { headers: { authorization: `Bearer ${old}` } })).status).toBe(401);
    // A token file made unusable keeps the last good token in force.
    const changed = Date.now();
    writeFileSync(a.tokenFile, "short\n");
    // The file is looked at on a request, at most once a second: requests with the token in
    // force go on being answered until the runtime has read the new file and refused it.
    const statuses: number[] = [];
    await waitFor(
      "the unusable token file read and refused",
      async () => {
        statuses.push((await a.request("/healthz", { headers: { authorization: `Bearer ${fresh}` } })).status);
        return a
          .logLines()
          .some(
            (l) =>
              Date.parse(l.time) >= changed &&
              l.msg === "could not reload the local API token; the previous one stays in force",
          );
      },
      10_000,
      200,
    );
    expect(new Set(statuses)).toEqual(new Set([200]));
    expect((await a.request("/healthz", { headers: { authorization: `Bearer ${fresh}` } })).status).toBe(200);
    expect((await a.request("/healthz", { headers: { authorization: "Bearer short" } })).status).toBe(401);
    a.setToken(old);
    await waitFor(
      "the old token back",
      async () => (await a.request("/healthz", { headers: { authorization: `Bearer ${old}` } })).status === 200,
    );
  });

  it("stops guessing: after too many wrong tokens from one address every request from it gets 429, the right token too", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++)
      statuses.push(
        (await b.request("/healthz", { headers: { authorization: `Bearer guess-${i}-xxxxxxxxxxxxxxxx` } })).status,
      );
    expect(statuses.slice(0, 20).every((s) => s === 401)).toBe(true);
    expect(statuses.slice(20).every((s) => s === 429)).toBe(true);
    const right = await b.request("/healthz", { headers: { authorization: `Bearer ${"b".repeat(43)}` } });
    expect(right.status).toBe(429);
    expect(right.json()).toMatchObject({ status: "error", code: "rate_limited" });
    expect(Number(right.headers["retry-after"])).toBeGreaterThan(0);
    await expect(b.remote().deadLetters()).rejects.toBeInstanceOf(LocalApiError);
    // The loopback listener is not affected, and the block ends.
    await expect(b.local().deadLetters()).resolves.toEqual([]);
    await waitFor(
      "the block to end",
      async () =>
        (await b.request("/healthz", { headers: { authorization: `Bearer ${"b".repeat(43)}` } })).status === 200,
      15_000,
      500,
    );
  });
});

describe("starting the TLS listener", () => {
  it("refuses to start without a usable token file, or with only one of port and token file", async () => {
    const self = identity("start-agent");
    const dir = tempDir();
    const base = {
      manifest: writeAgentManifest(dir, { agentId: self.agentId }),
      port: 0,
      host: "127.0.0.1",
      tlsCert: tls.files.cert,
      tlsKey: tls.files.key,
      signingKey: writeKey(dir, self),
      nats: { url: nats.url },
      localApiPort: 0,
      logger: pino({ level: "silent" }),
    };
    await expect(startAgent({ ...base, localApiTlsPort: 0, localApiTokenFile: join(dir, "missing") })).rejects.toThrow(
      /cannot read the local API token file/,
    );
    writeFileSync(join(dir, "short"), "abc\n");
    await expect(startAgent({ ...base, localApiTlsPort: 0, localApiTokenFile: join(dir, "short") })).rejects.toThrow(
      /shorter than 16/,
    );
    await expect(startAgent({ ...base, localApiTlsPort: 0 })).rejects.toThrow(/both a port and a token file/);
  });
});
