// Publishing many messages per authentication: POST /relay/publish/batch (one signed request)
// and publish frames on a WebSocket session (one signed upgrade). Each message is checked and
// stored as a lone POST /relay/publish would be, on a real nats-server and relay over TLS.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { signRequest } from "../../src/protocol/http-signatures.ts";
import type { RunningRelay } from "../../src/relay/main.ts";
import { signed } from "../support/fixtures.ts";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { relayNames } from "../../src/contract/relay-stream.ts";
import {
  alice,
  baseUrl,
  bob,
  carol,
  clientOf,
  expectError,
  failure,
  ids,
  openWs,
  raw,
  readSse,
  relayEnv,
  runRelay,
  stranger,
  waitFor,
  type RelayEnv,
} from "../support/relay-harness.ts";

let env: RelayEnv;
let relay: RunningRelay;
const c = (who: typeof alice) => clientOf(env, relay, who);

beforeAll(async () => {
  env = await relayEnv();
  relay = await runRelay(env, { limits: { maxMessageBytes: 16_384 } });
});
afterAll(async () => {
  await relay?.close();
  await env?.close();
});

/** The consumers of the relay's stream that follow one agent's mailbox (a session or event stream each). */
async function mailboxFollowers(agent: string): Promise<number> {
  const names = relayNames(relay.relay);
  let n = 0;
  for await (const ci of relay.nats.jsm.consumers.list(names.stream)) {
    const filters = [ci.config.filter_subject, ...(ci.config.filter_subjects ?? [])];
    if (filters.includes(names.mailbox(agent))) n++;
  }
  return n;
}

async function drain(who: typeof alice): Promise<string[]> {
  const { messages } = await c(who).pull({ limit: 1000 });
  if (messages.length) await c(who).ackMany(ids(messages));
  return ids(messages);
}

describe("relay: batch publish", () => {
  it("stores every message of a batch before answering, each with the trace entry, one result per message in order", async () => {
    const ms = [
      signed(alice, "bob-agent"),
      signed(alice, ["bob-agent", "carol.agent*>"]),
      signed(alice, "carol.agent*>"),
    ];
    const { results } = await c(alice).publishMany(ms);
    expect(results).toEqual([
      { status: 202, message_id: ms[0]!.headers.message_id, recipients: 1, stored: 1, duplicates: 0 },
      { status: 202, message_id: ms[1]!.headers.message_id, recipients: 2, stored: 2, duplicates: 0 },
      { status: 202, message_id: ms[2]!.headers.message_id, recipients: 1, stored: 1, duplicates: 0 },
    ]);
    // Durable at the answer: the copies are there to pull at once, as sent plus the relay's entry.
    const { messages } = await c(bob).pull();
    expect(ids(messages)).toEqual(ids(ms.slice(0, 2)));
    const { trace, ...rest } = messages[0]!;
    expect(rest).toEqual(ms[0]);
    expect(trace!.received).toEqual([expect.objectContaining({ by: "relay:https://localhost", from: "alice-agent" })]);
    expect(await drain(bob)).toHaveLength(2);
    expect(await drain(carol)).toEqual(ids(ms.slice(1)));
    // A repeat is a duplicate, not a second copy.
    expect((await c(alice).publishMany([ms[0]!])).results[0]).toMatchObject({ status: 202, stored: 0, duplicates: 1 });
    expect(await drain(bob)).toEqual([]);
  });

  it("refuses each bad message alone with the status and code a lone publish gets, and stores the others", async () => {
    const good = signed(alice, "bob-agent");
    const fromBob = signed(bob, "carol.agent*>");
    const unknownRecipient = signed(alice, ["bob-agent", "nobody"]);
    const expired = signed(alice, "bob-agent", { ttl_seconds: 1, date: new Date(Date.now() - 5000).toISOString() });
    const big = signed(alice, "bob-agent", {}, "x".repeat(20_000));
    const badTopic = signed(alice, "topic:not a topic");
    const notIfp = { ifp: 4, headers: { message_id: "m-not-ifp" } };
    const lone = { ...signed(alice, "bob-agent"), body: [{ type: "text", text: "\ud800" }] };
    const { results } = await c(alice).publishMany([
      good,
      fromBob,
      unknownRecipient,
      expired,
      big,
      badTopic,
      notIfp,
      lone,
      good,
    ] as never);
    expect(results.map((r) => [r.status, "code" in r ? r.code : "accepted"])).toEqual([
      [202, "accepted"],
      [401, "invalid_signature"],
      [404, "not_found"],
      [400, "invalid_format"],
      [413, "payload_too_large"],
      [400, "invalid_format"],
      [400, "invalid_format"],
      [400, "invalid_format"],
      [202, "accepted"],
    ]);
    // Each refusal names its message, when it has an id, and says why.
    expect(results[1]).toMatchObject({
      message_id: fromBob.headers.message_id,
      message: expect.stringMatching(/signed by alice-agent but the message is from bob-agent/),
    });
    expect(results[2]).toMatchObject({
      message_id: unknownRecipient.headers.message_id,
      message: expect.stringMatching(/does not serve nobody/),
    });
    expect(results[4]).toMatchObject({ message: expect.stringMatching(/at most 16384/) });
    expect(results[6]).toMatchObject({ message_id: "m-not-ifp" });
    // The same message twice in one batch: stored once.
    expect(results[8]).toMatchObject({ stored: 0, duplicates: 1 });
    expect(await drain(bob)).toEqual([good.headers.message_id]);
    expect(await drain(carol)).toEqual([]);
  });

  it("answers a malformed, empty, oversized, unsigned or poisoned batch with one 4xx and stores nothing", async () => {
    const a = c(alice);
    // A message nested deeper than the body's limit makes the whole body too deep: it is refused
    // before anything walks it, the batch's good messages with it.
    const deep = JSON.parse(`${"[".repeat(150)}${"]".repeat(150)}`);
    await expectError(
      a.request("POST", "/relay/publish/batch", { messages: [signed(alice, "bob-agent"), deep] }),
      400,
      "invalid_format",
    );
    await expectError(a.request("POST", "/relay/publish/batch", { messages: [] }), 400, "invalid_format");
    await expectError(
      a.request("POST", "/relay/publish/batch", {
        messages: Array.from({ length: 101 }, () => signed(alice, "bob-agent")),
      }),
      400,
      "invalid_format",
    );
    await expectError(a.request("POST", "/relay/publish/batch", [signed(alice, "bob-agent")]), 400, "invalid_format");
    await expectError(
      a.request("POST", "/relay/publish/batch", { message: signed(alice, "bob-agent") }),
      400,
      "invalid_format",
    );
    // The body limit of a batch: this relay's largest message, at least 1 MiB, and the envelope.
    await expectError(
      a.request("POST", "/relay/publish/batch", { messages: [signed(alice, "bob-agent", {}, "y".repeat(1_700_000))] }),
      413,
      "payload_too_large",
    );
    // ?recipient= narrows every message; a name that is not a direct recipient refuses that message.
    const both = signed(alice, ["bob-agent", "carol.agent*>"]);
    expect((await a.publishMany([both], ["carol.agent*>"])).results[0]).toMatchObject({ status: 202, recipients: 1 });
    expect((await a.publishMany([signed(alice, "bob-agent")], ["carol.agent*>"])).results[0]).toMatchObject({
      status: 400,
      code: "invalid_format",
    });
    expect(await drain(carol)).toEqual([both.headers.message_id]);
    // A prototype-poisoning key anywhere in the body: the whole request is refused, as for a lone publish.
    const poisoned = `{"messages":[${JSON.stringify(signed(alice, "bob-agent")).slice(0, -1)},"__proto__":{"x":1}}]}`;
    const url = `${baseUrl(relay)}/relay/publish/batch`;
    const headers = await signRequest(
      { method: "POST", url, body: poisoned, headers: { "content-type": "application/json" } },
      alice.signing,
    );
    expect(
      await raw(env, relay, { method: "POST", path: "/relay/publish/batch", headers, body: poisoned }),
    ).toMatchObject({ status: 400, body: { code: "invalid_format" } });
    // Unsigned, and signed by an agent the relay does not serve: 401 before the body is looked at.
    const unsigned = await raw(env, relay, {
      method: "POST",
      path: "/relay/publish/batch",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [signed(alice, "bob-agent")] }),
    });
    expect(unsigned).toMatchObject({ status: 401, body: { code: "invalid_signature" } });
    expect(await failure(clientOf(env, relay, stranger).publishMany([signed(stranger, "bob-agent")]))).toMatchObject({
      status: 401,
      code: "unknown_sender",
    });
    expect(await drain(bob)).toEqual([]);
  });

  it("counts each message of a batch against the per-agent limit", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: 5 } });
    try {
      const cl = clientOf(env, limited, alice);
      const six = Array.from({ length: 6 }, () => signed(alice, "bob-agent"));
      // The request takes one, its six messages would take five more: refused whole, nothing stored.
      const refused = await failure(cl.publishMany(six));
      expect(refused).toMatchObject({ status: 429, code: "rate_limited" });
      const res = await cl.request("POST", "/relay/publish/batch", { messages: six.slice(0, 2) });
      expect(res.status, res.text).toBe(200);
      expect((await clientOf(env, limited, bob).pull()).messages).toHaveLength(2);
    } finally {
      await limited.close();
    }
  });
});

describe("relay: publishing on a WebSocket session", () => {
  it("stores a publish frame as POST /relay/publish would and answers once it is stored; the recipient's session gets it pushed", async () => {
    const sender = await openWs(env, relay, alice, undefined, { push: "off" });
    const receiver = await openWs(env, relay, bob);
    try {
      const ms = [signed(alice, "bob-agent"), signed(alice, ["bob-agent", "carol.agent*>"])];
      for (const m of ms) sender.send({ type: "publish", message: m });
      sender.send({ type: "publish", message: ms[1], recipients: ["carol.agent*>"] });
      await waitFor("the answers", () => sender.frames.length === 3);
      expect(sender.frames.slice(0, 2).sort((a, b) => (a.recipients as number) - (b.recipients as number))).toEqual([
        {
          type: "published",
          status: 202,
          message_id: ms[0]!.headers.message_id,
          recipients: 1,
          stored: 1,
          duplicates: 0,
        },
        {
          type: "published",
          status: 202,
          message_id: ms[1]!.headers.message_id,
          recipients: 2,
          stored: 2,
          duplicates: 0,
        },
      ]);
      expect(sender.frames[2]).toMatchObject({ type: "published", recipients: 1, stored: 0, duplicates: 1 });
      await waitFor("the pushed copies", () => receiver.messages().length === 2);
      expect(
        receiver
          .messages()
          .map((f) => f.message.headers.message_id)
          .sort(),
      ).toEqual(ids(ms).sort());
      expect(receiver.messages()[0].message.trace.received).toEqual([expect.objectContaining({ from: "alice-agent" })]);
      // A session with push off is not handed its own mailbox: another session of alice's, with
      // push on, is handed the message, and the one with push off follows no mailbox at all.
      const watcher = await openWs(env, relay, alice);
      try {
        const toAlice = signed(bob, "alice-agent");
        await c(bob).publish(toAlice);
        await waitFor("the message pushed to alice's other session", () => watcher.messages().length === 1);
        expect(watcher.messages()[0].message.headers.message_id).toBe(toAlice.headers.message_id);
        expect(sender.messages()).toEqual([]);
        expect(await mailboxFollowers("alice-agent")).toBe(1);
        expect(await drain(alice)).toEqual([toAlice.headers.message_id]);
      } finally {
        await watcher.close();
      }
    } finally {
      await sender.close();
      await receiver.close();
    }
    await drain(bob);
    await drain(carol);
  });

  it("answers each bad publish frame with an error frame naming its message, and goes on", async () => {
    const s = await openWs(env, relay, alice, undefined, { push: "off" });
    try {
      const fromBob = signed(bob, "alice-agent");
      const unknownRecipient = signed(alice, "nobody");
      const expired = signed(alice, "bob-agent", { ttl_seconds: 1, date: new Date(Date.now() - 5000).toISOString() });
      const big = signed(alice, "bob-agent", {}, "x".repeat(20_000));
      const notIfp = { ifp: 4, headers: { message_id: "ws-not-ifp" } };
      for (const m of [fromBob, unknownRecipient, expired, big, notIfp]) s.send({ type: "publish", message: m });
      s.send({ type: "publish", message: signed(alice, "bob-agent"), recipients: ["carol.agent*>"] });
      s.send({ type: "publish", message: "not an object" });
      s.send({ type: "publish", message: signed(alice, "bob-agent"), recipients: [] });
      s.send(`{"type":"publish","message":{"__proto__":{"polluted":true}}}`);
      s.send("not json");
      s.send({ type: "subscribe" });
      await waitFor("every answer", () => s.frames.length === 11);
      expect(s.answerTo(fromBob.headers.message_id)).toMatchObject({
        type: "error",
        status: 401,
        code: "invalid_signature",
      });
      expect(s.answerTo(unknownRecipient.headers.message_id)).toMatchObject({
        type: "error",
        status: 404,
        code: "not_found",
      });
      expect(s.answerTo(expired.headers.message_id)).toMatchObject({
        type: "error",
        status: 400,
        code: "invalid_format",
      });
      expect(s.answerTo(big.headers.message_id)).toMatchObject({
        type: "error",
        status: 413,
        code: "payload_too_large",
      });
      expect(s.answerTo("ws-not-ifp")).toMatchObject({ type: "error", status: 400, code: "invalid_format" });
      const unnamed = s.frames.filter((f) => f.message_id === undefined);
      expect(unnamed).toHaveLength(5);
      for (const f of unnamed)
        expect(f).toMatchObject({ type: "error", status: 400, code: "invalid_format", message: expect.any(String) });
      expect(unnamed.some((f) => /__proto__|prototype/.test(f.message))).toBe(true);
      expect({} as Record<string, unknown>).not.toHaveProperty("polluted");
      // Still open and working after all of that.
      const ok = signed(alice, "bob-agent");
      s.send({ type: "publish", message: ok });
      await waitFor("the good one", () => s.answerTo(ok.headers.message_id));
      expect(s.answerTo(ok.headers.message_id)).toMatchObject({ type: "published", stored: 1 });
      expect(await drain(bob)).toEqual([ok.headers.message_id]);
    } finally {
      await s.close();
    }
  });

  it("counts each publish frame against the per-agent limit, and closes a frame over the message limit with 1009", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: 3, maxMessageBytes: 4096 } });
    try {
      // The upgrade takes one; two frames fit, the third is refused with Retry-After.
      const s = await openWs(env, limited, alice, undefined, { push: "off" });
      const ms = Array.from({ length: 3 }, () => signed(alice, "bob-agent"));
      for (const m of ms) s.send({ type: "publish", message: m });
      await waitFor("three answers", () => s.frames.length === 3);
      expect(s.frames.filter((f) => f.type === "published")).toHaveLength(2);
      expect(s.frames.find((f) => f.type === "error")).toMatchObject({
        status: 429,
        code: "rate_limited",
        retry_after: expect.any(Number),
      });
      expect((await clientOf(env, limited, bob).pull()).messages).toHaveLength(2);
      // A frame over maxMessageBytes plus the frame's room: the WebSocket is closed (1009), the relay goes on.
      const closed = new Promise<number>((r) => s.ws.once("close", (code) => r(code)));
      s.send({ type: "publish", message: signed(alice, "bob-agent", {}, "z".repeat(80 * 1024)) });
      expect(await closed).toBe(1009);
      expect((await clientOf(env, limited, bob).request("GET", "/relay/messages")).status).toBe(200);
    } finally {
      await limited.close();
    }
  });

  it("opens a session only for a signed upgrade of an agent it serves", async () => {
    const url = `${baseUrl(relay).replace("https", "wss")}/relay/ws?push=off`;
    const statusOf = (ws: WebSocket) =>
      new Promise<number>((r) =>
        ws.once("unexpected-response", (_req, res) => r(res.statusCode ?? 0)).once("error", () => r(-1)),
      );
    expect(await statusOf(new WebSocket(url, { ca: env.tls.ca }))).toBe(401);
    // Signed without the query: @query is covered.
    const headers = await signRequest({ method: "GET", url: `${baseUrl(relay)}/relay/ws` }, alice.signing);
    expect(await statusOf(new WebSocket(url, { headers, ca: env.tls.ca }))).toBe(401);
    const strangers = await signRequest({ method: "GET", url: url.replace("wss", "https") }, stranger.signing);
    expect(await statusOf(new WebSocket(url, { headers: strangers, ca: env.tls.ca }))).toBe(401);
  });
});

describe("relay: copies handed out as stored", () => {
  it("hands out a page, an SSE event and a WebSocket frame with each copy's text as stored, and skips what is not a copy of the relay's", async () => {
    const named = await runRelay(env, {}, "as-stored");
    const nc = await connect({ servers: env.nats.url });
    try {
      const names = relayNames({ metadata: { name: "as-stored" }, spec: { url: "https://localhost" } } as Parameters<
        typeof relayNames
      >[0]);
      const cl = (who: typeof alice) => clientOf(env, named, who);
      const first = signed(alice, "bob-agent");
      expect((await cl(alice).publish(first)).status).toBe(202);
      // What another writer could leave on bob's mailbox subjects: not JSON, a JSON array, a line break inside, broken UTF-8.
      const js = jetstream(nc);
      for (const [i, junk] of [
        ["1", "not json"],
        ["2", "[1,2]"],
        ["3", '{"a":\n1}'],
        ["4", Buffer.from([0x7b, 0xff, 0x7d])],
      ] as const)
        await js.publish(names.copy("bob-agent", `junk-${i}`), junk);
      const last = signed(alice, "bob-agent");
      expect((await cl(alice).publish(last)).status).toBe(202);

      const res = await cl(bob).request("GET", "/relay/messages");
      expect(res.status).toBe(200);
      expect(ids(JSON.parse(res.text))).toEqual(ids([first, last]));
      const s = await openWs(env, named, bob);
      await waitFor("the pushed copies", () => s.messages().length === 2);
      expect(s.messages().map((f) => f.message.headers.message_id)).toEqual(ids([first, last]));
      expect(s.messages()[0].message.trace.received).toHaveLength(1);
      await s.close();
      const events = await readSse(env, named, bob, { count: 2 });
      expect(events.map((e) => e.data.headers.message_id)).toEqual(ids([first, last]));
    } finally {
      await nc.close();
      await named.close();
    }
  });
});

describe("relay: acknowledgements count against the per-agent limit", () => {
  const LIMIT = 20;

  it("answers WebSocket ack frames past the limit with the error frame and Retry-After's seconds, removing nothing more", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: LIMIT } });
    try {
      // One copy waiting for bob, whose ack comes after the burst.
      const kept = signed(alice, "bob-agent");
      expect((await clientOf(env, limited, alice).publish(kept)).status).toBe(202);
      const s = await openWs(env, limited, bob, undefined, { push: "off" });
      // A bounded burst: the upgrade took one, 19 acks fit, the rest are refused.
      const burst = Array.from({ length: 60 }, (_, i) => `missing-${i}`);
      for (const id of burst) s.send({ type: "ack", message_id: id });
      s.send({ type: "ack", message_id: kept.headers.message_id });
      await waitFor("an answer to every ack", () => s.frames.length === burst.length + 1);
      const acked = s.frames.filter((f) => f.type === "acked");
      const refused = s.frames.filter((f) => f.type === "error");
      expect(acked).toHaveLength(LIMIT - 1);
      expect(refused).toHaveLength(burst.length + 1 - (LIMIT - 1));
      for (const f of refused)
        expect(f).toMatchObject({ status: 429, code: "rate_limited", retry_after: expect.any(Number) });
      expect(refused.map((f) => f.message_id)).toContain(kept.headers.message_id);
      await s.close();
      // The copy whose ack was refused is still there (read from another relay process of the same stream: this one's limit is spent).
      const other = await runRelay(env, { limits: { perAgentPerMinute: LIMIT } }, limited.relay.metadata.name);
      try {
        expect((await clientOf(env, other, bob).pull()).messages.map((m) => m.headers.message_id)).toContain(
          kept.headers.message_id,
        );
      } finally {
        await other.close();
      }
    } finally {
      await limited.close();
    }
  });

  it("counts each distinct id of a WebSocket ack frame, refusing the frame whole past the limit", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: LIMIT } });
    try {
      const kept = signed(alice, "bob-agent");
      expect((await clientOf(env, limited, alice).publish(kept)).status).toBe(202);
      const s = await openWs(env, limited, bob, undefined, { push: "off" });
      const id = kept.headers.message_id;
      // The upgrade took one: 20 ids do not fit, and nothing is removed.
      s.send({ type: "ack", message_ids: [id, ...Array.from({ length: LIMIT - 1 }, (_, i) => `missing-${i}`)] });
      await waitFor("the refusal", () => s.frames.length === 1);
      expect(s.frames[0]).toMatchObject({
        type: "error",
        status: 429,
        code: "rate_limited",
        retry_after: expect.any(Number),
      });
      // 19 distinct ids fit, however often each is repeated: what is left exactly.
      const fits = [id, ...Array.from({ length: LIMIT - 2 }, (_, i) => `missing-${i}`)];
      s.send({ type: "ack", message_ids: [...fits, ...fits] });
      await waitFor("the answer", () => s.frames.length === 2);
      expect(s.frames[1]).toEqual({ type: "acked", acknowledged: [id], not_found: fits.slice(1) });
      s.send({ type: "ack", message_ids: ["missing-x"] });
      await waitFor("the last answer", () => s.frames.length === 3);
      expect(s.frames[2]).toMatchObject({ type: "error", status: 429, code: "rate_limited" });
      await s.close();
    } finally {
      await limited.close();
    }
  });

  it("counts each id of POST /relay/messages/ack and each DELETE, 429 with Retry-After past the limit", async () => {
    const limited = await runRelay(env, { limits: { perAgentPerMinute: LIMIT } });
    try {
      const c = clientOf(env, limited, carol);
      // The request takes one, its 25 ids 24 more: refused whole, before anything is removed.
      const batch = await c.request("POST", "/relay/messages/ack", {
        message_ids: Array.from({ length: 25 }, (_, i) => `missing-${i}`),
      });
      expect(batch.status, batch.text).toBe(429);
      expect(Number(batch.headers.get("retry-after"))).toBeGreaterThan(0);
      expect(JSON.parse(batch.text)).toMatchObject({ status: "error", code: "rate_limited" });
      // Five ids cost five: what is left after the refused request (one) and this one fits.
      expect(await c.ackMany(["a", "b", "c", "d", "e"])).toEqual({
        acknowledged: [],
        not_found: ["a", "b", "c", "d", "e"],
      });
      // 20 - 1 - 5 = 14 DELETEs, then 429.
      for (let i = 0; i < LIMIT - 6; i++) expect(await c.ack(`missing-${i}`)).toBe(false);
      const refused = await c.request("DELETE", "/relay/messages/missing-x");
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });
});
