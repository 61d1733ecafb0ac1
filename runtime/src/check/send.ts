// The send group of `ifp check`: what the target sends, seen by the kit's own inbox — retries
// after a 5xx and their backoff, none after a 4xx, Retry-After, no plain HTTP, relay fallback.
import { HttpClient } from "../net/http-client.ts";
import type { KeyObject } from "node:crypto";
import { verifyRequest } from "../protocol/http-signatures.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { Message } from "../protocol/message.ts";
import { DEFAULT_SIGNED_HEADERS, parseKeyId, verifySignature } from "../protocol/signing.ts";
import { clip, parseJson } from "./common.ts";
import {
  accept,
  type Behaviour,
  type Delivery,
  failThenAccept,
  limitThenAccept,
  messageIdOf,
  refuse,
} from "./test-inbox.ts";
import type { CheckContext, Outcome } from "./types.ts";

const SEND_CHECKS = [
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
] as const;

/** The Retry-After of the kit's 429, in seconds: longer than a short retry schedule's first pause. */
const RETRY_AFTER_S = 3;

/** At most this many messages the kit asks the target's local API to send. */
const MAX_LOCAL_API_CALLS = 8;

const identityOf = (inbox: string | undefined, relays?: string[]) => (agentId: string) => ({
  ifp: 5,
  agent_id: agentId,
  keys: [],
  ...(inbox ? { endpoints: { inbox } } : {}),
  ...(relays ? { relay: { urls: relays, preference: "any" } } : {}),
});

/**
 * What the target sends (spec 3, 4.1, 5.2, 7.2.3, 8; IFP-5 3; IFP-8 2.3), seen by the kit's own
 * HTTPS inbox: the target is made to send through its local API (`POST /outbox`), or — without
 * one — by the inbox group's probes that ask for an error-phase answer. The kit's inbox fails
 * one message twice with 500 and then takes it, refuses another with 400, offers an inbox over
 * plain HTTP for a third, and a pair of relays (the first answering 503) for a fourth; it
 * answers a fifth 429 with Retry-After before taking it, and offers for a sixth a relay that
 * refuses with 400 and one that answers 503 once: the sender comes back, but only to the second.
 */
export async function sendChecks(ctx: CheckContext): Promise<void> {
  const send = ctx.send;
  if (!send || (!send.localApi && !ctx.key)) {
    for (const id of SEND_CHECKS)
      ctx.record(
        id,
        "skip",
        "needs the kit's inbox (--inbox-cert, --inbox-key) and a way to make the target send: --local-api, or --key with the target sending the key's agent's messages to the kit's inbox",
      );
    return;
  }
  if (!send.localApi && !ctx.has("inbox.protocol-problem")) {
    for (const id of SEND_CHECKS)
      ctx.record(
        id,
        "skip",
        "without --local-api the target is made to send by the inbox group's probes: run it too (not --only send)",
      );
    return;
  }
  const inbox = send.inbox;
  const started = Date.now();
  const deadline = started + send.waitMs;
  let retryBox = "reply:protocol-problem";
  let refuseBox = "reply:refused";
  let relayBoxes: string[] | undefined;
  const limitBox = "limited";
  const [refusingRelay, downRelay] = ["relay-refuse/r/refuse", "relay-refuse/r/down"];
  if (send.localApi) {
    const plainInbox = `${inbox.plainBase}/s/plain/.well-known/agent/inbox`;
    const scenarios: [string, Parameters<typeof inbox.agent>[1]][] = [
      ["retry", { identity: (id) => identityOf(`${id}/.well-known/agent/inbox`)(id), inbox: failThenAccept(2) }],
      ["refuse", { identity: (id) => identityOf(`${id}/.well-known/agent/inbox`)(id), inbox: refuse }],
      ["plain", { identity: identityOf(plainInbox), inbox: accept }],
      [
        "relays",
        {
          identity: (id) => identityOf(undefined, [`${id}/r/one`, `${id}/r/two`])(id),
          inbox: accept,
          relays: { one: unavailable, two: accept },
        },
      ],
      [
        limitBox,
        { identity: (id) => identityOf(`${id}/.well-known/agent/inbox`)(id), inbox: limitThenAccept(RETRY_AFTER_S) },
      ],
      [
        "relay-refuse",
        {
          identity: (id) => identityOf(undefined, [`${id}/r/refuse`, `${id}/r/down`])(id),
          inbox: accept,
          relays: { refuse, down: (n, d) => (n === 1 ? unavailable(n, d) : accept(n, d)) },
        },
      ],
    ];
    retryBox = "retry";
    refuseBox = "refuse";
    relayBoxes = ["relays/r/one", "relays/r/two"];
    let calls = 0;
    for (const [name, spec] of scenarios) {
      const to = inbox.agent(name, spec);
      if (++calls > MAX_LOCAL_API_CALLS) break;
      const problem = await outbox(send.localApi, to, name);
      if (problem) {
        for (const id of SEND_CHECKS)
          ctx.record(id, "fail", `the local API did not take a message to ${to}: ${problem}`);
        return;
      }
    }
  }
  // Wait for the retried message to be taken (its third delivery), and a relay to take the relay one.
  const taken = (box: string) => inbox.mailbox(box).some((d) => d.status < 300);
  await inbox.until(() => taken(retryBox) && (!relayBoxes || relayBoxes.some(taken)), deadline);
  // Watch the refused message for twice the sender's first retry interval (at least 5 s), within the wait.
  const retries = inbox.mailbox(retryBox);
  const firstInterval = retries.length > 1 ? retries[1]!.at - retries[0]!.at : send.waitMs;
  const watch = Math.max(2 * firstInterval, 5000);
  const refusedAt = inbox.mailbox(refuseBox)[0]?.at;
  if (refusedAt !== undefined)
    await inbox.until(() => inbox.mailbox(refuseBox).length > 1, Math.min(deadline, refusedAt + watch));
  // The 429 is watched for its Retry-After and then as long as the 400; the relay that refused until the other took it.
  const limitedAt = inbox.mailbox(limitBox)[0]?.at;
  const relayRefusedAt = inbox.mailbox(refusingRelay)[0]?.at;
  if (send.localApi && (limitedAt !== undefined || relayRefusedAt !== undefined))
    await inbox.until(
      () =>
        (limitedAt === undefined || taken(limitBox)) &&
        (relayRefusedAt === undefined || taken(downRelay) || inbox.mailbox(refusingRelay).length > 1),
      Math.min(deadline, Math.max((limitedAt ?? 0) + RETRY_AFTER_S * 1000 + watch, (relayRefusedAt ?? 0) + watch)),
    );
  const waited = Math.round((Date.now() - started) / 1000);

  const plain = inbox.plain;
  ctx.record(
    "send.https-only",
    plain.length ? "fail" : "pass",
    plain.length
      ? `the target sent ${plain[0]!.method} ${plain[0]!.path} over plain HTTP to the inbox a peer advertised as http://`
      : "nothing reached the kit over plain HTTP, though a peer advertised an http:// inbox",
  );

  const posts = inbox.deliveries.filter(
    (d) => d.method === "POST" && d.mailbox && !d.mailbox.includes("/r/") && !d.mailbox.startsWith("hook:"),
  );
  if (!posts.length) {
    for (const id of [
      "send.request",
      "send.message",
      "send.idempotency-key",
      "send.signature",
      "send.signature.verifies",
    ] as const)
      ctx.record(id, "skip", `the target delivered nothing to the kit's inbox within ${waited} s`);
  } else {
    const badRequest = posts.find(
      (d) => mediaType(d.headers["content-type"]) !== "application/json" || !accepts(d.headers.accept),
    );
    ctx.record(
      "send.request",
      badRequest ? "fail" : "pass",
      badRequest
        ? `a delivery had Content-Type ${JSON.stringify(badRequest.headers["content-type"])} and Accept ${JSON.stringify(badRequest.headers.accept)}; both must be application/json`
        : `${posts.length} deliveries with Content-Type ${posts[0]!.headers["content-type"]} and Accept ${posts[0]!.headers.accept}`,
    );
    const parsed = posts.map((d) => ({ d, m: Message.safeParse(d.json) }));
    const notMessage = parsed.find((p) => !p.m.success);
    ctx.record(
      "send.message",
      notMessage ? "fail" : "pass",
      notMessage
        ? `a delivery is not an IFP-4 message: ${notMessage.m
            .error!.issues.slice(0, 2)
            .map((i) => `${i.path.join(".")}: ${i.message}`)
            .join("; ")} — ${clip(notMessage.d.body.toString("utf8"))}`
        : `${posts.length} deliveries, each one IFP-4 message`,
    );
    const noKey = posts.find((d) => d.headers["idempotency-key"] !== messageIdOf(d));
    ctx.record(
      "send.idempotency-key",
      noKey ? "fail" : "pass",
      noKey
        ? `a delivery of ${messageIdOf(noKey)} carried Idempotency-Key ${JSON.stringify(noKey.headers["idempotency-key"])}, not its message_id`
        : "every delivery carried Idempotency-Key = its message_id",
    );
    const messages = parsed.filter((p) => p.m.success).map((p) => p.m.data!);
    const shape = messages.map(signatureShape).find((x) => x);
    ctx.record(
      "send.signature",
      !messages.length ? "skip" : shape ? "fail" : "pass",
      !messages.length
        ? "no message to look at"
        : (shape ??
            "every message carries an ed25519 signature of its sender over the recommended headers and the body"),
    );
    const keys = await targetKeys(ctx);
    if (!messages.length) ctx.record("send.signature.verifies", "skip", "no message to look at");
    else if (!keys)
      ctx.record("send.signature.verifies", "skip", "the target's identity document (its keys) could not be read");
    else {
      const bad = messages.find((m) => !verifiesWith(m, keys));
      ctx.record(
        "send.signature.verifies",
        bad ? "fail" : "pass",
        bad
          ? `${bad.headers.message_id}'s signature does not verify with the target's identity-document key under this project's signing input (JCS of {headers, body})`
          : `${messages.length} messages verify with the target's published key`,
      );
    }
  }

  // Retries after a 5xx, their backoff, and none after a 4xx.
  if (!retries.length) {
    ctx.record("send.retry-5xx", "fail", `the message the kit fails with 500 never arrived within ${waited} s`);
    ctx.record("send.backoff", "skip", "no retry to time");
  } else {
    const same = retries.every((d) => messageIdOf(d) === messageIdOf(retries[0]!));
    ctx.record(
      "send.retry-5xx",
      retries.length > 1 && same ? "pass" : "fail",
      retries.length > 1
        ? same
          ? `answered 500, retried after ${secs(firstInterval)}`
          : "the retry carried another message_id"
        : `answered 500, not retried within ${waited} s (IFP-6 7 retries first after 1 minute: give --send-wait more time)`,
    );
    if (retries.length < 3)
      ctx.record(
        "send.backoff",
        "skip",
        `${retries.length} deliveries within ${waited} s; the second retry, whose interval shows the backoff, did not come`,
      );
    else {
      const second = retries[2]!.at - retries[1]!.at;
      // Jitter is allowed: the second interval must not be clearly shorter than the first.
      ctx.record(
        "send.backoff",
        second >= firstInterval * 0.8 ? "pass" : "fail",
        `intervals ${secs(firstInterval)}, then ${secs(second)}${second >= firstInterval * 0.8 ? "" : ": the pause shrank"}`,
      );
    }
  }
  const refused = inbox.mailbox(refuseBox);
  if (!refused.length)
    ctx.record("send.no-retry-4xx", "skip", `the message the kit refuses with 400 never arrived within ${waited} s`);
  else
    ctx.record(
      "send.no-retry-4xx",
      refused.length > 1 ? "fail" : "pass",
      refused.length > 1
        ? `answered 400, and sent again ${secs(refused[1]!.at - refused[0]!.at)} later: a sender MUST NOT retry after a 4xx`
        : `answered 400, not sent again within ${secs(Date.now() - refused[0]!.at)}`,
    );

  // Relays: the peer offers two (no inbox); the first answers 503.
  if (!relayBoxes) {
    for (const id of [
      "send.retry-after",
      "send.relay-no-retry-4xx",
      "send.relay-preference",
      "send.relay-fallback",
      "send.relay-signature",
    ] as const)
      ctx.record(id, "skip", "needs --local-api: the kit asks the target to send to a peer that has relays");
    return;
  }
  retryAfterCheck(ctx, inbox.mailbox(limitBox), waited);
  relayRefusalCheck(ctx, inbox.mailbox(refusingRelay), inbox.mailbox(downRelay), waited);
  const publishes = inbox.deliveries.filter((d) => relayBoxes.includes(d.mailbox));
  if (!publishes.length) {
    ctx.record(
      "send.relay-preference",
      "fail",
      `the peer reachable only through its relays got nothing at either within ${waited} s`,
    );
    ctx.record("send.relay-fallback", "skip", "no publish seen");
    ctx.record("send.relay-signature", "skip", "no publish seen");
    return;
  }
  ctx.record(
    "send.relay-preference",
    "pass",
    `published at ${publishes[0]!.mailbox.split("/r/")[1]}, one of the peer's relays (preference any)`,
  );
  const firstBox = publishes[0]!.mailbox;
  if (firstBox !== relayBoxes[0])
    ctx.record(
      "send.relay-fallback",
      "skip",
      "the first relay tried was the one that accepts; the fallback was not exercised",
    );
  else {
    const next = publishes.find((d) => d.mailbox === relayBoxes[1]);
    ctx.record(
      "send.relay-fallback",
      next ? "pass" : "fail",
      next
        ? `after the first relay's 503 the second was tried ${secs(next.at - publishes[0]!.at)} later`
        : `after the first relay's 503 the second was not tried within ${waited} s`,
    );
  }
  const keys = await targetKeys(ctx);
  if (!keys) ctx.record("send.relay-signature", "skip", "the target's identity document (its keys) could not be read");
  else {
    const problem = await publishSignatureProblem(publishes, keys);
    ctx.record(
      "send.relay-signature",
      problem ? "fail" : "pass",
      problem
        ? `a publish's request signature: ${problem}`
        : `${publishes.length} publishes carry an RFC 9421 signature by the target's key`,
    );
  }
}

/** A 429 with Retry-After: a retry, if one comes (spec 3 lets a sender give up on any 4xx), waits at least that long. */
function retryAfterCheck(ctx: CheckContext, limited: Delivery[], waited: number): void {
  const asked = `answered 429 with Retry-After: ${RETRY_AFTER_S}`;
  const pause = limited.length > 1 ? limited[1]!.at - limited[0]!.at : undefined;
  const [result, reason]: [Outcome, string] = !limited.length
    ? ["skip", `the message the kit answers 429 never arrived within ${waited} s`]
    : pause === undefined
      ? ["pass", `${asked}, not sent again within ${secs(Date.now() - limited[0]!.at)}`]
      : pause >= RETRY_AFTER_S * 1000
        ? ["pass", `${asked}, retried ${secs(pause)} later`]
        : ["fail", `${asked}, and sent again after only ${secs(pause)}`];
  ctx.record("send.retry-after", result, reason);
}

/** A relay that answered 400 is not asked again for the message, though the sender comes back for the other relay's 503. */
function relayRefusalCheck(ctx: CheckContext, refusing: Delivery[], down: Delivery[], waited: number): void {
  const [result, reason]: [Outcome, string] = !refusing.length
    ? [
        "skip",
        down.length
          ? "the sender never asked the relay that refuses (it went to the other, which took it)"
          : `the peer whose relays refuse and fail got nothing at either within ${waited} s`,
      ]
    : refusing.length > 1
      ? [
          "fail",
          `the relay answered 400, and the message was published there again ${secs(refusing[1]!.at - refusing[0]!.at)} later: a sender MUST NOT retry after a 4xx`,
        ]
      : down.length > 1
        ? [
            "pass",
            `after one relay's 400 and the other's 503, only the latter was asked again (${down.length} publishes there)`,
          ]
        : [
            "pass",
            `the relay answered 400, and the message was not published there again within ${secs(Date.now() - refusing[0]!.at)}`,
          ];
  ctx.record("send.relay-no-retry-4xx", result, reason);
}

const unavailable: Behaviour = () => ({
  status: 503,
  body: { status: "error", code: "unavailable", message: "ifp check: this relay is down on purpose; try the next" },
});

async function outbox(api: { url: string; token?: string }, to: string, scenario: string): Promise<string | undefined> {
  const http = new HttpClient({ timeoutMs: 10_000, userAgent: "ifp-check" });
  try {
    const res = await http.request(`${api.url.replace(/\/+$/, "")}/outbox`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(api.token ? { authorization: `Bearer ${api.token}` } : {}) },
      body: JSON.stringify({ to, phase: "context", text: `ifp check: sending conformance (${scenario})` }),
    });
    return res.status === 202 || res.status === 200 ? undefined : `${res.status} ${clip(res.text.slice(0, 2000))}`;
  } catch (err) {
    return (err as Error).message;
  } finally {
    await http.close();
  }
}

/** What is wrong with a message's signatures as IFP-5 3.1–3.2 describe them, or undefined. */
function signatureShape(m: Message): string | undefined {
  const sigs = m.security?.signatures ?? [];
  if (!sigs.length) return `${m.headers.message_id} carries no signature (security.signatures)`;
  const own = sigs.find((s) => parseKeyId(s.key_id)?.agentId === m.headers.from.agent);
  if (!own)
    return `${m.headers.message_id}: no signature's key_id names the sender ${m.headers.from.agent} (<agent_id>#<key>)`;
  if (own.alg !== "ed25519")
    return `${m.headers.message_id}: alg ${own.alg}, not ed25519 (IFP-5 3.4: SHOULD support Ed25519)`;
  const missing = DEFAULT_SIGNED_HEADERS.filter((h) => h in m.headers && !own.signed_headers.includes(h));
  if (missing.length) return `${m.headers.message_id}: signed_headers leave out ${missing.join(", ")} (IFP-5 3.1)`;
  if (own.signed_body !== true) return `${m.headers.message_id}: signed_body is not true`;
  if (Number.isNaN(Date.parse(own.created ?? ""))) return `${m.headers.message_id}: the signature has no created time`;
  return undefined;
}

type Keys = Map<string, KeyObject>;

/**
 * What is wrong with the first publish whose RFC 9421 request signature does not verify with
 * the target's keys, or undefined. Each signature is judged fresh as of when the kit received
 * it: a run that waits minutes for retries still grades the publishes of its first seconds.
 */
export async function publishSignatureProblem(publishes: Delivery[], keys: Keys): Promise<string | undefined> {
  const results = await Promise.all(
    publishes.map((d) =>
      verifyRequest(
        { method: d.method, url: d.url, headers: d.headers, body: d.body },
        (agent, keyId) => keyFor(keys, agent, keyId),
        d.at,
      ).then(
        () => undefined,
        (err: Error) => err.message,
      ),
    ),
  );
  return results.find((r) => r);
}

async function targetKeys(ctx: CheckContext): Promise<Keys | undefined> {
  let identity = ctx.learned.identity;
  if (!identity) {
    try {
      const res = await ctx.probe.request(`${ctx.base}/.well-known/agent/identity`, {
        headers: { accept: "application/json" },
      });
      const doc = parseJson(res.text) as CheckContext["learned"]["identity"];
      if (res.status === 200 && doc && Array.isArray(doc.keys)) identity = ctx.learned.identity = doc;
    } catch {
      return undefined;
    }
  }
  if (!identity) return undefined;
  const keys: Keys = new Map();
  for (const k of identity.keys) {
    if (k.type !== "ed25519" || k.status === "revoked") continue;
    try {
      keys.set(`${identity.agent_id}#${k.key_id}`, publicKeyFromRaw(k.public_key));
    } catch {
      // a malformed key is discovery.identity.keys' business
    }
  }
  return keys;
}

function keyFor(keys: Keys, agent: string, keyId: string): KeyObject {
  const key = keys.get(`${agent}#${keyId}`);
  if (!key) throw new Error(`the target's identity document has no key ${agent}#${keyId}`);
  return key;
}

function verifiesWith(m: Message, keys: Keys): boolean {
  return (m.security?.signatures ?? []).some((s) => {
    const key = keys.get(s.key_id);
    try {
      return !!key && verifySignature(m, s, key);
    } catch {
      return false; // a message that cannot be canonicalised does not verify
    }
  });
}

const mediaType = (v: string | undefined) => (v ?? "").split(";")[0]!.trim().toLowerCase();
const accepts = (v: string | undefined) =>
  !!v && v.split(",").some((t) => ["application/json", "application/*", "*/*"].includes(mediaType(t)));
const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
