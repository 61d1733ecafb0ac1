// `ifp check` against real runtimes (agent and relay over TLS with a real nats-server), and
// against targets with one requirement broken: a TLS proxy in front of the real agent that
// changes one thing about its answers, a sender that breaks the sending rules, a target that
// hangs, and one that answers garbage. Every verdict carries its section and level; only MUST
// misses fail the run unless --strict (SHOULD) or --profile (this project's profile) says so.
import { createServer as httpServer } from "node:http";
import { createServer as httpsServer, request as httpsRequestStream, type Server } from "node:https";
import { createServer as netServer } from "node:net";
import Fastify, { type FastifyInstance } from "fastify";
import WebSocket, { WebSocketServer } from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { HttpClient } from "../../src/net/http-client.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { MAX_REQUESTS } from "../../src/check/probe.ts";
import { CheckUsageError, runChecks } from "../../src/check/runner.ts";
import type { Level, Report } from "../../src/check/types.ts";
import { CHECKS } from "../../src/check/catalog.ts";
import { readFileSync } from "node:fs";
import { runAgent, withNatsAndTls, type Tls } from "../support/agent-harness.ts";
import { identity, peerOf, tempDir, writeKey } from "../support/fixtures.ts";
import { ifpCommand } from "../support/ifp-command.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { baseUrl, runRelay, type RelayEnv } from "../support/relay-harness.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";

const ifp = ifpCommand(60_000);

const checker = identity("ifp-checker");
const dir = tempDir();
let nats: NatsServer;
let tls: Tls;
let agent: Awaited<ReturnType<typeof runAgent>>;
let agentUrl: string;
/** The port of the kit's inbox, where the agent sends the checker's messages (spec.peers[].url). */
let inboxPort: number;
const inbox = () => ({ cert: tls.cert, key: tls.key, port: inboxPort });

withNatsAndTls((n, t) => ([nats, tls] = [n, t]));

beforeAll(async () => {
  inboxPort = await freePort();
  agent = await runAgent({
    self: identity("alice-agent"),
    natsUrl: nats.url,
    tls,
    spec: {
      capabilities: [
        { name: "ping", description: "Responds to connectivity tests" },
        { name: "vault.open", description: "Only for keys bound to a DID", conditions: { minAuthLevel: 3 } },
      ],
      peers: [{ ...peerOf(checker), url: `https://localhost:${inboxPort}` }],
      outbound: { backoff: ["1s", "2s"], retryFor: "5m" },
      // The kit's relays are its own: mark them trusted, so a clear message may go through them.
      encryption: {
        relayTrust: ["relays/r/one", "relays/r/two", "relay-refuse/r/refuse", "relay-refuse/r/down"].map((r) => ({
          url: `https://localhost:${inboxPort}/s/${r}`,
          level: "trusted" as const,
        })),
      },
    },
  });
  agentUrl = agent.url.replace("127.0.0.1", "localhost");
});
afterAll(async () => {
  await agent?.close();
});

const failing = (r: Report, levels?: Level[]) =>
  r.results.filter((x) => x.result === "fail" && (!levels || levels.includes(x.level))).map((x) => x.id);
const outcome = (r: Report, id: string) => r.results.find((x) => x.id === id)?.result;
const explain = (r: Report) =>
  r.results
    .filter((x) => x.result === "fail")
    .map((x) => `${x.id}: ${x.reason}`)
    .join("\n");

describe("ifp check against our own agent", () => {
  it("passes its MUSTs and SHOULDs with a key the agent trusts, the kit's inbox and the local API, within the request budget", async () => {
    const report = await runChecks({
      url: agentUrl,
      key: checker.signing,
      extraCa: tls.ca,
      inbox: inbox(),
      localApi: { url: agent.localApiUrl },
      sendWaitMs: 20_000,
    });
    expect(failing(report), explain(report)).toEqual([]);
    for (const id of [
      "discovery.capabilities.status",
      "discovery.capabilities.etag",
      "discovery.capabilities.not-modified",
      "discovery.capabilities.ifp-support",
      "discovery.identity.schema",
      "tls.version",
      "tls.old-versions-refused",
      "tls.plain-http-refused",
      "tls.redirect-free",
      "inbox.media-type",
      "inbox.not-json",
      "inbox.schema",
      "inbox.oversize",
      "inbox.unsigned",
      "inbox.unknown-sender",
      "inbox.bad-signature",
      "inbox.accepted",
      "inbox.acknowledgement",
      "inbox.acknowledgement.message-id",
      "inbox.idempotent",
      "inbox.large-message",
      "inbox.date-window",
      "inbox.date-future",
      "inbox.protocol-problem",
      "inbox.protocol-problem.reply",
      "inbox.auth-level",
      "inbox.error-body",
      "inbox.error-codes",
      "send.https-only",
      "send.request",
      "send.message",
      "send.idempotency-key",
      "send.signature",
      "send.signature.verifies",
      "send.retry-5xx",
      "send.backoff",
      "send.no-retry-4xx",
      "send.retry-after",
      "send.relay-no-retry-4xx",
      "send.relay-preference",
      "send.relay-fallback",
      "send.relay-signature",
    ]) {
      expect(outcome(report, id), id).toBe("pass");
    }
    expect(outcome(report, "inbox.rate-limit-headers")).toBe("skip");
    expect(report.summary.levels.MUST.fail + report.summary.levels.SHOULD.fail).toBe(0);
    expect(report.summary.levels.MUST.pass).toBeGreaterThan(15);
    expect(report.summary.levels.SHOULD.pass).toBeGreaterThan(15);
    expect(report.requests).toBeLessThanOrEqual(MAX_REQUESTS);
    for (const r of report.results)
      expect(r, r.id).toMatchObject({
        level: CHECKS[r.id as keyof typeof CHECKS].level,
        section: CHECKS[r.id as keyof typeof CHECKS].section,
        reason: expect.stringMatching(/./),
      });
  });

  it("without a local API, the agent's answers to the kit's probes exercise the sending rules", async () => {
    const report = await runChecks({
      url: agentUrl,
      key: checker.signing,
      extraCa: tls.ca,
      inbox: inbox(),
      sendWaitMs: 20_000,
    });
    expect(failing(report), explain(report)).toEqual([]);
    for (const id of [
      "inbox.protocol-problem.reply",
      "send.retry-5xx",
      "send.backoff",
      "send.no-retry-4xx",
      "send.signature.verifies",
    ])
      expect(outcome(report, id), id).toBe("pass");
    expect(report.results.find((r) => r.id === "send.relay-fallback")).toMatchObject({
      result: "skip",
      reason: expect.stringContaining("--local-api"),
    });
    const alone = await runChecks({
      url: agentUrl,
      key: checker.signing,
      extraCa: tls.ca,
      inbox: inbox(),
      only: "send",
    });
    expect(alone.results.find((r) => r.id === "send.retry-5xx")).toMatchObject({
      result: "skip",
      reason: expect.stringContaining("inbox group"),
    });
  });

  it("every check of the catalogue is documented in docs/conformance.md with its section and level", () => {
    const doc = readFileSync(new URL("../../../docs/conformance.md", import.meta.url), "utf8");
    for (const [id, rule] of Object.entries(CHECKS)) {
      const row = doc.split("\n").find((l) => l.startsWith(`| \`${id}\` |`));
      expect(row, id).toBeDefined();
      expect(row, id).toContain(`| ${rule.level} |`);
      expect(row, id).toContain(`| ${rule.section} |`);
    }
  });

  it("without a key runs what needs no trust and skips the rest, saying why", async () => {
    const report = await runChecks({ url: agentUrl, extraCa: tls.ca, only: "inbox" });
    expect(failing(report), explain(report)).toEqual([]);
    expect(outcome(report, "inbox.unknown-sender")).toBe("pass");
    for (const id of ["inbox.accepted", "inbox.idempotent", "inbox.bad-signature", "inbox.date-window"]) {
      expect(report.results.find((r) => r.id === id)).toMatchObject({
        result: "skip",
        reason: expect.stringContaining("needs --key"),
      });
    }
    expect(report.results.some((r) => r.id.startsWith("discovery."))).toBe(false);
  });

  it("the command prints the report, as JSON with --json, and exits 0", async () => {
    const keyFile = writeKey(dir, checker);
    const text = await ifp(
      "check",
      agentUrl,
      "--ca-file",
      tls.files.ca,
      "--key",
      keyFile,
      "--from",
      checker.agentId,
      "--only",
      "discovery",
    );
    expect(text.status, text.stdout + text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^pass {2}MAY {6}discovery\.capabilities\.etag +ETag "/m);
    expect(text.stdout).toMatch(/^MUST {5}\d+ passed, 0 failed, \d+ skipped$/m);
    expect(text.stdout).toMatch(/^total {4}\d+ passed, 0 failed, \d+ skipped; \d+ requests$/m);
    const json = await ifp("check", agentUrl, "--ca-file", tls.files.ca, "--json", "--only", "tls");
    expect(json.status).toBe(0);
    const report = JSON.parse(json.stdout) as Report;
    expect(report).toMatchObject({
      kind: "agent",
      summary: { fail: 0, levels: { MUST: { fail: 0 } } },
      gate: { fails: ["MUST"] },
    });
    expect(report.results.find((r) => r.id === "tls.version")).toMatchObject({
      level: "MUST",
      section: "spec 5.2, 8",
      result: "pass",
    });
  });

  it("refuses http:// and other usage mistakes with exit 2, sending nothing", async () => {
    await expect(runChecks({ url: agentUrl.replace("https:", "http:") })).rejects.toThrow(CheckUsageError);
    await expect(runChecks({ url: "ftp://localhost/" })).rejects.toThrow(/not https/);
    await expect(runChecks({ url: agentUrl, only: "relay" })).rejects.toThrow(
      /--only takes one of discovery, tls, inbox/,
    );
    for (const args of [
      ["check", agentUrl.replace("https:", "http:")],
      ["check"],
      ["check", agentUrl, "--only", "everything"],
      ["check", agentUrl, "--key", "/nonexistent"],
      ["check", agentUrl, "--timeout", "0"],
      ["check", agentUrl, "--local-api", agent.localApiUrl],
      [
        "check",
        agentUrl,
        "--local-api",
        "http://example.com:8081",
        "--inbox-cert",
        tls.files.cert,
        "--inbox-key",
        tls.files.key,
      ],
      ["check", agentUrl, "--inbox-cert", tls.files.cert],
      ["check", agentUrl, "--relay-url", "https://localhost"],
      ["check", agentUrl, "--send-wait", "-1"],
    ]) {
      const r = await ifp(...args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/^ifp: /);
    }
  });
});

describe("ifp check against our own relay", () => {
  let relay: RunningRelay;
  let http: HttpClient;
  let env: RelayEnv;
  const someoneElse = identity("someone-else");
  const served = () => [peerOf(checker), peerOf(someoneElse)];
  beforeAll(async () => {
    http = new HttpClient({ extraCa: tls.ca });
    env = { nats, tls, http, close: async () => undefined };
    relay = await runRelay(env, { agents: served() });
  });
  afterAll(async () => {
    await relay?.close();
    await http?.close();
  });
  /**
   * The relay-group checks against a relay of its own behind a proxy in `mode`. Signatures cover
   * the relay's authority: the relay behind the proxy is configured with the proxy's URL, as a
   * relay behind a proxy is (docs/relay.md).
   */
  const behindProxy = async (mode: Mode, inbox?: { cert: string; key: string }) => {
    let behind: RunningRelay | undefined;
    const proxy = await brokenProxy(mode, () => behind!.url);
    try {
      behind = await runRelay(env, { url: proxy.url, agents: served() });
      const report = await runChecks({
        url: proxy.url,
        relay: true,
        key: checker.signing,
        extraCa: tls.ca,
        only: "relay",
        ...(inbox ? { inbox } : {}),
      });
      return { report, requests: proxy.requests() };
    } finally {
      await proxy.close();
      await behind?.close();
    }
  };

  it("the command checks a relay with --relay and a key the relay serves, and exits 0", async () => {
    const keyFile = writeKey(dir, checker);
    const run = await ifp(
      "check",
      baseUrl(relay),
      "--relay",
      "--relay-url",
      "https://localhost",
      "--key",
      keyFile,
      "--from",
      checker.agentId,
      "--ca-file",
      tls.files.ca,
      "--strict",
      "--profile",
    );
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^pass {2}MUST {5}relay\.publish\.accepted /m);
    expect(run.stdout).toMatch(
      /^pass {2}MUST {5}relay\.trace\.by +by is relay:https:\/\/localhost, the relay's own URL/m,
    );
    // Reached at its port while its own URL (spec.url) is https://localhost: the trace names the latter.
    const elsewhere = await ifp(
      "check",
      baseUrl(relay),
      "--relay",
      "--key",
      keyFile,
      "--from",
      checker.agentId,
      "--ca-file",
      tls.files.ca,
      "--only",
      "relay",
    );
    expect(elsewhere.status).toBe(1);
    expect(elsewhere.stdout).toMatch(/^failing: relay\.trace\.by$/m);
  });

  it("passes every check with a key the relay serves, a second one for topics and the kit's inbox for webhooks", async () => {
    const report = await runChecks({
      url: baseUrl(relay),
      relayUrl: "https://localhost",
      relay: true,
      key: checker.signing,
      peerKey: someoneElse.signing,
      extraCa: tls.ca,
      inbox: { cert: tls.cert, key: tls.key },
    });
    expect(failing(report), explain(report)).toEqual([]);
    for (const id of [
      "tls.version",
      "relay.auth.unsigned",
      "relay.isolation.unknown-agent",
      "relay.auth.wrong-key",
      "relay.auth.stale",
      "relay.auth.digest",
      "relay.publish.media-type",
      "relay.publish.not-json",
      "relay.publish.oversize",
      "relay.publish.accepted",
      "relay.retrieve",
      "relay.trace",
      "relay.trace.by",
      "relay.unchanged",
      "relay.persistence",
      "relay.ttl",
      "relay.push.sse",
      "relay.push.websocket",
      "relay.push.webhook",
      "relay.push.sse.trace",
      "relay.push.websocket.trace",
      "relay.push.webhook.trace",
      "relay.push.webhook.https-only",
      "relay.topics",
      "relay.error-body",
      "relay.ack",
      "relay.ack.repeat",
      "relay.isolation.foreign-ack",
    ]) {
      expect(outcome(report, id), id).toBe("pass");
    }
    expect(report.requests).toBeLessThanOrEqual(MAX_REQUESTS);
  });

  it("without a key checks authentication only", async () => {
    const report = await runChecks({
      url: baseUrl(relay),
      relayUrl: "https://localhost",
      relay: true,
      extraCa: tls.ca,
      only: "relay",
    });
    expect(failing(report), explain(report)).toEqual([]);
    expect(outcome(report, "relay.auth.unsigned")).toBe("pass");
    expect(outcome(report, "relay.publish.accepted")).toBe("skip");
  });

  // Each against a relay of its own (its own streams) behind a proxy of its own: they run
  // together, their waits for the TTL check overlapping.
  it.concurrent.each([
    [
      "relay-open",
      [],
      ["relay.auth.unsigned", "relay.isolation.unknown-agent", "relay.auth.wrong-key", "relay.auth.stale"],
    ],
    ["relay-no-trace", ["relay.trace", "relay.trace.by"], []],
    ["relay-wrong-by", ["relay.trace.by"], []],
    ["relay-changes-body", ["relay.unchanged"], []],
    ["relay-forgets", ["relay.persistence"], []],
    ["relay-keeps-expired", ["relay.ttl"], []],
    ["relay-http-webhook", ["relay.push.webhook.https-only"], []],
  ] as const)("a relay with a requirement broken (%s)", async (mode, must, profile) => {
    const { report, requests } = await behindProxy(mode);
    expect(failing(report, ["MUST", "SHOULD"]), explain(report)).toEqual([...must]);
    expect(failing(report, ["profile"])).toEqual([...profile]);
    // The proxy does not pass push streams on: not offered, so skipped (MAY), not failed.
    expect(report.results.find((r) => r.id === "relay.push.sse")).toMatchObject({
      level: "MAY",
      result: "skip",
      reason: expect.stringContaining("not offered"),
    });
    expect(requests).toBeLessThanOrEqual(report.requests);
  });

  // Push streams passed on through a proxy that rewrites each event; the webhook pushed by the proxy.
  it.concurrent.each([
    ["relay-push-no-trace", ["relay.push.sse.trace", "relay.push.websocket.trace", "relay.push.webhook.trace"]],
    ["relay-sse-compact", []],
    ["relay-sse-unnamed", []],
  ] as const)("a relay that pushes (%s)", async (mode, must) => {
    const { report } = await behindProxy(mode, { cert: tls.cert, key: tls.key });
    expect(failing(report, ["MUST", "SHOULD"]), explain(report)).toEqual([...must]);
    for (const id of ["relay.push.sse", "relay.push.websocket", "relay.push.webhook"])
      expect(outcome(report, id), id).toBe("pass");
    for (const id of must)
      expect(report.results.find((r) => r.id === id)).toMatchObject({
        level: "MUST",
        section: "spec 2.9, 4.2, 5.6",
        reason: expect.stringMatching(/^the copy pushed by .*: the message has no trace\.received\[\] entry/),
      });
  });

  it("an agent is not a relay: the relay checks fail against it", async () => {
    const report = await runChecks({
      url: agentUrl,
      relay: true,
      key: checker.signing,
      extraCa: tls.ca,
      only: "relay",
    });
    expect(failing(report)).toEqual(expect.arrayContaining(["relay.auth.unsigned", "relay.publish.accepted"]));
  });
});

type Mode =
  | "faithful"
  | "inbox-200"
  | "no-error-body"
  | "no-etag"
  | "redirect"
  | "open-inbox"
  | "relay-open"
  | "relay-no-trace"
  | "relay-wrong-by"
  | "relay-changes-body"
  | "relay-forgets"
  | "relay-keeps-expired"
  | "relay-http-webhook"
  | "relay-push-no-trace"
  | "relay-sse-compact"
  | "relay-sse-unnamed"
  | "small-limit";

const PUSH_MODES: readonly Mode[] = ["relay-push-no-trace", "relay-sse-compact", "relay-sse-unnamed"];
const withoutTrace = (text: string) => {
  const { trace: _, ...m } = JSON.parse(text) as { trace?: unknown };
  return JSON.stringify(m);
};

/** A TLS proxy in front of the real agent (or relay) that breaks one requirement, counting what it gets. */
async function brokenProxy(mode: Mode, upstream = () => agent.url) {
  let requests = 0;
  let relayReads = 0;
  const listed = new Map<string, { headers: { message_id: string } }>();
  const app: FastifyInstance = Fastify({ https: { key: tls.key, cert: tls.cert }, bodyLimit: 8 * 1024 * 1024 });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));
  app.addHook("onRequest", async () => {
    requests++;
  });
  const pushing = PUSH_MODES.includes(mode);
  /** The webhook the proxy pushes to itself in relay-push-no-trace (the relay behind never hears of it). */
  let hook: string | undefined;
  const signed = (h: import("node:http").IncomingHttpHeaders) =>
    Object.fromEntries(
      ["accept", "signature", "signature-input"].flatMap((k) => (typeof h[k] === "string" ? [[k, h[k]]] : [])),
    );
  if (pushing) {
    // Push streams pass through, each event rewritten as the mode says.
    const wss = new WebSocketServer({ noServer: true });
    app.server.on("upgrade", (req, socket, head) => {
      const up = new WebSocket(`${upstream().replace(/^https:/, "wss:")}${req.url}`, {
        headers: signed(req.headers),
        ca: tls.ca,
      });
      up.on("unexpected-response", () => socket.destroy());
      up.on("error", () => socket.destroy());
      up.on("open", () =>
        wss.handleUpgrade(req, socket, head, (client) => {
          up.on("message", (data) => {
            const frame = JSON.parse(data.toString()) as { type?: string; message?: { trace?: unknown } };
            if (mode === "relay-push-no-trace" && frame.type === "message") delete frame.message?.trace;
            client.send(JSON.stringify(frame));
          });
          client.on("message", (data) => up.send(data.toString()));
          client.on("close", () => up.close());
          up.on("close", () => client.close());
        }),
      );
    });
  }
  app.all("/*", async (req, reply) => {
    if (pushing && req.url.startsWith("/relay/events")) {
      reply.hijack();
      const upReq = httpsRequestStream(
        `${upstream()}${req.url}`,
        { headers: signed(req.headers), ca: tls.ca, agent: false },
        (upRes) => {
          reply.raw.writeHead(upRes.statusCode ?? 502, { "content-type": upRes.headers["content-type"] ?? "" });
          let partial = "";
          upRes.setEncoding("utf8");
          upRes.on("data", (chunk: string) => {
            const lines = (partial + chunk).split("\n");
            partial = lines.pop()!;
            const out = lines.flatMap((line) => {
              if (mode === "relay-sse-compact" && line === "event: message") return ["event:message"];
              if (mode === "relay-sse-unnamed" && line.startsWith("event:")) return [];
              if (mode === "relay-push-no-trace" && line.startsWith("data: "))
                return [`data: ${withoutTrace(line.slice(6))}`];
              return [line];
            });
            reply.raw.write(out.map((l) => `${l}\n`).join(""));
          });
          upRes.on("end", () => reply.raw.end());
        },
      );
      upReq.on("error", () => reply.raw.destroy());
      reply.raw.on("close", () => upReq.destroy());
      upReq.end();
      return reply;
    }
    if (mode === "relay-push-no-trace" && req.method === "POST" && req.url === "/relay/subscribe") {
      const push = (JSON.parse((req.body as Buffer).toString()) as { push?: { webhook?: string | null } }).push;
      if (push && (push.webhook === null || push.webhook?.startsWith("https:"))) {
        hook = push.webhook ?? undefined;
        return reply.code(200).send({ status: "subscribed", push: { webhook: hook ?? null } });
      }
    }
    if (
      mode === "relay-http-webhook" &&
      req.method === "POST" &&
      req.url === "/relay/subscribe" &&
      (req.body as Buffer).toString().includes('"webhook":"http:')
    )
      return reply.code(200).send({ status: "subscribed" });
    const forward: Record<string, string> = {};
    for (const h of [
      "content-type",
      "accept",
      "idempotency-key",
      "signature",
      "signature-input",
      "content-digest",
      ...(mode === "no-etag" ? [] : ["if-none-match"]),
    ]) {
      const v = req.headers[h];
      if (typeof v === "string") forward[h] = v;
    }
    if (
      mode === "small-limit" &&
      (req.body as Buffer | undefined)?.length &&
      (req.body as Buffer).length > 512 * 1024
    ) {
      return reply.code(413).send({ status: "error", code: "payload_too_large", message: "over 512 KiB" });
    }
    // Push streams are not proxied but in the push modes: a relay behind this proxy does not offer them (skipped, MAY).
    if (req.url.startsWith("/relay/events") || req.url.startsWith("/relay/ws"))
      return reply.code(404).send({ status: "error", code: "not_found", message: "not here" });
    if (mode === "redirect" && req.url.endsWith("/identity"))
      return reply.code(301).header("location", `${agentUrl}${req.url}`).send();
    const res = await httpsRequest(`${upstream()}${req.url}`, {
      method: req.method,
      headers: forward,
      body: req.body as Buffer | undefined,
      ca: tls.ca,
    });
    let status = res.status;
    let text = res.text;
    if (mode === "inbox-200" && status === 202) status = 200;
    if (mode === "no-error-body" && status >= 400) text = "";
    if (mode === "open-inbox" && req.url.endsWith("/inbox") && status === 401) {
      status = 202;
      text = JSON.stringify({ status: "accepted" });
    }
    if (mode === "relay-open" && status === 401 && req.method === "GET") {
      status = 200;
      text = "[]";
    }
    const relayList = req.method === "GET" && req.url.startsWith("/relay/messages") && status === 200;
    if (mode === "relay-no-trace" && relayList) {
      text = JSON.stringify((JSON.parse(text) as { trace?: unknown }[]).map(({ trace: _, ...m }) => m));
    }
    if (mode === "relay-wrong-by" && relayList) {
      text = JSON.stringify(
        (JSON.parse(text) as { trace: { received: { by: string }[] } }[]).map((m) => ({
          ...m,
          trace: { received: m.trace.received.map((t) => ({ ...t, by: "relay:https://elsewhere.example" })) },
        })),
      );
    }
    if (mode === "relay-changes-body" && relayList) {
      text = JSON.stringify(
        (JSON.parse(text) as { body: object }[]).map((m) => ({ ...m, body: { text: "changed on the way" } })),
      );
    }
    if (mode === "relay-forgets" && relayList && ++relayReads > 1) text = "[]";
    if (mode === "relay-keeps-expired" && relayList) {
      // Everything ever listed stays listed: what expired comes back.
      const list = JSON.parse(text) as { headers: { message_id: string } }[];
      for (const m of list) listed.set(m.headers.message_id, m);
      const ids = new Set(list.map((m) => m.headers.message_id));
      text = JSON.stringify([...list, ...[...listed.values()].filter((m) => !ids.has(m.headers.message_id))]);
    }
    // The proxy pushes the message as it was published, without the relay's trace entry.
    if (mode === "relay-push-no-trace" && hook && req.url === "/relay/publish" && status === 202)
      await httpsRequest(hook, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: req.body as Buffer,
        ca: tls.ca,
      });
    for (const h of ["content-type", "cache-control", "retry-after", ...(mode === "no-etag" ? [] : ["etag"])]) {
      const v = res.headers[h];
      if (typeof v === "string") reply.header(h, v);
    }
    return reply.code(status).send(text);
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const port = (app.server.address() as { port: number }).port;
  return { url: `https://localhost:${port}`, requests: () => requests, close: () => app.close() };
}

describe("ifp check against targets with a requirement broken", () => {
  const run = async (mode: Mode) => {
    const proxy = await brokenProxy(mode);
    try {
      const report = await runChecks({ url: proxy.url, key: checker.signing, extraCa: tls.ca });
      expect(report.requests).toBeLessThanOrEqual(MAX_REQUESTS);
      expect(proxy.requests()).toBeLessThanOrEqual(report.requests);
      return { report, requests: proxy.requests() };
    } finally {
      await proxy.close();
    }
  };

  it("the proxy itself is faithful: everything passes through it", async () => {
    const { report, requests } = await run("faithful");
    expect(failing(report), explain(report)).toEqual([]);
    expect(requests).toBeGreaterThan(15);
  });

  it("an inbox that answers 200 instead of 202", async () => {
    const { report } = await run("inbox-200");
    expect(failing(report, ["MUST"])).toEqual(["inbox.accepted", "inbox.protocol-problem"]);
    expect(report.results.find((r) => r.id === "inbox.accepted")?.reason).toMatch(/answered 200.*expected 202/);
    expect(outcome(report, "inbox.idempotent")).toBe("skip");
    expect(outcome(report, "discovery.capabilities.etag")).toBe("pass");
  });

  it("errors without the error body: a SHOULD missed, which fails the run only with --strict", async () => {
    const { report } = await run("no-error-body");
    expect(failing(report)).toEqual(["inbox.error-body", "inbox.error-codes"]);
    expect(report.results.find((r) => r.id === "inbox.error-body")?.reason).toMatch(
      /^inbox\.media-type, inbox\.not-json, .*no JSON error body \(spec 2\.7\)/,
    );
    expect(outcome(report, "inbox.not-json")).toBe("pass");
    expect(report.summary.levels.SHOULD.fail).toBe(2);
    const proxy = await brokenProxy("no-error-body");
    try {
      const keyFile = writeKey(dir, checker);
      const args = [
        "check",
        proxy.url,
        "--ca-file",
        tls.files.ca,
        "--key",
        keyFile,
        "--from",
        checker.agentId,
        "--only",
        "inbox",
      ];
      const lenient = await ifp(...args);
      expect(lenient.status, lenient.stdout).toBe(0);
      expect(lenient.stdout).toMatch(
        /^missed, not failing the run: inbox\.error-body \(SHOULD\), inbox\.error-codes \(SHOULD\)$/m,
      );
      const strict = await ifp(...args, "--strict");
      expect(strict.status, strict.stdout).toBe(1);
      expect(strict.stdout).toMatch(/^failing: inbox\.error-body, inbox\.error-codes$/m);
    } finally {
      await proxy.close();
    }
  });

  it("documents without ETag or Cache-Control: optional, so skipped, not failed", async () => {
    const { report } = await run("no-etag");
    expect(failing(report)).toEqual([]);
    for (const id of ["discovery.capabilities.etag", "discovery.identity.etag", "discovery.capabilities.not-modified"])
      expect(outcome(report, id), id).toBe("skip");
    expect(outcome(report, "discovery.capabilities.cache-control")).toBe("pass");
  });

  it("a redirect", async () => {
    const { report } = await run("redirect");
    expect(failing(report)).toEqual(expect.arrayContaining(["discovery.identity.status", "tls.redirect-free"]));
    expect(failing(report, ["MUST"])).toEqual([]);
  });

  it("an inbox that takes unsigned and unknown senders", async () => {
    const { report } = await run("open-inbox");
    expect(failing(report, ["MUST"])).toEqual(["inbox.unsigned", "inbox.unknown-sender", "inbox.bad-signature"]);
  });

  it("a sender that breaks the sending rules: the send checks name each break", async () => {
    // A deliberately careless sender behind a local API of its own: it posts wherever the peer's
    // identity document says (http included), unsigned, without Idempotency-Key, three times
    // whatever the answer (a 429's Retry-After included), the second pause shorter than the
    // first, and never uses relays; behind `/relays/outbox` it publishes, just as carelessly, to
    // the first relay of a peer that has no inbox.
    const sent: Promise<unknown>[] = [];
    const careless = httpServer((req, res) => {
      const viaRelays = req.url?.startsWith("/relays/");
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const { to } = JSON.parse(Buffer.concat(chunks).toString()) as { to: string };
        res.writeHead(202, { "content-type": "application/json" }).end("{}");
        sent.push(
          (async () => {
            const identity = JSON.parse(
              (await httpsRequest(`${to}/.well-known/agent/identity`, { ca: tls.ca })).text,
            ) as { endpoints?: { inbox?: string }; relay?: { urls: string[] } };
            const relay = viaRelays && identity.relay?.urls[0];
            const target = identity.endpoints?.inbox ?? (relay ? `${relay}/relay/publish` : undefined);
            if (!target) return;
            const message = JSON.stringify({
              ifp: 4,
              headers: {
                message_id: `msg:careless-${Math.random()}`,
                date: new Date().toISOString(),
                from: { agent: "careless" },
                to: [{ agent: to }],
                conversation_id: "conv:careless",
                sequence: 1,
                phase: "context",
                content_type: "text/plain",
              },
              body: { text: "hi" },
            });
            for (let i = 0; i < 3; i++) {
              const headers = { "content-type": "application/json", accept: "application/json" };
              await (target.startsWith("http:")
                ? fetch(target, { method: "POST", headers, body: message })
                : httpsRequest(target, { method: "POST", headers, body: message, ca: tls.ca })
              ).catch(() => undefined);
              // The careless sender's own retry schedule (0.9 s, then 0.2 s): what send.backoff and send.retry-after grade.
              await new Promise((r) => setTimeout(r, i === 0 ? 900 : 200));
            }
          })(),
        );
      });
    });
    await new Promise<void>((r) => careless.listen(0, "127.0.0.1", r));
    try {
      const localApi = `http://127.0.0.1:${(careless.address() as { port: number }).port}`;
      const report = await runChecks({
        url: agentUrl,
        extraCa: tls.ca,
        only: "send",
        inbox: { cert: tls.cert, key: tls.key },
        localApi: { url: localApi },
        sendWaitMs: 6_000,
      });
      expect(failing(report, ["MUST"]), explain(report)).toEqual(["send.https-only", "send.no-retry-4xx"]);
      expect(failing(report, ["SHOULD"])).toEqual([
        "send.idempotency-key",
        "send.signature",
        "send.backoff",
        "send.retry-after",
        "send.relay-preference",
      ]);
      expect(failing(report, ["profile"])).toEqual(["send.signature.verifies"]);
      expect(outcome(report, "send.retry-5xx")).toBe("pass");
      expect(outcome(report, "send.request")).toBe("pass");
      expect(report.results.find((r) => r.id === "send.https-only")?.reason).toMatch(/over plain HTTP/);
      expect(report.results.find((r) => r.id === "send.no-retry-4xx")?.reason).toMatch(/answered 400, and sent again/);
      expect(report.results.find((r) => r.id === "send.retry-after")?.reason).toMatch(
        /429 with Retry-After: 3, and sent again after only [0-2]\.\d s/,
      );
      expect(outcome(report, "send.relay-no-retry-4xx")).toBe("skip");
      // Through relays: the relay's 400 is published to again, and the 503 relay's neighbour never tried.
      const relayed = await runChecks({
        url: agentUrl,
        extraCa: tls.ca,
        only: "send",
        inbox: { cert: tls.cert, key: tls.key },
        localApi: { url: `${localApi}/relays` },
        sendWaitMs: 6_000,
      });
      expect(failing(relayed, ["MUST"]), explain(relayed)).toEqual([
        "send.https-only",
        "send.no-retry-4xx",
        "send.relay-no-retry-4xx",
      ]);
      expect(relayed.results.find((r) => r.id === "send.relay-no-retry-4xx")).toMatchObject({
        level: "MUST",
        section: "spec 3, 7.2.3",
        reason: expect.stringMatching(/^the relay answered 400, and the message was published there again/),
      });
      expect(outcome(relayed, "send.relay-preference")).toBe("pass");
      expect(outcome(relayed, "send.relay-fallback")).toBe("fail");
    } finally {
      await Promise.allSettled(sent);
      careless.closeAllConnections();
      await new Promise((r) => careless.close(r));
    }
  });

  it("an inbox that takes only half a megabyte: the 1 MB message is a SHOULD missed", async () => {
    const { report } = await run("small-limit");
    expect(failing(report)).toEqual(["inbox.large-message"]);
    expect(outcome(report, "inbox.oversize")).toBe("pass");
  });

  it("no error-phase answer reaches the kit (its inbox is not where the agent sends): the SHOULDs that wait for one fail", async () => {
    const report = await runChecks({
      url: agentUrl,
      key: checker.signing,
      extraCa: tls.ca,
      inbox: { cert: tls.cert, key: tls.key },
      sendWaitMs: 2_000,
      only: "inbox",
    });
    expect(failing(report)).toEqual(["inbox.protocol-problem.reply", "inbox.auth-level"]);
    expect(report.results.find((r) => r.id === "inbox.auth-level")?.reason).toMatch(
      /no error-phase message answering .* within 2 s/,
    );
  });

  it("a target that hangs: each request times out, the run stops asking and ends", async () => {
    let connections = 0;
    const server: Server = httpsServer({ key: tls.key, cert: tls.cert }, () => undefined);
    server.on("secureConnection", () => connections++);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const started = Date.now();
      const report = await runChecks({
        url: `https://localhost:${port}`,
        key: checker.signing,
        extraCa: tls.ca,
        timeoutMs: 400,
      });
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(report.results.find((r) => r.id === "discovery.capabilities.status")).toMatchObject({
        result: "fail",
        reason: expect.stringContaining("no answer within the timeout"),
      });
      expect(outcome(report, "inbox.accepted")).toBe("fail");
      expect(report.results.find((r) => r.id === "inbox.accepted")?.reason).toMatch(/stopped answering/);
      expect(report.requests).toBeLessThanOrEqual(3);
      expect(connections).toBeLessThanOrEqual(3);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("a target that still speaks TLS 1.1", async () => {
    const server: Server = httpsServer(
      { key: tls.key, cert: tls.cert, minVersion: "TLSv1", ciphers: "DEFAULT:@SECLEVEL=0" },
      (_req, res) => res.writeHead(404).end(),
    );
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const report = await runChecks({ url: `https://localhost:${port}`, extraCa: tls.ca, only: "tls" });
      expect(report.results.find((r) => r.id === "tls.old-versions-refused")).toMatchObject({
        result: "fail",
        reason: "the target completed a TLSv1.1 handshake",
      });
      expect(outcome(report, "tls.version")).toBe("pass");
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("a target that also answers plain HTTP on its port", async () => {
    const secure = httpsServer({ key: tls.key, cert: tls.cert }, (_req, res) => res.writeHead(404).end());
    const plain = httpServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
    // One port, both protocols: a TLS ClientHello starts with 0x16, anything else is plain HTTP.
    const both = netServer((socket) =>
      socket.once("data", (first: Buffer) => {
        socket.pause();
        socket.unshift(first);
        (first[0] === 0x16 ? secure : plain).emit("connection", socket);
        process.nextTick(() => socket.resume());
      }),
    );
    await new Promise<void>((r) => both.listen(0, "127.0.0.1", r));
    const port = (both.address() as { port: number }).port;
    try {
      const report = await runChecks({ url: `https://localhost:${port}`, extraCa: tls.ca, only: "tls" });
      expect(report.results.find((r) => r.id === "tls.plain-http-refused")).toMatchObject({
        result: "fail",
        reason: "plain HTTP on the same port answered 200",
      });
      expect(outcome(report, "tls.version")).toBe("pass");
    } finally {
      secure.closeAllConnections();
      plain.closeAllConnections();
      await new Promise((r) => both.close(r));
    }
  });

  it("a target that answers garbage", async () => {
    let requests = 0;
    const server: Server = httpsServer({ key: tls.key, cert: tls.cert }, (req, res) => {
      requests++;
      req.resume();
      res.writeHead(200, { "content-type": "text/html" }).end("\u0000<html>\xff garbage {{{");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const report = await runChecks({ url: `https://localhost:${port}`, key: checker.signing, extraCa: tls.ca });
      expect(failing(report)).toEqual(
        expect.arrayContaining([
          "discovery.capabilities.media-type",
          "discovery.capabilities.schema",
          "inbox.media-type",
          "inbox.not-json",
          "inbox.accepted",
          "inbox.date-window",
        ]),
      );
      expect(report.results.find((r) => r.id === "discovery.capabilities.schema")?.reason).toMatch(
        /^the body is not JSON: /,
      );
      expect(report.requests).toBeLessThanOrEqual(MAX_REQUESTS);
      expect(requests).toBeLessThanOrEqual(report.requests);
      const text = await ifp("check", `https://localhost:${port}`, "--ca-file", tls.files.ca);
      expect(text.status).toBe(1);
      expect(text.stdout).toMatch(/^FAIL {2}MUST {5}inbox\.not-json/m);
      expect(text.stdout).toMatch(/^failing: .*discovery\.capabilities\.schema/m);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("a target whose answers are huge is read only to a bound", async () => {
    const server: Server = httpsServer({ key: tls.key, cert: tls.cert }, (req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let sent = 0;
      const more = () => {
        while (sent < 200 && res.write(chunk)) sent++;
        if (sent < 200) res.once("drain", more);
        else res.end();
      };
      more();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const report = await runChecks({ url: `https://localhost:${port}`, extraCa: tls.ca, only: "discovery" });
      expect(report.results.find((r) => r.id === "discovery.capabilities.status")).toMatchObject({
        result: "fail",
        reason: expect.stringMatching(/exceeds/),
      });
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
