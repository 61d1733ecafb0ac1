// The hand-off signature (docs/agent.md#hand-off-signature) on a real runtime and a real
// nats-server: the application checks each hand-off with the SDK's verifier, behind a proxy that
// alters what it forwards, as anything on the path to spec.handler.url could. The v2 signature
// covers the headers the application acts on, so an altered Ifp-Sender, Ifp-Auth-Level,
// Ifp-Auth-Source, Ifp-Encrypted or message id is refused, and the same hand-off untouched is
// taken. Also: the local API's message stream hands on the same fields.
import { createServer, request, type IncomingHttpHeaders, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { waitFor } from "../../../e2e/support/ports.ts";
import { handoffSignatureProblem } from "../../src/protocol/handoff-signature.ts";
import { LocalApiClient } from "../../src/client/local.ts";
import { didKeyFromPublicKey } from "../../src/protocol/did-key.ts";
import { runAgent, type Tls, withNatsAndTls } from "../support/agent-harness.ts";
import { identity, peerOf, signed } from "../support/fixtures.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const secret = "the-hand-off-secret-0123456789";
const pete = identity("pete-agent");
/** A stranger's fresh did:key: level 1 (docs/identity.md). */
const stranger = (() => {
  const id = identity("placeholder");
  const did = didKeyFromPublicKey(id.publicKey);
  return { ...id, agentId: did, signing: { ...id.signing, agentId: did } };
})();

const listen = async (server: Server) => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  return typeof addr === "object" && addr ? addr.port : 0;
};
const close = (server: Server) =>
  new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  });
const readAll = (req: NodeJS.ReadableStream) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });

interface Checked {
  messageId: string;
  headers: IncomingHttpHeaders;
  problem: string | undefined;
}

/** The application: believes a hand-off only when the SDK finds it signed (else 401, and the runtime tries again). */
async function application() {
  const checked: Checked[] = [];
  const server = createServer(async (req, res) => {
    const raw = await readAll(req);
    const problem = handoffSignatureProblem(secret, req.headers, raw);
    checked.push({ messageId: JSON.parse(raw.toString()).headers.message_id, headers: req.headers, problem });
    res.writeHead(problem ? 401 : 200).end();
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${port}/`, checked, close: () => close(server) };
}

/** Forwards hand-offs to `target`, first applying the alteration set for that message id (once). */
async function tamperingProxy(target: string) {
  const alter = new Map<string, (h: Record<string, string>) => void>();
  const server = createServer(async (req, res) => {
    const raw = await readAll(req);
    const headers = Object.fromEntries(
      Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "connection"),
    ) as Record<string, string>;
    const id = JSON.parse(raw.toString()).headers.message_id as string;
    alter.get(id)?.(headers);
    alter.delete(id);
    const out = request(
      target,
      { method: "POST", headers: { ...headers, "content-length": String(raw.length) } },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502).end();
        answer.resume();
      },
    );
    out.on("error", () => res.writeHead(502).end());
    out.end(raw);
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${port}/`, alter, close: () => close(server) };
}

describe("hand-off signature v2 on a real runtime", () => {
  let app: Awaited<ReturnType<typeof application>>;
  let proxy: Awaited<ReturnType<typeof tamperingProxy>>;
  let agent: Awaited<ReturnType<typeof runAgent>>;

  beforeAll(async () => {
    app = await application();
    proxy = await tamperingProxy(app.url);
    agent = await runAgent({
      self: identity("checked-agent"),
      natsUrl: nats.url,
      tls,
      handoffSecret: secret,
      spec: { peers: [peerOf(pete)], handler: { url: proxy.url } },
    });
  });
  afterAll(async () => {
    await agent?.close();
    await Promise.all([proxy?.close(), app?.close()]);
  });

  const attempts = (id: string) => app.checked.filter((c) => c.messageId === id);

  it("is taken untouched, and names the v2 scheme", async () => {
    const m = signed(pete, "checked-agent");
    expect((await agent.post(m)).status).toBe(202);
    const [got] = await waitFor(
      "the hand-off",
      () => (attempts(m.headers.message_id).length ? attempts(m.headers.message_id) : undefined),
      30_000,
    );
    expect(got!.problem).toBeUndefined();
    expect(got!.headers["ifp-handoff-signature"]).toMatch(/^t=\d+,v2=[0-9a-f]{64}$/);
    expect(got!.headers).toMatchObject({
      "ifp-sender": "pete-agent",
      "ifp-auth-level": "2",
      "ifp-auth-source": "peers",
    });
  });

  const cases: [string, () => ReturnType<typeof signed>, (h: Record<string, string>) => void][] = [
    [
      "Ifp-Sender changed to a peer's id",
      () => signed(stranger, "checked-agent"),
      (h) => void (h["ifp-sender"] = "pete-agent"),
    ],
    ["Ifp-Auth-Level raised", () => signed(stranger, "checked-agent"), (h) => void (h["ifp-auth-level"] = "2")],
    ["Ifp-Auth-Source changed", () => signed(stranger, "checked-agent"), (h) => void (h["ifp-auth-source"] = "peers")],
    [
      "Ifp-Encrypted added to a clear message",
      () => signed(pete, "checked-agent"),
      (h) => void (h["ifp-encrypted"] = "x25519-a256gcm"),
    ],
    ["Ifp-Message-Id changed", () => signed(pete, "checked-agent"), (h) => void (h["ifp-message-id"] = "msg:another")],
    [
      "Idempotency-Key changed",
      () => signed(pete, "checked-agent"),
      (h) => void (h["idempotency-key"] = "pete-agent msg:another"),
    ],
  ];
  for (const [what, make, alteration] of cases) {
    it(`refuses a hand-off with ${what} in transit, and takes it untouched on the next attempt`, async () => {
      const m = make();
      proxy.alter.set(m.headers.message_id, alteration);
      expect((await agent.post(m)).status).toBe(202);
      const [first, second] = await waitFor(
        "two attempts",
        () => (attempts(m.headers.message_id).length >= 2 ? attempts(m.headers.message_id) : undefined),
        30_000,
      );
      expect(first!.problem).toMatch(/does not match/);
      expect(second!.problem).toBeUndefined();
      expect(second!.headers["ifp-delivery-attempt"]).toBe("2");
    });
  }
});

describe("the local API's message stream", () => {
  it("hands on the fields a hand-off carries: sender, level and where the key came from", async () => {
    const agent = await runAgent({
      self: identity("pulling-agent"),
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(pete)] },
    });
    try {
      const fromPeer = signed(pete, "pulling-agent");
      const fromStranger = signed(stranger, "pulling-agent");
      for (const m of [fromPeer, fromStranger]) expect((await agent.post(m)).status).toBe(202);
      const local = new LocalApiClient(agent.localApiUrl);
      const got: Awaited<ReturnType<typeof local.pull>> = [];
      await waitFor("both messages", async () => got.push(...(await local.pull(10, 1))) >= 2, 30_000);
      got.sort((a, b) => a.seq - b.seq);
      expect(got[0]).toMatchObject({
        message_id: fromPeer.headers.message_id,
        sender: "pete-agent",
        auth_level: 2,
        auth_source: "peers",
        delivery_attempt: 1,
      });
      expect(got[1]).toMatchObject({
        message_id: fromStranger.headers.message_id,
        sender: stranger.agentId,
        auth_level: 1,
        auth_source: "did:key",
      });
      expect(got[1]).not.toHaveProperty("encrypted");
    } finally {
      await agent.close();
    }
  });
});
