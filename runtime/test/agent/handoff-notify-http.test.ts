// The hand-off to the handler and the notify webhook go through the runtime's one HTTP client:
// TLS trusted through --ca-file, redirects never followed.
import { createServer as createHttpServer, type RequestListener } from "node:http";
import { createServer } from "node:https";
import { describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";

const pete = identity("pete-agent");

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

/**
 * An HTTPS endpoint whose certificate only the test CA (given to the runtime as --ca-file)
 * vouches for; or plain HTTP, where trust is not the question.
 */
async function endpoint(
  answer: () => { status: number; headers?: Record<string, string> },
  opts: { plain?: boolean } = {},
) {
  const calls: { path: string; method: string; body: string }[] = [];
  const listener: RequestListener = (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      calls.push({ path: req.url ?? "", method: req.method ?? "", body: Buffer.concat(chunks).toString() });
      const a = answer();
      res.writeHead(a.status, a.headers ?? {}).end();
    });
  };
  const server = opts.plain ? createHttpServer(listener) : createServer({ cert: tls.cert, key: tls.key }, listener);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  const base = `${opts.plain ? "http://127.0.0.1" : "https://localhost"}:${typeof addr === "object" && addr ? addr.port : 0}`;
  return {
    base,
    calls,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe("outbound HTTP of the agent runtime", () => {
  it("hands off to an https handler trusted through --ca-file", async () => {
    const handler = await endpoint(() => ({ status: 200 }));
    const agent = await runAgent({
      self: identity("ca-agent"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: `${handler.base}/messages` } },
    });
    try {
      const m = signed(pete, "ca-agent");
      expect((await agent.post(m)).status).toBe(202);
      await waitFor("the hand-off", () => handler.calls.length > 0, 30_000);
      expect(JSON.parse(handler.calls[0]!.body).headers.message_id).toBe(m.headers.message_id);
    } finally {
      await agent.close();
      await handler.close();
    }
  });

  it("does not follow a handler's redirect: the message is retried at the handler's own URL", async () => {
    const elsewhere = await endpoint(() => ({ status: 200 }), { plain: true });
    const handler = await endpoint(() => ({ status: 307, headers: { location: `${elsewhere.base}/elsewhere` } }), {
      plain: true,
    });
    const agent = await runAgent({
      self: identity("redirected-agent"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)], handler: { url: `${handler.base}/messages` } },
    });
    try {
      expect((await agent.post(signed(pete, "redirected-agent"))).status).toBe(202);
      await waitFor("a retry at the handler", () => handler.calls.length >= 2, 30_000);
      expect(handler.calls.every((c) => c.path === "/messages" && c.method === "POST")).toBe(true);
      expect(elsewhere.calls).toEqual([]);
    } finally {
      await agent.close();
      await handler.close();
      await elsewhere.close();
    }
  });

  it("POSTs the notification to an https spec.notify.url trusted through --ca-file", async () => {
    const notify = await endpoint(() => ({ status: 204 }));
    const agent = await runAgent({
      self: identity("notifying-agent"),
      natsUrl: nats.url,
      tls,
      spec: {
        peers: [{ ...peerOf(identity("gone")), url: "https://localhost:1" }],
        outbound: { backoff: ["200ms"], retryFor: "1s" },
        notify: { url: `${notify.base}/notify` },
      },
    });
    try {
      const sent = await new LocalApiClient(agent.localApiUrl).send({ to: "gone", text: "is anyone there?" });
      await waitFor("the notification", () => notify.calls.length > 0, 30_000);
      expect(JSON.parse(notify.calls[0]!.body)).toMatchObject({
        event: "undeliverable",
        message_id: sent.message_id,
        recipient: "gone",
      });
    } finally {
      await agent.close();
      await notify.close();
    }
  });
});
