import { isDeepStrictEqual } from "node:util";
import { generateSigningKey, privateKeyFromPem } from "../protocol/keys.ts";
import type { Message } from "../protocol/message.ts";
import { signMessage } from "../protocol/signing.ts";
import { isoSeconds } from "../util/time.ts";
import { checkMessage, clip, codeOf, errorBodyProblem, JSON_HEADERS, parseJson } from "./common.ts";
import type { Answer } from "./probe.ts";
import { rateLimitCheck } from "./tls.ts";
import { NEEDS_KEY, type CheckContext } from "./types.ts";

const INBOX = "/.well-known/agent/inbox";
/** The size spec 8 says agents SHOULD accept; larger MAY be refused with 413. */
const ONE_MB = 1024 * 1024;
/** The kit never uploads more than this, whatever a document advertises. */
const MAX_UPLOAD = 4 * ONE_MB;

/**
 * The inbox (spec 3, 5.1, 7, 8; IFP-6 2–6): status codes and error bodies for each kind of
 * bad request, and — with a key the target trusts — acceptance, idempotency and the date window.
 */
export async function inboxChecks(ctx: CheckContext): Promise<void> {
  const url = `${ctx.base}${INBOX}`;
  const agentId = ctx.learned.agentId ?? (await learnAgentId(ctx)) ?? ctx.base;

  /** POST and judge: `expect` is the status wanted, `code` the error code (when an error). */
  const post = async (id: string, spec: string, body: string | Uint8Array, expect: number, opts: { headers?: Record<string, string>; code?: string | readonly string[]; what: string }) => {
    let res: Answer;
    try {
      res = await ctx.probe.request(url, { method: "POST", headers: { ...JSON_HEADERS, ...opts.headers }, body });
    } catch (err) {
      ctx.record(id, spec, "fail", `${opts.what}: ${(err as Error).message}`);
      return undefined;
    }
    if (res.status !== expect) {
      ctx.record(id, spec, "fail", `${opts.what} was answered ${res.status}${codeOf(res)}, expected ${expect}: ${clip(res.text)}`);
      return res;
    }
    const problem = expect >= 400 ? errorBodyProblem(res, opts.code) : undefined;
    ctx.record(id, spec, problem ? "fail" : "pass", problem ?? `${opts.what} → ${res.status}${codeOf(res)}`);
    return res;
  };

  await post("inbox.media-type", "spec 4.1, 7.1; RFC 9110 15.5.16", "ifp check", 415, { headers: { "content-type": "text/plain; charset=utf-8" }, what: "a text/plain body" });
  await post("inbox.not-json", "spec 7.1; IFP-6 3.2", '{"ifp": 4, "headers": ', 400, { code: "invalid_format", what: "a body that is not JSON" });
  await post("inbox.schema", "spec 7.1; IFP-6 3.2; IFP-4", JSON.stringify({ ifp: 4, headers: { message_id: "msg:ifp-check-schema" }, body: {} }), 400, { code: "invalid_format", what: "a message without date, from, to, conversation_id, sequence, phase" });
  await oversize(ctx, url);
  await post("inbox.unsigned", "spec 5.1, 7.1", JSON.stringify(checkMessage("ifp-check-unsigned", agentId)), 401, { code: "invalid_signature", what: "a well-formed unsigned message" });
  const stranger = { agentId: `ifp-check-stranger-${Math.random().toString(36).slice(2, 10)}`, keyId: "key-1", privateKey: privateKeyFromPem(generateSigningKey().privateKeyPem) };
  await post("inbox.unknown-sender", "spec 5.1, 7.1; IFP-6 3.2", JSON.stringify(signMessage(checkMessage(stranger.agentId, agentId), stranger)), 401, { code: "unknown_sender", what: "a message signed by an agent the target cannot know" });
  await notFound(ctx);

  if (!ctx.key) {
    for (const id of ["inbox.bad-signature", "inbox.accepted", "inbox.idempotent", "inbox.date-window", "inbox.date-future", "inbox.protocol-problem"]) ctx.record(id, "spec 3, 5.1, 7", "skip", NEEDS_KEY);
  } else {
    const key = ctx.key;
    const signed = (m: Message) => signMessage(m, key);
    const tampered = signed(checkMessage(key.agentId, agentId));
    tampered.body = { text: "ifp check: this body was changed after signing" };
    await post("inbox.bad-signature", "spec 5.1, 7.1; IFP-6 3.2", JSON.stringify(tampered), 401, { code: "invalid_signature", what: "a message whose body was changed after signing" });

    const good = signed(checkMessage(key.agentId, agentId));
    const idem = { "idempotency-key": good.headers.message_id };
    const first = await post("inbox.accepted", "spec 2.6, 3, 7.1; IFP-6 3.1", JSON.stringify(good), 202, { headers: idem, what: "a valid signed message" });
    if (first?.status === 202) {
      const ack = parseJson(first.text) as { status?: unknown; message_id?: unknown } | undefined;
      if (ack?.status !== "accepted") ctx.record("inbox.acknowledgement", "spec 2.6; IFP-6 3.1", "fail", `the 202's body is not {status: "accepted", message_id}: ${clip(first.text)}`);
      else if (ack.message_id !== undefined && ack.message_id !== good.headers.message_id) ctx.record("inbox.acknowledgement", "spec 2.6", "fail", `the 202 names message_id ${JSON.stringify(ack.message_id)}, not ${good.headers.message_id}`);
      else ctx.record("inbox.acknowledgement", "spec 2.6; IFP-6 3.1", "pass", ack.message_id ? `{status: "accepted", message_id: ${JSON.stringify(ack.message_id)}}` : `{status: "accepted"} (message_id SHOULD be present)`);
      const again = await post("inbox.idempotent", "spec 3; IFP-6 4.2", JSON.stringify(good), 202, { headers: idem, what: "the same message_id again" });
      if (again?.status === 202 && !isDeepStrictEqual(parseJson(again.text), parseJson(first.text))) {
        ctx.record("inbox.idempotent", "spec 3; IFP-6 4.2", "fail", `the repeat was answered ${clip(again.text)}, the first time ${clip(first.text)}`);
      }
    } else {
      ctx.record("inbox.acknowledgement", "spec 2.6", "skip", "no 202 to look at");
      ctx.record("inbox.idempotent", "spec 3; IFP-6 4.2", "skip", "the first delivery was not accepted");
    }

    const dated = [
      ["inbox.date-window", -30 * 86_400_000, "dated 30 days ago"],
      ["inbox.date-future", 2 * 86_400_000, "dated 2 days ahead"],
    ] as const;
    for (const [id, offset, what] of dated) {
      const m = signed(checkMessage(key.agentId, agentId, { date: isoSeconds(new Date(Date.now() + offset)) }));
      try {
        const res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(m) });
        const refused = res.status === 400 || res.status === 401;
        const problem = refused ? errorBodyProblem(res) : undefined;
        ctx.record(id, "IFP-5 4.2, Security Considerations", refused && !problem ? "pass" : "fail", refused ? (problem ?? `a signed message ${what} → ${res.status}${codeOf(res)}`) : `a signed message ${what} was answered ${res.status}; a date outside the window SHOULD be refused`);
      } catch (err) {
        ctx.record(id, "IFP-5 4.2", "fail", (err as Error).message);
      }
    }

    const odd = signed(checkMessage(key.agentId, agentId, { phase: "ifp-check-unknown-phase" }));
    await post("inbox.protocol-problem", "spec 7.2.1; IFP-6 3.2", JSON.stringify(odd), 202, { what: "a signed message in an unknown phase (a protocol-level problem, answered later)" });
  }
  rateLimitCheck(ctx, "inbox.rate-limit-headers");
}

async function oversize(ctx: CheckContext, url: string): Promise<void> {
  const id = "inbox.oversize";
  const limit = ctx.learned.maxMessageBytes ?? ONE_MB;
  const size = limit + 1024;
  if (size > MAX_UPLOAD) {
    ctx.record(id, "spec 8; IFP-6 5", "skip", `the advertised limit (${limit} bytes) is above what the kit uploads (${MAX_UPLOAD})`);
    return;
  }
  const body = Buffer.alloc(size, 0x20);
  body.write('{"ifp":4,"pad":"', 0);
  body.write('"}', size - 2);
  let res: Answer;
  try {
    res = await ctx.probe.request(url, { method: "POST", headers: JSON_HEADERS, body });
  } catch (err) {
    ctx.record(id, "spec 7.1, 8", "fail", `a ${size}-byte body got no answer: ${(err as Error).message}`);
    return;
  }
  if (res.status === 413) {
    const problem = errorBodyProblem(res, "payload_too_large");
    ctx.record(id, "spec 7.1, 8; IFP-6 5", problem ? "fail" : "pass", problem ?? `a ${size}-byte body → 413 payload_too_large`);
  } else if (res.status === 400 || res.status === 401) {
    ctx.record(id, "spec 8; IFP-6 5", "pass", `a ${size}-byte body was read and refused as a message (${res.status}); refusing with 413 is a MAY`);
  } else {
    ctx.record(id, "spec 7.1, 8", "fail", `a ${size}-byte body that is no message was answered ${res.status}${codeOf(res)}, expected 413`);
  }
}

async function notFound(ctx: CheckContext): Promise<void> {
  const url = `${ctx.base}/.well-known/agent/ifp-check-no-such-endpoint`;
  try {
    const res = await ctx.probe.request(url, { headers: { accept: "application/json" } });
    const problem = res.status === 404 ? errorBodyProblem(res) : `answered ${res.status}, expected 404`;
    ctx.record("inbox.not-found", "spec 7.1; IFP-6 3.2", problem ? "fail" : "pass", problem ?? `an unknown path → 404${codeOf(res)}`);
  } catch (err) {
    ctx.record("inbox.not-found", "spec 7.1", "fail", (err as Error).message);
  }
}

/** The target's agent id, from its identity or capability document, when discovery did not run. */
async function learnAgentId(ctx: CheckContext): Promise<string | undefined> {
  for (const name of ["identity", "capabilities"]) {
    try {
      const res = await ctx.probe.request(`${ctx.base}/.well-known/agent/${name}`, { headers: { accept: "application/json" } });
      const id = (parseJson(res.text) as { agent_id?: unknown } | undefined)?.agent_id;
      if (res.status === 200 && typeof id === "string" && id) return (ctx.learned.agentId = id);
    } catch {
      // no document: the base URL stands in
    }
  }
  return undefined;
}
