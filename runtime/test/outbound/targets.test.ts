import { createServer as createHttpServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../e2e/support/ports.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import { isTargetRefused, TargetPolicy } from "../../src/net/targets.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";
import { send, untilState } from "../support/outbox-harness.ts";
import { alice, clientOf, failure, relayEnv, runRelay, type RelayEnv } from "../support/relay-harness.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/** A peer on loopback (HTTPS) that serves an identity document naming `inbox`, and records every request. */
async function trapPeer(agentId: string, inbox: (self: string) => string) {
  const requests: string[] = [];
  const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    requests.push(`${req.method} ${req.url}`);
    req.resume();
    req.on("end", () => {
      if (req.url?.endsWith("/identity")) {
        res
          .writeHead(200, { "content-type": "application/json" })
          .end(JSON.stringify({ ifp: 5, agent_id: agentId, keys: [], endpoints: { inbox: inbox(url) } }));
      } else if (req.url?.endsWith("/capabilities")) res.writeHead(404).end();
      else res.writeHead(202, { "content-type": "application/json" }).end(JSON.stringify({ status: "accepted" }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `https://localhost:${(server.address() as AddressInfo).port}`;
  return {
    url,
    port: (server.address() as AddressInfo).port,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** A plain-HTTP listener that records whether anybody came. */
async function plainTrap() {
  const requests: string[] = [];
  const server = createHttpServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    req.resume();
    res.writeHead(202).end("{}");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

const fast = { backoff: ["300ms"], retryFor: "20s" };

describe("outbound targets: https only, no special addresses unless allowed", () => {
  const guarded = identity("guarded-agent");
  const open = identity("open-agent");
  const friend = identity("friend-agent");
  let trap: Awaited<ReturnType<typeof trapPeer>>;
  let plainInboxPeer: Awaited<ReturnType<typeof trapPeer>>;
  let plain: Awaited<ReturnType<typeof plainTrap>>;
  let handler: Awaited<ReturnType<typeof startHandler>>;
  let g: Awaited<ReturnType<typeof runAgent>>;
  let o: Awaited<ReturnType<typeof runAgent>>;

  beforeAll(async () => {
    [trap, plain, handler] = await Promise.all([
      trapPeer("loopback-peer", (self) => `${self}/.well-known/agent/inbox`),
      plainTrap(),
      startHandler(),
    ]);
    plainInboxPeer = await trapPeer("plaintext-peer", () => `${plain.url}/inbox`);
    [g, o] = await Promise.all([
      runAgent({
        self: guarded,
        natsUrl: nats.url,
        tls,
        spec: {
          // What a user writes who allows nothing special (the default).
          network: { allowPrivateTargets: [] },
          peers: [
            { ...peerOf(identity("loopback-peer")), url: trap.url },
            { ...peerOf(identity("literal-peer")), url: `https://127.0.0.1:${trap.port}` },
            { ...peerOf(identity("metadata-peer")), url: "https://169.254.169.254" },
            peerOf(friend),
          ],
          handler: { url: handler.url },
          outbound: fast,
        },
      }),
      runAgent({
        self: open,
        natsUrl: nats.url,
        tls,
        spec: {
          network: { allowPrivateTargets: ["127.0.0.0/8"] },
          peers: [
            { ...peerOf(identity("loopback-peer")), url: trap.url },
            { ...peerOf(identity("plaintext-peer")), url: plainInboxPeer.url },
          ],
          outbound: fast,
        },
      }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([g?.close(), o?.close()]);
    await Promise.all([trap?.close(), plainInboxPeer?.close(), plain?.close(), handler?.close()]);
  });

  it("refuses a peer whose name resolves to loopback, without a single request to it, as a final failure", async () => {
    const sent = await send(g.localApiUrl, { to: "loopback-peer", text: "hi" });
    expect(sent.status).toBe(202);
    const done = await untilState(g.localApiUrl, sent.body.message_id, "failed");
    expect(done.recipients[0]).toMatchObject({ agent: "loopback-peer", state: "failed", attempts: 1 });
    expect(done.recipients[0].last_error).toMatch(/resolves to 127\.0\.0\.1.*allowPrivateTargets/);
    expect(trap.requests).toEqual([]);
  });

  it("refuses an IP literal on loopback and the cloud metadata address", async () => {
    for (const to of ["literal-peer", "metadata-peer"]) {
      const sent = await send(g.localApiUrl, { to, text: "hi" });
      const done = await untilState(g.localApiUrl, sent.body.message_id, "failed");
      expect(done.recipients[0].last_error, to).toMatch(
        /special address, not allowed by spec\.network\.allowPrivateTargets/,
      );
    }
    expect(trap.requests).toEqual([]);
  });

  it("still hands accepted messages to the handler on the pod's loopback", async () => {
    const m = signed(friend, guarded.agentId);
    expect((await g.post(m)).status).toBe(202);
    await waitFor("the handler on loopback", () =>
      handler.received.some((r) => r.body.headers.message_id === m.headers.message_id),
    );
  });

  it("reaches a loopback peer when spec.network.allowPrivateTargets allows it", async () => {
    const sent = await send(o.localApiUrl, { to: "loopback-peer", text: "hi" });
    await untilState(o.localApiUrl, sent.body.message_id, "delivered");
    expect(trap.requests).toContain("POST /.well-known/agent/inbox");
  });

  it("never posts to a plaintext inbox a peer's identity document names (spec 5.2)", async () => {
    const sent = await send(o.localApiUrl, { to: "plaintext-peer", text: "secret" });
    const done = await untilState(o.localApiUrl, sent.body.message_id, "failed");
    expect(done.recipients[0].last_error).toMatch(/not https/);
    await consistently("nothing over plain HTTP", () => plain.requests.length === 0, 500);
    expect(plainInboxPeer.requests.some((r) => r.includes("/identity"))).toBe(true);
  });
});

describe("the HTTP client's target policy", () => {
  it("checks the address a name resolves to, on the connection it makes, and lets trusted calls through", async () => {
    const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (_req, res) => res.writeHead(200).end("ok"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    const strict = new HttpClient({ extraCa: tls.ca, targets: new TargetPolicy() });
    const allowing = new HttpClient({ extraCa: tls.ca, targets: new TargetPolicy(["127.0.0.1/32"]) });
    try {
      for (const url of [
        `https://localhost:${port}/`,
        `https://127.0.0.1:${port}/`,
        `https://[::ffff:127.0.0.1]:${port}/`,
        `https://0.0.0.0:${port}/`,
      ]) {
        const err = await strict.request(url).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(isTargetRefused(err), url).toBe(true);
      }
      expect(isTargetRefused(await strict.request(`http://example.com/`).catch((e: unknown) => e))).toBe(true);
      expect((await strict.request(`https://localhost:${port}/`, { trusted: true })).status).toBe(200);
      expect((await allowing.request(`https://localhost:${port}/`)).status).toBe(200);
    } finally {
      await Promise.all([strict.close(), allowing.close()]);
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

/**
 * The IPv6 forms that carry an IPv4 address, each written for loopback, a private address and
 * the cloud metadata service: IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64 (well-known
 * and local-use), 6to4 and Teredo (server; client with its bits inverted).
 */
const EMBEDDED_FORMS = ["7f00:1", "a01:203", "a9fe:a9fe"].flatMap((h) => {
  const inverted = h
    .split(":")
    .map((g) => (~parseInt(g, 16) & 0xffff).toString(16))
    .join(":");
  return [
    `::ffff:${h}`,
    `::ffff:0:${h}`,
    `::${h}`,
    `64:ff9b::${h}`,
    `64:ff9b:1::${h}`,
    `2002:${h}::1`,
    `2001:0:${h}::f7f7:f7f7`,
    `2001:0:4136:e378:8000:63bf:${inverted}`,
  ];
});

describe("the HTTP client and IPv6 forms of special addresses", () => {
  it("refuses each form before connecting, also where the IPv6 block is allowed", async () => {
    const server = createHttpsServer({ cert: tls.cert, key: tls.key }, (_req, res) => res.writeHead(200).end("ok"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    let connections = 0;
    server.on("connection", () => connections++);
    const policies = [new TargetPolicy(), new TargetPolicy(["::/0"])];
    const clients = policies.map((targets) => new HttpClient({ extraCa: tls.ca, targets }));
    try {
      for (const [i, client] of clients.entries()) {
        for (const address of EMBEDDED_FORMS) {
          // The policy is asked first: a policy that let the address through would send this
          // test's request off the machine, so the test stops there instead.
          expect(policies[i]!.refusal(address), address).toMatch(/special address/);
          const err = await client.request(`https://[${address}]:${port}/`).then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(isTargetRefused(err), address).toBe(true);
          // The streaming request (a relay's event stream) is checked the same way.
          const streamed = await client
            .stream(`https://[${address}]:${port}/relay/events`, { signal: AbortSignal.timeout(10_000) })
            .then(
              () => undefined,
              (e: unknown) => e,
            );
          expect(isTargetRefused(streamed), `stream ${address}`).toBe(true);
        }
      }
      expect(connections).toBe(0);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe("relay webhook registrations", () => {
  let env: RelayEnv;
  beforeAll(async () => {
    env = await relayEnv();
  });
  afterAll(async () => {
    await env?.close();
  });

  it("refuses a webhook on a special address (400) unless spec.network allows it", async () => {
    const strict = await runRelay(env, { network: { allowPrivateTargets: [] } });
    const allowing = await runRelay(env, { network: { allowPrivateTargets: ["127.0.0.0/8"] } });
    try {
      for (const hook of [
        "https://localhost:9/hook",
        "https://127.0.0.1:9/hook",
        "https://169.254.169.254/latest",
        "https://[::1]:9/hook",
        "https://10.0.0.1/hook",
      ]) {
        const f = await failure(clientOf(env, strict, alice).registerWebhook(hook));
        expect(f, hook).toMatchObject({ status: 400, code: "invalid_format" });
        expect(f.message, hook).toMatch(/webhook refused/);
      }
      expect((await clientOf(env, strict, alice).subscriptions()).push).toBeNull();
      expect(await clientOf(env, allowing, alice).registerWebhook("https://localhost:9/hook")).toMatchObject({
        push: { webhook: "https://localhost:9/hook" },
      });
    } finally {
      await Promise.all([strict.close(), allowing.close()]);
    }
  });

  it("refuses a webhook on any IPv6 form of a special IPv4 address (400), also where the IPv6 block is allowed", async () => {
    const strict = await runRelay(env, { network: { allowPrivateTargets: [] } });
    const wide = await runRelay(env, { network: { allowPrivateTargets: ["::/0"] } });
    try {
      for (const relay of [strict, wide]) {
        for (const address of EMBEDDED_FORMS) {
          const f = await failure(clientOf(env, relay, alice).registerWebhook(`https://[${address}]:9/hook`));
          expect(f, address).toMatchObject({ status: 400, code: "invalid_format" });
          expect(f.message, address).toMatch(/webhook refused: .*special address/);
        }
        expect((await clientOf(env, relay, alice).subscriptions()).push).toBeNull();
      }
    } finally {
      await Promise.all([strict.close(), wide.close()]);
    }
  });
});
