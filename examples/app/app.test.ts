// The example application as it runs in a pod: `node examples/app/main.ts` configured by its
// environment, next to a real agent runtime (real NATS, real TLS between the agents).
import { createServer as createHttpServer, request } from "node:http";
import { createServer } from "node:https";
import { describe, expect, it, onTestFinished } from "vitest";
import type { NatsServer } from "../../e2e/support/nats.ts";
import { consistently, freePort, waitFor } from "../../e2e/support/ports.ts";
import { spawnProcess, type ManagedProcess } from "../../e2e/support/process.ts";
import { runAgent, startHandler, type Tls, withNatsAndTls } from "../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed, type TestIdentity } from "../../runtime/test/support/fixtures.ts";
import { signHandoff } from "../../runtime/src/protocol/handoff-signature.ts";

let nats: NatsServer;
let tls: Tls;
withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

const MAIN = new URL("./main.ts", import.meta.url).pathname;

/** The app as a process: `node examples/app/main.ts` with its environment. */
function startApp(name: string, env: Record<string, string>): ManagedProcess {
  const p = spawnProcess(name, process.execPath, [MAIN], { env: { PATH: process.env.PATH, ...env } });
  onTestFinished(async () => void (await p.stop()));
  return p;
}

async function listening(app: ManagedProcess): Promise<void> {
  await waitFor(
    `${app.name} to listen`,
    () =>
      app.exit
        ? Promise.reject(new Error(`${app.name} ended:\n${app.log()}`))
        : /^listening for hand-offs on /m.test(app.log()),
    30_000,
    100,
  );
}

/** The app's log lines that start with `prefix`. */
const lines = (app: ManagedProcess, prefix: string) =>
  app
    .log()
    .split("\n")
    .filter((l) => l.startsWith(prefix));

/** An agent runtime whose handler is the app at `appPort`; its peers are reached on loopback. */
async function agentWithApp(
  self: TestIdentity,
  port: number,
  appPort: number,
  peers: { id: TestIdentity; port?: number }[],
) {
  const agent = await runAgent({
    self,
    natsUrl: nats.url,
    tls,
    port,
    spec: {
      peers: peers.map((p) => ({ ...peerOf(p.id), ...(p.port ? { url: `https://localhost:${p.port}` } : {}) })),
      handler: { url: `http://127.0.0.1:${appPort}` },
    },
  });
  onTestFinished(() => agent.close());
  return agent;
}

/** A peer still starting, on `port` of loopback: HTTPS that answers 503 to everything, counting the asks for its capability document. */
async function stillStarting(port: number) {
  let asked = 0;
  const server = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    if (req.url === "/.well-known/agent/capabilities") asked++;
    res
      .writeHead(503, { "content-type": "application/json" })
      .end('{"status":"error","code":"unavailable","message":"starting"}');
  });
  await new Promise<void>((r, j) => server.once("error", j).listen(port, "127.0.0.1", () => r()));
  let closed: Promise<void> | undefined;
  return {
    get asked() {
      return asked;
    },
    close: () =>
      (closed ??= new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      })),
  };
}

/** Two agents, each with the app as its handler, that know each other's address and key. */
async function pair(tag: string, env: { alice?: Record<string, string>; bob?: Record<string, string> } = {}) {
  const ids = { alice: identity(`alice-${tag}`), bob: identity(`bob-${tag}`) };
  const [aPort, bPort, aApp, bApp] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const [alice, bob] = await Promise.all([
    agentWithApp(ids.alice, aPort, aApp, [{ id: ids.bob, port: bPort }]),
    agentWithApp(ids.bob, bPort, bApp, [{ id: ids.alice, port: aPort }]),
  ]);
  const bobApp = startApp("bob's app", { IFP_APP_PORT: String(bApp), IFP_LOCAL_API: bob.localApiUrl, ...env.bob });
  await listening(bobApp);
  const aliceApp = startApp("alice's app", {
    IFP_APP_PORT: String(aApp),
    IFP_LOCAL_API: alice.localApiUrl,
    ...env.alice,
  });
  await listening(aliceApp);
  return { ids, alice, bob, aliceApp, bobApp };
}

describe("the example application", () => {
  it("logs a hand-off in one line and its reply, threaded and marked automatic, reaches the sender", async () => {
    const ids = { alice: identity("alice-handoff"), bob: identity("bob-handoff") };
    // bob is a runtime whose handler records what reaches it.
    const recorder = await startHandler();
    onTestFinished(() => recorder.close());
    const bob = await runAgent({
      self: ids.bob,
      natsUrl: nats.url,
      tls,
      spec: { peers: [peerOf(ids.alice)], handler: { url: recorder.url } },
    });
    onTestFinished(() => bob.close());
    const appPort = await freePort();
    const alice = await agentWithApp(ids.alice, 0, appPort, [{ id: ids.bob, port: Number(new URL(bob.url).port) }]);
    // The runtime is up before the app, as a sidecar may start after it: the hand-off waits.
    const sent = signed(
      ids.bob,
      ids.alice.agentId,
      { phase: "context", conversation_id: "conv:handoff" },
      "Line one\nline two \u001b[31m",
    );
    expect((await alice.post(sent)).status).toBe(202);
    const app = startApp("alice's app", { IFP_APP_PORT: String(appPort), IFP_LOCAL_API: alice.localApiUrl });

    const received = await waitFor("the received line", () => lines(app, "received ")[0], 30_000);
    expect(received).toBe(
      `received context ${sent.headers.message_id} from bob-handoff thread conv:handoff: "Line one\\nline two \\u001b[31m"`,
    );
    const replied = await waitFor("the replied line", () => lines(app, "replied ")[0], 30_000);
    expect(replied).toMatch(
      /^replied msg:reply-[0-9a-f]{32} to bob-handoff thread conv:handoff: "Got your context message: “Line one line two \\u001b\[31m”"$/,
    );

    const got = await waitFor(
      "the reply at bob",
      () => recorder.received.find((r) => r.body.headers.thread?.in_reply_to === sent.headers.message_id),
      30_000,
    );
    expect(got.headers["ifp-sender"]).toBe("alice-handoff");
    expect(got.body.headers).toMatchObject({
      from: { agent: "alice-handoff" },
      to: [{ agent: "bob-handoff" }],
      conversation_id: "conv:handoff",
      sequence: sent.headers.sequence + 1,
      phase: "context",
      thread: { in_reply_to: sent.headers.message_id, references: [sent.headers.message_id] },
      extensions: { "auto-submitted": "auto-replied" },
    });
    expect(got.body.body.text).toBe("Got your context message: “Line one line two \u001b[31m”");
    expect(replied).toContain(got.body.headers.message_id);

    // The same message handed off again (at least once) is not answered twice.
    const again = await fetch(`http://127.0.0.1:${appPort}/`, {
      method: "POST",
      headers: { "content-type": "application/json", "ifp-sender": "bob-handoff" },
      body: JSON.stringify(sent),
    });
    expect(again.status).toBe(200);
    await consistently(
      "one received and one replied line",
      () => lines(app, "received ").length === 1 && lines(app, "replied ").length === 1,
      1_500,
      100,
    );
  });

  it("answers a malformed hand-off with 400 and the error body, and keeps working", async () => {
    const port = await freePort();
    // No local API behind it: only the checks of the hand-off are exercised here, and a valid
    // hand-off whose reply cannot be queued is answered 503 (retried by the runtime, never lost).
    const app = startApp("app", {
      IFP_APP_PORT: String(port),
      IFP_LOCAL_API: `http://127.0.0.1:${await freePort()}`,
      IFP_APP_MAX_BODY_BYTES: "4096",
    });
    await listening(app);
    const url = `http://127.0.0.1:${port}`;
    const post = (body: string, type = "application/json", path = "/") =>
      fetch(`${url}${path}`, { method: "POST", headers: { "content-type": type }, body });
    const good = signed(identity("x-agent"), "y-agent");
    const without = (path: string[]) => {
      const m = structuredClone(good) as any;
      let o = m;
      for (const k of path.slice(0, -1)) o = o[k];
      delete o[path.at(-1)!];
      return JSON.stringify(m);
    };
    const cases: [string, Promise<Response>, number, string, RegExp][] = [
      ["not JSON", post("{nope"), 400, "invalid_format", /not JSON/],
      ["an array", post("[]"), 400, "invalid_format", /not a JSON object/],
      ["null", post("null"), 400, "invalid_format", /not a JSON object/],
      ["no headers", post(JSON.stringify({ ifp: 4, body: {} })), 400, "invalid_format", /headers is not an object/],
      ["no message_id", post(without(["headers", "message_id"])), 400, "invalid_format", /headers\.message_id/],
      ["no sender", post(without(["headers", "from"])), 400, "invalid_format", /headers\.from\.agent/],
      [
        "no recipients",
        post(JSON.stringify({ ...good, headers: { ...good.headers, to: [] } })),
        400,
        "invalid_format",
        /headers\.to/,
      ],
      [
        "a fractional sequence",
        post(JSON.stringify({ ...good, headers: { ...good.headers, sequence: 1.5 } })),
        400,
        "invalid_format",
        /headers\.sequence/,
      ],
      [
        "a huge message_id",
        post(JSON.stringify({ ...good, headers: { ...good.headers, message_id: "m".repeat(257) } })),
        400,
        "invalid_format",
        /message_id/,
      ],
      [
        "thread.references not strings",
        post(JSON.stringify({ ...good, headers: { ...good.headers, thread: { references: [1] } } })),
        400,
        "invalid_format",
        /references/,
      ],
      [
        "a text that is not a string",
        post(JSON.stringify({ ...good, body: { text: { a: 1 } } })),
        400,
        "invalid_format",
        /body\.text/,
      ],
      ["no body", post(without(["body"])), 400, "invalid_format", /body is not an object/],
      ["text/plain", post(JSON.stringify(good), "text/plain"), 415, "unsupported_media_type", /application\/json/],
      [
        "over IFP_APP_MAX_BODY_BYTES",
        post(JSON.stringify({ ...good, body: { text: "x".repeat(5000) } })),
        413,
        "payload_too_large",
        /4096 bytes/,
      ],
      ["a GET elsewhere than /healthz", fetch(`${url}/messages`), 404, "not_found", /POSTed/],
      [
        "a valid hand-off while the local API is down",
        post(JSON.stringify(good)),
        503,
        "unavailable",
        /could not be queued/,
      ],
    ];
    for (const [what, res, status, code, message] of cases) {
      const r = await res;
      const body = (await r.json()) as { code?: string };
      expect({ what, status: r.status, code: body.code }).toEqual({ what, status, code });
      expect(body, what).toMatchObject({ status: "error", message: expect.stringMatching(message) });
    }
    // A chunked body is counted as it arrives and cut off at the limit.
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = request(
        `${url}/`,
        { method: "POST", headers: { "content-type": "application/json", "transfer-encoding": "chunked" } },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on("error", reject);
      for (let i = 0; i < 10; i++) req.write("x".repeat(1000));
      req.end();
    });
    expect(chunked).toBe(413);
    expect(app.exit).toBeUndefined();
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect(lines(app, "refused a hand-off (400)").length).toBe(12);
  });

  it("with IFP_HANDOFF_SECRET, takes its runtime's signed hand-offs and refuses anyone else's, or one altered on the way, with 401", async () => {
    const secret = "hand-off-secret-for-the-app-test";
    const self = identity("signed-app-agent");
    const sender = identity("signed-app-sender");
    const appPort = await freePort();
    // Between the runtime and the app: a hop that changes Ifp-Sender on the first attempt only.
    let alter = true;
    const hop = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const headers = {
          ...req.headers,
          host: `127.0.0.1:${appPort}`,
          ...(alter ? { "ifp-sender": "someone-else-agent" } : {}),
        };
        alter = false;
        const out = request(`http://127.0.0.1:${appPort}/`, { method: "POST", headers }, (answer) => {
          res.writeHead(answer.statusCode ?? 502).end();
          answer.resume();
        });
        out.on("error", () => res.writeHead(502).end());
        out.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((r) => hop.listen(0, "127.0.0.1", r));
    onTestFinished(() => new Promise<void>((r) => (hop.closeAllConnections(), hop.close(() => r()))));
    const hopPort = (hop.address() as { port: number }).port;
    const agent = await runAgent({
      self,
      natsUrl: nats.url,
      tls,
      handoffSecret: secret,
      spec: { peers: [peerOf(sender)], handler: { url: `http://127.0.0.1:${hopPort}` } },
    });
    onTestFinished(() => agent.close());
    const app = startApp("app", {
      IFP_APP_PORT: String(appPort),
      IFP_LOCAL_API: agent.localApiUrl,
      IFP_HANDOFF_SECRET: secret,
      IFP_APP_MAX_REPLIES: "0",
    });
    await listening(app);
    // Someone else on the pod's network hands it a message, unsigned or signed with another secret.
    const forged = JSON.stringify(signed(sender, self.agentId));
    const forgedHeaders = { "ifp-sender": sender.agentId, "ifp-auth-level": "2" };
    for (const headers of [
      {},
      { "ifp-handoff-signature": signHandoff("a-secret-someone-guessed", forgedHeaders, forged) },
    ]) {
      const res = await fetch(`http://127.0.0.1:${appPort}/`, {
        method: "POST",
        headers: { "content-type": "application/json", ...forgedHeaders, ...headers },
        body: forged,
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({
        code: "unauthorized",
        message: expect.stringMatching(/^not a hand-off from this agent's runtime: /),
      });
    }
    // The runtime's own hand-off, its Ifp-Sender changed on the way, is refused; its next attempt, untouched, is taken.
    const m = signed(sender, self.agentId);
    expect((await agent.post(m)).status).toBe(202);
    await waitFor(
      "the hand-off logged",
      () => lines(app, "received ").some((l) => l.includes(m.headers.message_id.slice(0, 8))),
      30_000,
      100,
    );
    expect(lines(app, "received ")).toHaveLength(1);
    expect(lines(app, "received ")[0]).toContain(`from ${sender.agentId}`);
    expect(lines(app, "refused a hand-off (401)")).toHaveLength(3);
    expect(lines(app, "refused a hand-off (401)")[2]).toMatch(/the hand-off signature does not match/);
    expect(app.log()).not.toContain("someone-else-agent thread");
  });

  it("refuses a wrong configuration with exit code 2 and names the variable", async () => {
    for (const [env, message] of [
      [{ IFP_APP_PORT: "http" }, /IFP_APP_PORT="http": expected a whole number/],
      [{ IFP_APP_PORT: "70000" }, /IFP_APP_PORT/],
      [{ IFP_LOCAL_API: "127.0.0.1:8081" }, /IFP_LOCAL_API="127.0.0.1:8081": not a URL/],
      [{ IFP_LOCAL_API: "file:///etc/passwd" }, /IFP_LOCAL_API="file:\/\/\/etc\/passwd": expected an http\(s\) URL/],
      [{ IFP_APP_MAX_REPLIES: "-1" }, /IFP_APP_MAX_REPLIES/],
      [{ IFP_APP_ANSWER_REPLIES: "maybe" }, /IFP_APP_ANSWER_REPLIES="maybe": expected true or false/],
    ] as const) {
      const app = startApp("app", env);
      const exit = await app.exited;
      expect(exit.code, app.log()).toBe(2);
      expect(app.log()).toMatch(message);
    }
  });

  it("greets a peer at start; the peer's app answers and the greeter's app logs the answer, and answers nothing more", async () => {
    const { aliceApp, bobApp } = await pair("greet", {
      alice: { IFP_APP_GREET: "bob-greet", IFP_APP_GREET_TEXT: "Hello Bob" },
    });
    const greeting = await waitFor(
      "the greeting at bob",
      () => /^received greeting (msg:\S+) from alice-greet thread (\S+): "Hello Bob"$/m.exec(bobApp.log()) ?? undefined,
      30_000,
    );
    const [, greetingId, thread] = greeting;
    const answer = await waitFor("the answer at alice", () => lines(aliceApp, "received greeting ")[0], 30_000);
    expect(answer).toMatch(
      new RegExp(
        `^received greeting msg:reply-[0-9a-f]{32} from bob-greet thread ${thread} in reply to ${greetingId}: "Got your greeting message: “Hello Bob”"$`,
      ),
    );
    await waitFor("alice's app to decide", () => lines(aliceApp, "no reply to ").length === 1, 30_000);
    expect(lines(aliceApp, "no reply to ")[0]).toMatch(/: it is an automatic reply$/);
    await waitFor(
      "the greeting delivered",
      () => lines(aliceApp, "greeting ").some((l) => l.endsWith(": delivered")),
      30_000,
    );
    await consistently(
      "no more messages",
      () => lines(aliceApp, "received ").length === 1 && lines(bobApp, "received ").length === 1,
      3_000,
      200,
    );
  });

  it("waits for a peer that is still starting before it greets, so the greeting does not wait out the first retry pause", async () => {
    const ids = { alice: identity("alice-late"), bob: identity("bob-late") };
    const [aPort, bPort, aApp, bApp] = [await freePort(), await freePort(), await freePort(), await freePort()];
    // Until bob starts, his address answers 503 to every request, and counts the asks for his capability document.
    const starting = await stillStarting(bPort);
    onTestFinished(() => starting.close());
    const alice = await agentWithApp(ids.alice, aPort, aApp, [{ id: ids.bob, port: bPort }]);
    const aliceApp = startApp("alice's app", {
      IFP_APP_PORT: String(aApp),
      IFP_LOCAL_API: alice.localApiUrl,
      IFP_APP_GREET: "bob-late",
      IFP_APP_GREET_TEXT: "Hello late Bob",
    });
    await listening(aliceApp);
    await waitFor(
      "alice's app to wait for bob",
      () => lines(aliceApp, "waiting for bob-late to answer").length === 1,
      30_000,
      100,
    );
    // bob comes up a while later; the greeting's first attempt would otherwise have failed and
    // waited IFP-6's first pause (one minute), longer than this test waits.
    const asks = starting.asked;
    await waitFor(
      "alice's app to look for bob again (and be told he is not there)",
      () => starting.asked > asks,
      30_000,
      100,
    );
    await consistently("no greeting while bob is not up", () => lines(aliceApp, "greeted ").length === 0, 1_000, 100);
    await starting.close();
    const bob = await agentWithApp(ids.bob, bPort, bApp, [{ id: ids.alice, port: aPort }]);
    const bobApp = startApp("bob's app", { IFP_APP_PORT: String(bApp), IFP_LOCAL_API: bob.localApiUrl });
    await listening(bobApp);
    await waitFor(
      "the greeting delivered",
      () => lines(aliceApp, "greeting ").some((l) => l.endsWith(": delivered")),
      40_000,
      200,
    );
  });

  it("two apps that answer automatic replies too stop at IFP_APP_MAX_REPLIES per conversation", async () => {
    const env = { IFP_APP_ANSWER_REPLIES: "true", IFP_APP_MAX_REPLIES: "2" };
    const { aliceApp, bobApp } = await pair("loop", { alice: { ...env, IFP_APP_GREET: "bob-loop" }, bob: env });
    // greeting → bob's 1st reply → alice's 1st → bob's 2nd → alice's 2nd → bob stops.
    await waitFor("bob to reach its limit", () => lines(bobApp, "no reply to ").length === 1, 30_000, 200);
    expect(lines(bobApp, "no reply to ")[0]).toMatch(/: 2 replies were sent in this conversation already$/);
    await consistently(
      "the exchange to stay ended",
      () => lines(bobApp, "received ").length === 3 && lines(aliceApp, "received ").length === 2,
      4_000,
      200,
    );
    expect(lines(bobApp, "replied ").length).toBe(2);
    expect(lines(aliceApp, "replied ").length).toBe(2);
    // Only the first greeting is answered with a greeting; the rest of the exchange is context.
    expect(lines(aliceApp, "received ").map((l) => l.split(" ")[1])).toEqual(["greeting", "context"]);
    const threads = new Set(
      [...lines(aliceApp, "received "), ...lines(bobApp, "received ")].map((l) => / thread (\S+?):? /.exec(l)?.[1]),
    );
    expect(threads.size).toBe(1);
  });
});
