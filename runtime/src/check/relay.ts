// The relay group of `ifp check`: a relay's authentication and its refusals of bad publishes,
// and a round trip to oneself — publish, retrieve, the trace entry, topics, push (SSE, WebSocket,
// webhook), persistence, TTL, acknowledgement.
import { randomUUID } from "node:crypto";
import { signRequest } from "../protocol/http-signatures.ts";
import { generateSigningKey, privateKeyFromPem } from "../protocol/keys.ts";
import { Message } from "../protocol/message.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import { checkMessage, clip, codeOf, errorBodyProblem, parseJson } from "./common.ts";
import type { Answer } from "./probe.ts";
import { rateLimitCheck } from "./tls.ts";
import { NEEDS_KEY, type CheckContext } from "./types.ts";

/** Relays, like inboxes, take at least this much (spec 8, docs/relay.md maxMessageBytes default). */
const ONE_MB = 1024 * 1024;
/** The TTL of the message `relay.ttl` publishes, in seconds. */
const TTL_S = 2;
/** How long a push (SSE, WebSocket, webhook) may take to bring a waiting message. */
const PUSH_WAIT_MS = 8_000;

const randomKey = (agentId: string, keyId = "key-1"): SigningKey => ({
  agentId,
  keyId,
  privateKey: privateKeyFromPem(generateSigningKey().privateKeyPem),
});

const KEYED = [
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
  "relay.ack",
  "relay.ack.repeat",
  "relay.isolation.foreign-ack",
] as const;
const ROUND_TRIP = KEYED.slice(KEYED.indexOf("relay.retrieve"));

/**
 * A relay (spec 2.9–2.10, 3, 4.2, 5.5–5.6, 6, 8; IFP-8). The specification leaves the relay
 * API and its authentication open, so every request is made as this project's relay takes it
 * (docs/relay.md: RFC 9421 request signatures, the endpoints' payloads); the checks of that
 * profile are graded "profile", and what the specification itself requires — 202 for a
 * publish, the list on retrieval, the trace entry, the message unchanged, persistence, TTL —
 * at its own level. A relay that refuses the profile's signatures skips the round trip.
 */
export async function relayChecks(ctx: CheckContext): Promise<void> {
  const base = ctx.base;
  /** One request, signed with `key` (or unsigned), optionally changed after signing. */
  const send = async (
    method: string,
    path: string,
    opts: {
      key?: SigningKey;
      body?: string;
      contentType?: string;
      created?: Date;
      tamper?: (h: Record<string, string>) => void;
    } = {},
  ): Promise<Answer> => {
    const url = `${base}${path}`;
    let headers: Record<string, string> = {
      accept: "application/json",
      ...(opts.body !== undefined ? { "content-type": opts.contentType ?? "application/json" } : {}),
    };
    if (opts.key) headers = await signRequest({ method, url, headers, body: opts.body }, opts.key, opts.created);
    opts.tamper?.(headers);
    const res = await ctx.probe.request(url, { method, headers, body: opts.body });
    if (res.status >= 400)
      ctx.errors.push({ id: `${method} ${path.split("?")[0]}`, status: res.status, text: res.text });
    return res;
  };
  const expect = async (
    id: string,
    what: string,
    status: number,
    code: string | undefined,
    run: () => Promise<Answer>,
  ) => {
    let res: Answer;
    try {
      res = await run();
    } catch (err) {
      ctx.record(id, "fail", `${what}: ${(err as Error).message}`);
      return undefined;
    }
    if (res.status !== status)
      ctx.record(
        id,
        "fail",
        `${what} was answered ${res.status}${codeOf(res)}, expected ${status}${code ? ` ${code}` : ""}: ${clip(res.text)}`,
      );
    else {
      const problem = code ? errorBodyProblem(res, code) : undefined;
      ctx.record(id, problem ? "fail" : "pass", problem ?? `${what} → ${res.status}${codeOf(res)}`);
    }
    return res;
  };

  await expect("relay.auth.unsigned", "an unsigned GET /relay/messages", 401, "invalid_signature", () =>
    send("GET", "/relay/messages"),
  );
  const stranger = randomKey(`ifp-check-stranger-${randomUUID().slice(0, 8)}`);
  await expect(
    "relay.isolation.unknown-agent",
    "GET /relay/messages signed by an agent the relay does not serve",
    401,
    "unknown_sender",
    () => send("GET", "/relay/messages", { key: stranger }),
  );

  if (!ctx.key) {
    for (const id of KEYED) ctx.record(id, "skip", NEEDS_KEY);
    finish(ctx);
    return;
  }
  const key = ctx.key;
  const impostor = randomKey(key.agentId, key.keyId);
  await expect(
    "relay.auth.wrong-key",
    "a request signed with another key under your keyid",
    401,
    "invalid_signature",
    () => send("GET", "/relay/messages", { key: impostor }),
  );
  await expect("relay.auth.stale", "a request signed 10 minutes ago", 401, "invalid_signature", () =>
    send("GET", "/relay/messages", { key, created: new Date(Date.now() - 600_000) }),
  );
  const probeMsg = JSON.stringify(signMessage(checkMessage(key.agentId, key.agentId), key));
  await expect("relay.auth.digest", "a publish whose body was changed after signing", 401, "invalid_signature", () =>
    send("POST", "/relay/publish", {
      key,
      body: probeMsg,
      tamper: (h) => (h["content-digest"] = `sha-256=:${Buffer.alloc(32).toString("base64")}:`),
    }),
  );
  await expect("relay.publish.media-type", "a signed text/plain publish", 415, undefined, () =>
    send("POST", "/relay/publish", { key, body: "ifp check", contentType: "text/plain" }),
  );
  await expect("relay.publish.not-json", "a signed publish that is not JSON", 400, "invalid_format", () =>
    send("POST", "/relay/publish", { key, body: '{"ifp": 4, ' }),
  );
  await oversize(ctx, send, key);

  // The round trip, to oneself: publish, retrieve (trace), push, persistence and TTL, acknowledge.
  const message = signMessage(checkMessage(key.agentId, key.agentId), key);
  const id = message.headers.message_id;
  const published = await expect("relay.publish.accepted", "a signed publish to yourself", 202, undefined, () =>
    send("POST", "/relay/publish", { key, body: JSON.stringify(message) }),
  );
  if (published?.status !== 202) {
    const why =
      published?.status === 401
        ? "the relay refused this project's request signature (a profile); the round trip cannot be run"
        : "the publish was not accepted";
    for (const c of ROUND_TRIP) ctx.record(c, "skip", why);
    finish(ctx);
    return;
  }
  const expiring = signMessage(checkMessage(key.agentId, key.agentId, { ttl_seconds: TTL_S }), key);
  const expiringAt = Date.now() + TTL_S * 1000;
  const ttlRes = await send("POST", "/relay/publish", { key, body: JSON.stringify(expiring) }).catch((e: Error) => e);

  const pull = async (who: SigningKey): Promise<{ list?: unknown[]; problem?: string }> => {
    try {
      const res = await send("GET", "/relay/messages?limit=100", { key: who });
      const list = parseJson(res.text);
      if (res.status !== 200) return { problem: `GET /relay/messages answered ${res.status}${codeOf(res)}` };
      if (!Array.isArray(list)) return { problem: `GET /relay/messages is not a JSON list: ${clip(res.text)}` };
      return { list };
    } catch (err) {
      return { problem: (err as Error).message };
    }
  };
  const find = (list: unknown[], mid: string) => list.find((m) => (m as Message)?.headers?.message_id === mid);
  const first = await pull(key);
  const mine = first.list && find(first.list, id);
  if (!mine) {
    const problem =
      first.problem ??
      (first.list!.length >= 100
        ? "the mailbox holds 100 or more messages; the one published is not on the first page"
        : "the message just published is not in the mailbox");
    ctx.record("relay.retrieve", first.list && first.list.length >= 100 ? "skip" : "fail", problem);
    for (const c of ["relay.trace", "relay.trace.by", "relay.unchanged"] as const)
      ctx.record(c, "skip", "the message was not retrieved");
  } else {
    ctx.record("relay.retrieve", "pass", `GET /relay/messages lists it (${first.list!.length} waiting)`);
    const parsed = Message.safeParse(mine);
    const trace = parsed.success ? parsed.data.trace?.received?.at(-1) : undefined;
    const problem = traceProblem(mine, key.agentId);
    ctx.record("relay.trace", problem ? "fail" : "pass", problem ?? `last trace entry ${JSON.stringify(trace)}`);
    const by = `relay:${ctx.relayUrl}`;
    ctx.record(
      "relay.trace.by",
      !trace ? "fail" : trace.by === by ? "pass" : "fail",
      !trace
        ? "no trace entry"
        : trace.by === by
          ? `by is ${by}, the relay's own URL`
          : `by is ${JSON.stringify(trace.by)}, not ${JSON.stringify(by)} (relay:<relay_url>, the relay's own URL)`,
    );
    const same =
      parsed.success &&
      JSON.stringify(parsed.data.body) === JSON.stringify(message.body) &&
      JSON.stringify(parsed.data.security) === JSON.stringify(message.security) &&
      JSON.stringify(parsed.data.headers) === JSON.stringify(message.headers);
    ctx.record(
      "relay.unchanged",
      same ? "pass" : "fail",
      same
        ? "headers, body and signature came back as published"
        : "the message came back changed beyond its trace (headers, body or signature)",
    );
  }

  await pushChecks(ctx, key, id);
  await topics(ctx, send, key);

  // Persistence and TTL: the first message is still there after everything above; the expiring one is gone.
  const left = expiringAt + 1500 - Date.now();
  if (left > 0) await new Promise((r) => setTimeout(r, left));
  const later = await pull(key);
  if (!later.list) {
    ctx.record("relay.persistence", "fail", later.problem!);
    ctx.record("relay.ttl", "fail", later.problem!);
  } else {
    ctx.record(
      "relay.persistence",
      find(later.list, id) ? "pass" : mine ? "fail" : "skip",
      find(later.list, id)
        ? "the message published at the start is still held at the end of the run, unacknowledged"
        : mine
          ? "the message published at the start, never acknowledged, is gone by the end of the run"
          : "the message was never retrieved",
    );
    if (ttlRes instanceof Error || ttlRes.status !== 202)
      ctx.record(
        "relay.ttl",
        "skip",
        `the message with ttl_seconds ${TTL_S} was not accepted (${ttlRes instanceof Error ? ttlRes.message : ttlRes.status})`,
      );
    else {
      const gone = !find(later.list, expiring.headers.message_id);
      ctx.record(
        "relay.ttl",
        gone ? "pass" : "fail",
        gone
          ? `a message with ttl_seconds ${TTL_S} is no longer handed out after it expired`
          : `a message with ttl_seconds ${TTL_S} is still handed out ${Math.round((Date.now() - expiringAt) / 1000) + TTL_S} s after it was published`,
      );
    }
  }

  const path = `/relay/messages/${encodeURIComponent(id)}`;
  const acked = await send("DELETE", path, { key }).catch((e: Error) => e);
  if (acked instanceof Error) ctx.record("relay.ack", "fail", acked.message);
  else
    ctx.record(
      "relay.ack",
      acked.status >= 200 && acked.status < 300 ? "pass" : "fail",
      `DELETE ${path} → ${acked.status}${codeOf(acked)}`,
    );
  await expect("relay.ack.repeat", "acknowledging the same message again", 404, "not_found", () =>
    send("DELETE", path, { key }),
  );
  await expect("relay.isolation.foreign-ack", "acknowledging a message id that is not yours", 404, "not_found", () =>
    send("DELETE", `/relay/messages/${encodeURIComponent(`msg:ifp-check-${randomUUID()}`)}`, { key }),
  );
  await plainWebhook(ctx, send, key);
  await webhook(ctx, send, key);
  finish(ctx);
}

/**
 * What is wrong with the relay's trace entry on a copy of a message `from` published (spec 2.9,
 * 4.2: appended before the message is made available, by pull or by push), or undefined.
 */
function traceProblem(copy: unknown, from: string): string | undefined {
  const parsed = Message.safeParse(copy);
  const trace = parsed.success ? parsed.data.trace?.received?.at(-1) : undefined;
  if (!trace) return "the message has no trace.received[] entry (a relay MUST append one)";
  const ok =
    typeof trace.by === "string" &&
    trace.by.startsWith("relay:") &&
    trace.from === from &&
    !Number.isNaN(Date.parse(trace.at)) &&
    typeof trace.with === "string" &&
    !!trace.with;
  return ok
    ? undefined
    : `the trace entry ${JSON.stringify(trace)} is not {by: "relay:<url>", with, at, from: "${from}"}`;
}

/** The trace check of a pushed copy: skipped when the push brought none. */
function recordPushTrace(ctx: CheckContext, id: string, how: string, copy: unknown, from: string): void {
  const problem = copy === undefined ? undefined : traceProblem(copy, from);
  if (copy === undefined) ctx.record(id, "skip", `no copy came by ${how} to look at`);
  else
    ctx.record(
      id,
      problem ? "fail" : "pass",
      problem ? `the copy pushed by ${how}: ${problem}` : `the copy pushed by ${how} carries the relay's trace entry`,
    );
}

/** The message of a pushed payload with `id`: the payload itself, or its `message` (the payload's shape is the relay's). */
function pushedMessage(payload: unknown, id: string): Message | undefined {
  for (const m of [payload, (payload as { message?: unknown } | undefined)?.message])
    if ((m as Message | undefined)?.headers?.message_id === id) return m as Message;
  return undefined;
}

/** A webhook over plain HTTP is refused when it is registered (spec 5.2: plain HTTP MUST NOT be used). */
async function plainWebhook(ctx: CheckContext, send: Send, key: SigningKey): Promise<void> {
  const id = "relay.push.webhook.https-only";
  const hook = `${ctx.send?.inbox.plainBase ?? "http://127.0.0.1:9"}/hook/ifp-check-${randomUUID().slice(0, 8)}`;
  try {
    const sub = await send("POST", "/relay/subscribe", {
      key,
      body: JSON.stringify({ push: { webhook: hook, agent: key.agentId } }),
    });
    if (sub.status === 404 || sub.status === 405)
      return ctx.record(id, "skip", `POST /relay/subscribe answered ${sub.status}: webhooks are not offered`);
    if (sub.status >= 400 && sub.status < 500)
      return ctx.record(id, "pass", `registering the webhook ${hook} was refused: ${sub.status}${codeOf(sub)}`);
    ctx.record(
      id,
      "fail",
      `registering the webhook ${hook} was answered ${sub.status}${codeOf(sub)}, not refused: messages would be pushed over plain HTTP`,
    );
    if (sub.status < 300)
      await send("POST", "/relay/subscribe", {
        key,
        body: JSON.stringify({ push: { webhook: null, agent: key.agentId } }),
      }).catch(() => undefined);
  } catch (err) {
    ctx.record(id, "fail", (err as Error).message);
  }
}

function finish(ctx: CheckContext): void {
  const bad = ctx.errors
    .map((e) => ({ e, problem: errorBodyProblem({ status: e.status, text: e.text, headers: new Headers() }) }))
    .filter((x) => x.problem);
  if (!ctx.errors.length) ctx.record("relay.error-body", "skip", "no error answer seen");
  else
    ctx.record(
      "relay.error-body",
      bad.length ? "fail" : "pass",
      bad.length
        ? `${bad[0]!.e.id}: ${bad[0]!.problem}`
        : `all ${ctx.errors.length} error answers carry {status: "error", code, message}`,
    );
  rateLimitCheck(ctx, "relay.rate-limit-headers");
}

type Send = (
  method: string,
  path: string,
  opts?: { key?: SigningKey; body?: string; contentType?: string },
) => Promise<Answer>;

async function oversize(ctx: CheckContext, send: Send, key: SigningKey): Promise<void> {
  const big = Buffer.alloc(ONE_MB + 1024, 0x20);
  big.write('{"ifp":4,"pad":"', 0);
  big.write('"}', big.length - 2);
  try {
    const res = await send("POST", "/relay/publish", { key, body: big.toString("latin1") });
    const problem = res.status === 413 ? errorBodyProblem(res, "payload_too_large") : undefined;
    if (res.status === 413)
      ctx.record(
        "relay.publish.oversize",
        problem ? "fail" : "pass",
        problem ?? `a ${big.length}-byte publish → 413 payload_too_large`,
      );
    else if (res.status === 400)
      ctx.record(
        "relay.publish.oversize",
        "pass",
        `a ${big.length}-byte publish was read and refused as a message (400); this relay takes more than 1 MiB`,
      );
    else
      ctx.record(
        "relay.publish.oversize",
        "fail",
        `a ${big.length}-byte signed publish that is no message was answered ${res.status}${codeOf(res)}, expected 413`,
      );
  } catch (err) {
    ctx.record("relay.publish.oversize", "fail", `a ${big.length}-byte publish: ${(err as Error).message}`);
  }
}

/** SSE (`GET /relay/events`) and WebSocket (`GET /relay/ws`) bring the waiting message (push MAY; the API is the profile's). */
async function pushChecks(ctx: CheckContext, key: SigningKey, id: string): Promise<void> {
  const events = `${ctx.base}/relay/events`;
  try {
    const headers = await signRequest({ method: "GET", url: events, headers: { accept: "text/event-stream" } }, key);
    // Spec 4.2 leaves the event's shape open: an unnamed event is of type "message" (HTML standard), as is `event:message`.
    const copyIn = (events: { event: string; data: string }[]) =>
      events
        .filter((e) => e.event === "message")
        .map((e) => pushedMessage(parseJson(e.data), id))
        .find((m) => m);
    const r = await ctx.probe.stream(events, headers, (evs) => !!copyIn(evs), PUSH_WAIT_MS);
    if (r.status === 404 || r.status === 405) {
      ctx.record("relay.push.sse", "skip", `GET /relay/events answered ${r.status}: not offered`);
      ctx.record("relay.push.sse.trace", "skip", "SSE is not offered");
    } else {
      ctx.record(
        "relay.push.sse",
        r.done ? "pass" : "fail",
        r.done
          ? "GET /relay/events streamed the waiting message as an SSE message event"
          : `GET /relay/events (${r.status || "no answer"}) did not bring the waiting message within ${PUSH_WAIT_MS / 1000} s: ${clip(r.text)}`,
      );
      recordPushTrace(ctx, "relay.push.sse.trace", "SSE", copyIn(r.events), key.agentId);
    }
  } catch (err) {
    ctx.record("relay.push.sse", "fail", (err as Error).message);
    ctx.record("relay.push.sse.trace", "skip", "no copy came by SSE to look at");
  }
  const ws = `${ctx.base}/relay/ws`;
  try {
    const headers = await signRequest({ method: "GET", url: ws }, key);
    const copyIn = (frames: unknown[]) =>
      frames
        .filter((f) => (f as { type?: unknown })?.type === "message")
        .map((f) => pushedMessage((f as { message?: unknown }).message, id))
        .find((m) => m);
    const r = await ctx.probe.websocket(ws, headers, (frames) => !!copyIn(frames), PUSH_WAIT_MS);
    if (r.status === 404 || r.status === 405) {
      ctx.record("relay.push.websocket", "skip", `GET /relay/ws answered ${r.status}: not offered`);
      ctx.record("relay.push.websocket.trace", "skip", "the WebSocket is not offered");
    } else {
      ctx.record(
        "relay.push.websocket",
        r.done ? "pass" : "fail",
        r.done
          ? "the WebSocket session brought the waiting message as a message frame"
          : `the WebSocket session did not bring the waiting message: ${r.error ?? "no frame"}`,
      );
      recordPushTrace(ctx, "relay.push.websocket.trace", "WebSocket", copyIn(r.frames), key.agentId);
    }
  } catch (err) {
    ctx.record("relay.push.websocket", "fail", (err as Error).message);
    ctx.record("relay.push.websocket.trace", "skip", "no copy came by WebSocket to look at");
  }
}

/** Topics (2.10, MAY): the second key subscribes, the first publishes to `topic:<name>`, the second finds it. */
async function topics(ctx: CheckContext, send: Send, key: SigningKey): Promise<void> {
  const peer = ctx.peerKey;
  if (!peer)
    return ctx.record(
      "relay.topics",
      "skip",
      "needs --peer-key and --peer-from: a second agent the relay serves (a topic copy never goes back to its sender)",
    );
  const topic = `ifp-check.t${randomUUID().slice(0, 8)}`;
  try {
    const sub = await send("POST", "/relay/subscribe", {
      key: peer,
      body: JSON.stringify({ subscribe: { topics: [topic], agent: peer.agentId } }),
    });
    if (sub.status === 404 || sub.status === 405)
      return ctx.record("relay.topics", "skip", `POST /relay/subscribe answered ${sub.status}: topics are not offered`);
    if (sub.status !== 200 && sub.status !== 201 && sub.status !== 202)
      return ctx.record(
        "relay.topics",
        "fail",
        `subscribing ${peer.agentId} to ${topic} was answered ${sub.status}${codeOf(sub)}: ${clip(sub.text)}`,
      );
    const m = signMessage(checkMessage(key.agentId, `topic:${topic}`), key);
    const pub = await send("POST", "/relay/publish", { key, body: JSON.stringify(m) });
    if (pub.status !== 202)
      return ctx.record(
        "relay.topics",
        "fail",
        `publishing to topic:${topic} was answered ${pub.status}${codeOf(pub)}`,
      );
    const res = await send("GET", "/relay/messages?limit=100", { key: peer });
    const list = parseJson(res.text);
    const got = Array.isArray(list) && list.some((x) => (x as Message)?.headers?.message_id === m.headers.message_id);
    ctx.record(
      "relay.topics",
      got ? "pass" : "fail",
      got
        ? `a message to topic:${topic} reached the subscriber's mailbox`
        : `the subscriber's mailbox (${res.status}) does not hold the message published to topic:${topic}`,
    );
    if (got)
      await send("DELETE", `/relay/messages/${encodeURIComponent(m.headers.message_id)}`, { key: peer }).catch(
        () => undefined,
      );
    await send("POST", "/relay/subscribe", {
      key: peer,
      body: JSON.stringify({ unsubscribe: { topics: [topic], agent: peer.agentId } }),
    }).catch(() => undefined);
  } catch (err) {
    ctx.record("relay.topics", "fail", (err as Error).message);
  }
}

/** Webhook push (MAY; the profile's `push.webhook`): a message published to yourself is POSTed to the kit's inbox. */
async function webhook(ctx: CheckContext, send: Send, key: SigningKey): Promise<void> {
  const inbox = ctx.send?.inbox;
  if (!inbox) {
    const why = "needs the kit's inbox (--inbox-cert, --inbox-key) with a certificate the relay trusts";
    ctx.record("relay.push.webhook", "skip", why);
    return ctx.record("relay.push.webhook.trace", "skip", why);
  }
  const hook = inbox.hook(`relay-${randomUUID().slice(0, 8)}`);
  const box = `hook:${hook.split("/hook/")[1]}`;
  const m = signMessage(checkMessage(key.agentId, key.agentId), key);
  let copy: Message | undefined;
  try {
    const sub = await send("POST", "/relay/subscribe", {
      key,
      body: JSON.stringify({ push: { webhook: hook, agent: key.agentId } }),
    });
    if (sub.status === 404 || sub.status === 405)
      return ctx.record(
        "relay.push.webhook",
        "skip",
        `POST /relay/subscribe answered ${sub.status}: webhooks are not offered`,
      );
    if (sub.status >= 300)
      return ctx.record(
        "relay.push.webhook",
        "fail",
        `registering the webhook ${hook} was answered ${sub.status}${codeOf(sub)}: ${clip(sub.text)}`,
      );
    const pub = await send("POST", "/relay/publish", { key, body: JSON.stringify(m) });
    if (pub.status !== 202)
      return ctx.record("relay.push.webhook", "fail", `the publish to push was answered ${pub.status}${codeOf(pub)}`);
    const copyIn = () =>
      inbox
        .mailbox(box)
        .map((d) => pushedMessage(d.json, m.headers.message_id))
        .find((c) => c);
    const came = await inbox.until(() => !!copyIn(), Date.now() + PUSH_WAIT_MS);
    copy = copyIn();
    ctx.record(
      "relay.push.webhook",
      came ? "pass" : "fail",
      came
        ? `the message was POSTed to the webhook ${hook}`
        : `the webhook ${hook} got nothing within ${PUSH_WAIT_MS / 1000} s`,
    );
  } catch (err) {
    ctx.record("relay.push.webhook", "fail", (err as Error).message);
  } finally {
    recordPushTrace(ctx, "relay.push.webhook.trace", "webhook", copy, key.agentId);
    await send("POST", "/relay/subscribe", {
      key,
      body: JSON.stringify({ push: { webhook: null, agent: key.agentId } }),
    }).catch(() => undefined);
    await send("DELETE", `/relay/messages/${encodeURIComponent(m.headers.message_id)}`, { key }).catch(() => undefined);
  }
}
