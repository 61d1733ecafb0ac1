// The inbox group of `ifp check`: the status of each kind of bad request to the target's inbox
// and, with a key it trusts, acceptance, idempotency, the date window, a 1 MB message and the
// error-phase answers it sends.
import { createPublicKey } from "node:crypto";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../protocol/keys.ts";
import type { Message } from "../protocol/message.ts";
import { signMessage } from "../protocol/signing.ts";
import { isoSeconds } from "../util/time.ts";
import { checkMessage, clip, codeOf, errorBodyProblem, JSON_HEADERS, parseJson } from "./common.ts";
import type { Answer } from "./probe.ts";
import { accept, failThenAccept, refuse, type Delivery } from "./test-inbox.ts";
import { rateLimitCheck } from "./tls.ts";
import { NEEDS_KEY, type CheckContext } from "./types.ts";

const INBOX = "/.well-known/agent/inbox";
/** The size spec 8 says agents SHOULD accept; larger MAY be refused with 413. */
const ONE_MB = 1024 * 1024;
/** The message size `inbox.large-message` sends: 1 MB, under the 1 MiB agents commonly set. */
const LARGE = 1_000_000;
/** The kit never uploads more than this, whatever a document advertises. */
const MAX_UPLOAD = 4 * ONE_MB;
/** The authentication level a key the target's humans listed has (IFP-5 2: "verified"). */
export const KEY_LEVEL = 2;

/** The standard codes IFP-6 3.2 names for each refusal the kit provokes. */
const CODES = {
  format: ["invalid_format"],
  signature: ["invalid_signature"],
  sender: ["unknown_sender", "invalid_signature"],
  size: ["payload_too_large"],
} as const;

/**
 * The inbox (spec 3, 5.1, 7, 8; IFP-6 2–6): the status of each kind of bad request, and — with
 * a key the target trusts — acceptance, idempotency, the date window, a 1 MB message, and what
 * follows a protocol problem or an unmet capability condition.
 */
export async function inboxChecks(ctx: CheckContext): Promise<void> {
  const url = `${ctx.base}${INBOX}`;
  const agentId = ctx.learned.agentId ?? (await learnAgentId(ctx)) ?? ctx.base;

  /** POST and judge the status: `expect` lists the statuses that pass; error answers are kept for the error-body checks. */
  const post = async (
    id: string,
    body: string | Uint8Array,
    expect: readonly number[],
    opts: { headers?: Record<string, string>; code?: readonly string[]; what: string },
  ) => {
    let res: Answer;
    try {
      res = await ctx.probe.request(url, { method: "POST", headers: { ...JSON_HEADERS, ...opts.headers }, body });
    } catch (err) {
      ctx.record(id, "fail", `${opts.what}: ${(err as Error).message}`);
      return undefined;
    }
    if (res.status >= 400)
      ctx.errors.push({
        id,
        status: res.status,
        text: res.text,
        code: expect.includes(res.status) ? opts.code : undefined,
      });
    if (!expect.includes(res.status))
      ctx.record(
        id,
        "fail",
        `${opts.what} was answered ${res.status}${codeOf(res)}, expected ${expect.join(" or ")}: ${clip(res.text)}`,
      );
    else ctx.record(id, "pass", `${opts.what} → ${res.status}${codeOf(res)}`);
    return res;
  };

  await post("inbox.media-type", "ifp check", [415, 400], {
    headers: { "content-type": "text/plain; charset=utf-8" },
    what: "a text/plain body that is not JSON",
  });
  await post("inbox.not-json", '{"ifp": 4, "headers": ', [400], {
    code: CODES.format,
    what: "a body that is not JSON",
  });
  await post(
    "inbox.schema",
    JSON.stringify({ ifp: 4, headers: { message_id: "msg:ifp-check-schema" }, body: {} }),
    [400],
    { code: CODES.format, what: "a message without date, from, to, conversation_id, sequence, phase" },
  );
  await oversize(ctx, url);
  await post("inbox.unsigned", JSON.stringify(checkMessage("ifp-check-unsigned", agentId)), [401], {
    code: CODES.signature,
    what: "a well-formed unsigned message",
  });
  const stranger = {
    agentId: `ifp-check-stranger-${Math.random().toString(36).slice(2, 10)}`,
    keyId: "key-1",
    privateKey: privateKeyFromPem(generateSigningKey().privateKeyPem),
  };
  await post(
    "inbox.unknown-sender",
    JSON.stringify(signMessage(checkMessage(stranger.agentId, agentId), stranger)),
    [401],
    { code: CODES.sender, what: "a message signed by an agent the target cannot know" },
  );
  await notFound(ctx);

  if (!ctx.key) {
    for (const id of [
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
    ])
      ctx.record(id, "skip", NEEDS_KEY);
  } else {
    const key = ctx.key;
    const send = ctx.send;
    if (send)
      send.inbox.setRoot(key.agentId, {
        ifp: 5,
        agent_id: key.agentId,
        keys: [
          {
            key_id: key.keyId,
            type: "ed25519",
            public_key: rawPublicKey(createPublicKey(key.privateKey)),
            status: "active",
          },
        ],
        endpoints: { inbox: `${send.inbox.base}${INBOX}` },
      });
    const signed = (m: Message) => signMessage(m, key);
    const tampered = signed(checkMessage(key.agentId, agentId));
    tampered.body = { text: "ifp check: this body was changed after signing" };
    await post("inbox.bad-signature", JSON.stringify(tampered), [401], {
      code: CODES.signature,
      what: "a message whose body was changed after signing",
    });

    const good = signed(checkMessage(key.agentId, agentId));
    const idem = { "idempotency-key": good.headers.message_id };
    const first = await post("inbox.accepted", JSON.stringify(good), [202], {
      headers: idem,
      what: "a valid signed message",
    });
    if (first?.status === 202) {
      const ack = parseJson(first.text) as { status?: unknown; message_id?: unknown } | undefined;
      if (ack?.status !== "accepted")
        ctx.record(
          "inbox.acknowledgement",
          "fail",
          `the 202's body is not the acknowledgement {status: "accepted", message_id}: ${clip(first.text)}`,
        );
      else if (ack.message_id !== undefined && ack.message_id !== good.headers.message_id)
        ctx.record(
          "inbox.acknowledgement",
          "fail",
          `the 202 names message_id ${JSON.stringify(ack.message_id)}, not ${good.headers.message_id}`,
        );
      else
        ctx.record(
          "inbox.acknowledgement",
          "pass",
          `{status: "accepted"${ack.message_id ? `, message_id: ${JSON.stringify(ack.message_id)}` : ""}}`,
        );
      ctx.record(
        "inbox.acknowledgement.message-id",
        ack?.message_id === good.headers.message_id ? "pass" : "fail",
        ack?.message_id === good.headers.message_id
          ? "the acknowledgement names the message_id"
          : "the acknowledgement does not name the message_id",
      );
      const again = await post("inbox.idempotent", JSON.stringify(good), [202], {
        headers: idem,
        what: "the same message_id again",
      });
      const repeat =
        again?.status === 202 ? (parseJson(again.text) as { message_id?: unknown } | undefined) : undefined;
      if (repeat?.message_id !== undefined && repeat.message_id !== good.headers.message_id)
        ctx.record(
          "inbox.idempotent",
          "fail",
          `the repeat's acknowledgement names ${JSON.stringify(repeat.message_id)}`,
        );
    } else {
      ctx.record("inbox.acknowledgement", "skip", "no 202 to look at");
      ctx.record("inbox.acknowledgement.message-id", "skip", "no 202 to look at");
      ctx.record("inbox.idempotent", "skip", "the first delivery was not accepted");
    }

    await largeMessage(ctx, url, signed(checkMessage(key.agentId, agentId)));

    const dated = [
      ["inbox.date-window", -30 * 86_400_000, "dated 30 days ago"],
      ["inbox.date-future", 2 * 86_400_000, "dated 2 days ahead"],
    ] as const;
    for (const [id, offset, what] of dated) {
      const m = signed(checkMessage(key.agentId, agentId, { date: isoSeconds(new Date(Date.now() + offset)) }));
      try {
        const res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(m) });
        const refused = res.status === 400 || res.status === 401;
        if (res.status >= 400) ctx.errors.push({ id, status: res.status, text: res.text });
        if (refused) ctx.record(id, "pass", `a signed message ${what} → ${res.status}${codeOf(res)}`);
        else if (id === "inbox.date-future" && res.status === 202)
          ctx.record(id, "skip", `a signed message ${what} was accepted (checking the date is a MAY)`);
        else
          ctx.record(
            id,
            "fail",
            `a signed message ${what} was answered ${res.status}${codeOf(res)}; ${id === "inbox.date-window" ? "very old messages SHOULD be refused even when signed" : "expected 400 or 401"}`,
          );
      } catch (err) {
        ctx.record(id, "fail", (err as Error).message);
      }
    }

    // A protocol problem: 202 now, an error-phase message later (7.2.1). Its reply is the
    // message the kit's inbox fails twice and then takes, for the send group's retry checks
    // when no local API makes the target send; a second probe's reply is refused with 400.
    const waits: Promise<void>[] = [];
    const odd = signed(checkMessage(key.agentId, agentId, { phase: "ifp-check-unknown-phase" }));
    send?.inbox.routeReplies(
      odd.headers.message_id,
      odd.headers.conversation_id,
      "reply:protocol-problem",
      send.localApi ? accept : failThenAccept(2),
    );
    const oddRes = await post("inbox.protocol-problem", JSON.stringify(odd), [202], {
      what: "a signed message in an unknown phase (a protocol-level problem, answered later)",
    });
    if (oddRes?.status !== 202) ctx.record("inbox.protocol-problem.reply", "skip", "the probe was not accepted");
    else if (!send)
      ctx.record(
        "inbox.protocol-problem.reply",
        "skip",
        "needs the kit's inbox (--inbox-cert, --inbox-key) with the target sending the key's agent's messages there",
      );
    else
      waits.push(
        awaitReply(
          ctx,
          "inbox.protocol-problem.reply",
          "reply:protocol-problem",
          odd,
          "the error-phase answer to the unknown phase",
        ),
      );
    if (send && !send.localApi) {
      const odd2 = signed(checkMessage(key.agentId, agentId, { phase: "ifp-check-unknown-phase" }));
      send.inbox.routeReplies(odd2.headers.message_id, odd2.headers.conversation_id, "reply:refused", refuse);
      await ctx.probe
        .request(url, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(odd2) })
        .catch(() => undefined);
    }
    await authLevel(ctx, url, agentId, signed, waits);
    await Promise.all(waits);
  }
  errorBodyChecks(ctx);
  rateLimitCheck(ctx, "inbox.rate-limit-headers");
}

/** Wait for an error-phase message answering `probe` in the kit's inbox mailbox. */
async function awaitReply(ctx: CheckContext, id: string, mailbox: string, probe: Message, what: string): Promise<void> {
  const send = ctx.send!;
  const answered = (d: Delivery) => {
    const h = (d.json as Message | undefined)?.headers;
    return (
      h?.phase === "error" &&
      (h.thread?.in_reply_to === probe.headers.message_id || h.conversation_id === probe.headers.conversation_id)
    );
  };
  const came = await send.inbox.until(() => send.inbox.mailbox(mailbox).some(answered), Date.now() + send.waitMs);
  ctx.record(
    id,
    came ? "pass" : "fail",
    came
      ? `${what} came (phase error, in reply to ${probe.headers.message_id})`
      : `no error-phase message answering ${probe.headers.message_id} reached the kit's inbox within ${Math.round(send.waitMs / 1000)} s`,
  );
}

/**
 * A capability whose `min_auth_level` is above the kit key's level, requested: 401 (spec 5.1:
 * insufficient authentication level), or 202 and an error-phase message explaining the
 * mismatch (7.2.2).
 */
async function authLevel(
  ctx: CheckContext,
  url: string,
  agentId: string,
  signed: (m: Message) => Message,
  waits: Promise<void>[],
): Promise<void> {
  const id = "inbox.auth-level";
  const caps = ctx.learned.capabilities?.capabilities ?? [];
  const cap = caps.find(
    (c) => typeof c.conditions?.min_auth_level === "number" && (c.conditions.min_auth_level as number) > KEY_LEVEL,
  );
  if (!cap)
    return ctx.record(
      id,
      "skip",
      `no capability in the capability document asks for an authentication level above ${KEY_LEVEL} (the level of a key the target's humans listed)`,
    );
  const m = signed(checkMessage(ctx.key!.agentId, agentId, { capabilities: { request: [cap.name] } }));
  ctx.send?.inbox.routeReplies(m.headers.message_id, m.headers.conversation_id, "reply:auth-level", accept);
  let res: Answer;
  try {
    res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(m) });
  } catch (err) {
    return ctx.record(id, "fail", (err as Error).message);
  }
  const what = `a request for ${cap.name} (min_auth_level ${cap.conditions!.min_auth_level as number}) signed at level ${KEY_LEVEL}`;
  if (res.status === 401) {
    ctx.errors.push({ id, status: res.status, text: res.text });
    return ctx.record(id, "pass", `${what} → 401${codeOf(res)}`);
  }
  if (res.status !== 202) {
    if (res.status >= 400) ctx.errors.push({ id, status: res.status, text: res.text });
    return ctx.record(
      id,
      "fail",
      `${what} was answered ${res.status}${codeOf(res)}, expected 401, or 202 and an error-phase message`,
    );
  }
  if (!ctx.send)
    return ctx.record(id, "skip", `${what} → 202; whether an error-phase message follows needs the kit's inbox`);
  waits.push(
    awaitReply(ctx, id, "reply:auth-level", m, `${what} → 202, and the error-phase message explaining the mismatch`),
  );
}

/** A signed message of about 1 MB: agents SHOULD accept it (spec 8). */
async function largeMessage(ctx: CheckContext, url: string, small: Message): Promise<void> {
  const id = "inbox.large-message";
  const limit = ctx.learned.maxMessageBytes;
  const bare = signMessage({ ...small, security: undefined, body: { text: "" } } as Message, ctx.key!);
  const pad = LARGE - JSON.stringify(bare).length - 16;
  const m = signMessage(
    { ...small, security: undefined, body: { text: `ifp check: 1 MB ${"x".repeat(Math.max(0, pad))}` } } as Message,
    ctx.key!,
  );
  const body = JSON.stringify(m);
  try {
    const res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body });
    if (res.status >= 400) ctx.errors.push({ id, status: res.status, text: res.text });
    ctx.record(
      id,
      res.status === 202 ? "pass" : "fail",
      res.status === 202
        ? `a signed ${body.length}-byte message → 202`
        : `a signed ${body.length}-byte message was answered ${res.status}${codeOf(res)}; agents SHOULD accept up to 1 MB${limit ? ` (it advertises ${limit} bytes)` : ""}`,
    );
  } catch (err) {
    ctx.record(id, "fail", `a ${body.length}-byte message: ${(err as Error).message}`);
  }
}

async function oversize(ctx: CheckContext, url: string): Promise<void> {
  const id = "inbox.oversize";
  const limit = ctx.learned.maxMessageBytes ?? ONE_MB;
  const size = limit + 1024;
  if (size > MAX_UPLOAD)
    return ctx.record(
      id,
      "skip",
      `the advertised limit (${limit} bytes) is above what the kit uploads (${MAX_UPLOAD})`,
    );
  const body = Buffer.alloc(size, 0x20);
  body.write('{"ifp":4,"pad":"', 0);
  body.write('"}', size - 2);
  let res: Answer;
  try {
    res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body });
  } catch (err) {
    return ctx.record(id, "fail", `a ${size}-byte body got no answer: ${(err as Error).message}`);
  }
  if (res.status >= 400)
    ctx.errors.push({ id, status: res.status, text: res.text, code: res.status === 413 ? CODES.size : undefined });
  if (res.status === 413) ctx.record(id, "pass", `a ${size}-byte body → 413${codeOf(res)}`);
  else if (res.status === 400 || res.status === 401)
    ctx.record(
      id,
      "skip",
      `a ${size}-byte body was read and refused as a message (${res.status}); refusing it with 413 is a MAY`,
    );
  else
    ctx.record(
      id,
      "fail",
      `a ${size}-byte body that is no message was answered ${res.status}${codeOf(res)}, expected 413 (or 400)`,
    );
}

async function notFound(ctx: CheckContext): Promise<void> {
  const url = `${ctx.base}/.well-known/agent/ifp-check-no-such-endpoint`;
  try {
    const res = await ctx.probe.request(url, { headers: { accept: "application/json" } });
    if (res.status >= 400) ctx.errors.push({ id: "inbox.not-found", status: res.status, text: res.text });
    ctx.record(
      "inbox.not-found",
      res.status === 404 ? "pass" : "fail",
      res.status === 404
        ? `an unknown path → 404${codeOf(res)}`
        : `an unknown path was answered ${res.status}, expected 404`,
    );
  } catch (err) {
    ctx.record("inbox.not-found", "fail", (err as Error).message);
  }
}

/** Every error answer seen: the body of spec 2.7 (SHOULD), and where IFP-6 names one, its standard code. */
function errorBodyChecks(ctx: CheckContext): void {
  if (!ctx.errors.length) {
    ctx.record("inbox.error-body", "skip", "no error answer seen");
    ctx.record("inbox.error-codes", "skip", "no error answer seen");
    return;
  }
  const bodyless = ctx.errors
    .map((e) => ({ e, problem: errorBodyProblem({ status: e.status, text: e.text, headers: new Headers() }) }))
    .filter((x) => x.problem);
  ctx.record(
    "inbox.error-body",
    bodyless.length ? "fail" : "pass",
    bodyless.length
      ? `${bodyless.map((x) => x.e.id).join(", ")}: ${bodyless[0]!.problem}`
      : `all ${ctx.errors.length} error answers carry {status: "error", code, message}`,
  );
  const coded = ctx.errors.filter((e) => e.code);
  const wrong = coded
    .map((e) => ({ e, problem: errorBodyProblem({ status: e.status, text: e.text, headers: new Headers() }, e.code) }))
    .filter((x) => x.problem);
  if (!coded.length) ctx.record("inbox.error-codes", "skip", "no error answer for which IFP-6 names a code");
  else
    ctx.record(
      "inbox.error-codes",
      wrong.length ? "fail" : "pass",
      wrong.length
        ? `${wrong.map((x) => x.e.id).join(", ")}: ${wrong[0]!.problem}`
        : `${coded.length} answers carry IFP-6's standard code`,
    );
}

/** The target's agent id, from its identity or capability document, when discovery did not run. */
async function learnAgentId(ctx: CheckContext): Promise<string | undefined> {
  for (const name of ["identity", "capabilities"]) {
    try {
      const res = await ctx.probe.request(`${ctx.base}/.well-known/agent/${name}`, {
        headers: { accept: "application/json" },
      });
      const doc = parseJson(res.text) as { agent_id?: unknown; capabilities?: unknown; keys?: unknown } | undefined;
      if (res.status !== 200 || typeof doc?.agent_id !== "string" || !doc.agent_id) continue;
      if (name === "identity" && Array.isArray(doc.keys))
        ctx.learned.identity = doc as NonNullable<CheckContext["learned"]["identity"]>;
      if (name === "capabilities" && Array.isArray(doc.capabilities))
        ctx.learned.capabilities = doc as NonNullable<CheckContext["learned"]["capabilities"]>;
      ctx.learned.agentId ??= doc.agent_id;
      if (ctx.learned.identity && ctx.learned.capabilities) break;
    } catch {
      // no document: the base URL stands in
    }
  }
  return ctx.learned.agentId;
}
