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
const AUTH = "docs/relay.md Authentication; spec 5 (left open)";

const randomKey = (agentId: string, keyId = "key-1"): SigningKey => ({ agentId, keyId, privateKey: privateKeyFromPem(generateSigningKey().privateKeyPem) });

/**
 * A relay (spec 4.2, 5.5–5.6; IFP-8; the API and request signatures of docs/relay.md):
 * authentication of every request, mailbox isolation, the publish → pull → acknowledge round
 * trip with the trace entry, and error bodies.
 */
export async function relayChecks(ctx: CheckContext): Promise<void> {
  const base = ctx.base;
  /** One request, signed with `key` (or unsigned), optionally changed after signing. */
  const send = async (method: string, path: string, opts: { key?: SigningKey; body?: string; contentType?: string; created?: Date; tamper?: (h: Record<string, string>) => void } = {}): Promise<Answer> => {
    const url = `${base}${path}`;
    let headers: Record<string, string> = { accept: "application/json", ...(opts.body !== undefined ? { "content-type": opts.contentType ?? "application/json" } : {}) };
    if (opts.key) headers = await signRequest({ method, url, headers, body: opts.body }, opts.key, opts.created);
    opts.tamper?.(headers);
    return ctx.probe.request(url, { method, headers, body: opts.body });
  };
  const expect = async (id: string, spec: string, what: string, status: number, code: string | readonly string[] | undefined, run: () => Promise<Answer>) => {
    let res: Answer;
    try {
      res = await run();
    } catch (err) {
      ctx.record(id, spec, "fail", `${what}: ${(err as Error).message}`);
      return undefined;
    }
    if (res.status !== status) {
      ctx.record(id, spec, "fail", `${what} was answered ${res.status}${codeOf(res)}, expected ${status}: ${clip(res.text)}`);
      return res;
    }
    const problem = status >= 400 ? errorBodyProblem(res, code) : undefined;
    ctx.record(id, spec, problem ? "fail" : "pass", problem ?? `${what} → ${res.status}${codeOf(res)}`);
    return res;
  };

  await expect("relay.auth.unsigned", AUTH, "an unsigned GET /relay/messages", 401, "invalid_signature", () => send("GET", "/relay/messages"));
  const stranger = randomKey(`ifp-check-stranger-${randomUUID().slice(0, 8)}`);
  await expect("relay.isolation.unknown-agent", `${AUTH}; spec 5.5`, "GET /relay/messages signed by an agent the relay does not serve", 401, "unknown_sender", () => send("GET", "/relay/messages", { key: stranger }));

  if (!ctx.key) {
    for (const id of ["relay.auth.wrong-key", "relay.auth.stale", "relay.auth.digest", "relay.publish.media-type", "relay.publish.not-json", "relay.publish.oversize", "relay.publish.accepted", "relay.pull.trace", "relay.ack", "relay.ack.repeat", "relay.isolation.foreign-ack"]) {
      ctx.record(id, "docs/relay.md", "skip", NEEDS_KEY);
    }
    rateLimitCheck(ctx, "relay.rate-limit-headers");
    return;
  }
  const key = ctx.key;
  const impostor = randomKey(key.agentId, key.keyId);
  await expect("relay.auth.wrong-key", AUTH, "a request signed with another key under your keyid", 401, "invalid_signature", () => send("GET", "/relay/messages", { key: impostor }));
  await expect("relay.auth.stale", AUTH, "a request signed 10 minutes ago", 401, "invalid_signature", () => send("GET", "/relay/messages", { key, created: new Date(Date.now() - 600_000) }));
  const probeMsg = JSON.stringify(signMessage(checkMessage(key.agentId, key.agentId), key));
  await expect("relay.auth.digest", AUTH, "a publish whose body was changed after signing", 401, "invalid_signature", () =>
    send("POST", "/relay/publish", { key, body: probeMsg, tamper: (h) => (h["content-digest"] = `sha-256=:${Buffer.alloc(32).toString("base64")}:`) }),
  );
  await expect("relay.publish.media-type", "docs/relay.md Endpoints; RFC 9110 15.5.16", "a signed text/plain publish", 415, undefined, () => send("POST", "/relay/publish", { key, body: "ifp check", contentType: "text/plain" }));
  await expect("relay.publish.not-json", "docs/relay.md POST /relay/publish; spec 2.7", "a signed publish that is not JSON", 400, "invalid_format", () => send("POST", "/relay/publish", { key, body: '{"ifp": 4, ' }));

  const big = Buffer.alloc(ONE_MB + 1024, 0x20);
  big.write('{"ifp":4,"pad":"', 0);
  big.write('"}', big.length - 2);
  try {
    const res = await send("POST", "/relay/publish", { key, body: big.toString("latin1") });
    const problem = res.status === 413 ? errorBodyProblem(res, "payload_too_large") : undefined;
    if (res.status === 413) ctx.record("relay.publish.oversize", "spec 8; docs/relay.md POST /relay/publish", problem ? "fail" : "pass", problem ?? `a ${big.length}-byte publish → 413 payload_too_large`);
    else if (res.status === 400) ctx.record("relay.publish.oversize", "spec 8", "pass", `a ${big.length}-byte publish was read and refused as a message (400); this relay takes more than 1 MiB`);
    else ctx.record("relay.publish.oversize", "spec 7.1, 8", "fail", `a ${big.length}-byte signed publish that is no message was answered ${res.status}${codeOf(res)}, expected 413`);
  } catch (err) {
    ctx.record("relay.publish.oversize", "spec 7.1, 8", "fail", `a ${big.length}-byte publish: ${(err as Error).message}`);
  }

  // The round trip, to oneself.
  const message = signMessage(checkMessage(key.agentId, key.agentId), key);
  const id = message.headers.message_id;
  const published = await expect("relay.publish.accepted", "spec 3, 4.2; docs/relay.md POST /relay/publish", "a signed publish to yourself", 202, undefined, () => send("POST", "/relay/publish", { key, body: JSON.stringify(message) }));
  if (published?.status !== 202) {
    for (const c of ["relay.pull.trace", "relay.ack", "relay.ack.repeat"]) ctx.record(c, "spec 4.2", "skip", "the publish was not accepted");
  } else {
    const ack = parseJson(published.text) as { status?: unknown; message_id?: unknown } | undefined;
    if (ack?.status !== "accepted" || ack.message_id !== id) ctx.record("relay.publish.accepted", "spec 2.6; docs/relay.md", "fail", `the 202's body is not {status: "accepted", message_id: ${id}}: ${clip(published.text)}`);
    try {
      const res = await send("GET", "/relay/messages?limit=100", { key });
      const list = parseJson(res.text);
      const mine = Array.isArray(list) ? list.find((m) => (m as Message)?.headers?.message_id === id) : undefined;
      const parsed = Message.safeParse(mine);
      const trace = parsed.success ? parsed.data.trace?.received?.at(-1) : undefined;
      const reason =
        res.status !== 200 ? `GET /relay/messages answered ${res.status}${codeOf(res)}`
        : !Array.isArray(list) ? `GET /relay/messages is not a JSON list: ${clip(res.text)}`
        : !mine ? (list.length >= 100 ? "skip:the mailbox holds 100 or more messages; the one published is not on the first page" : "the message just published is not in the mailbox")
        : !trace ? "the message has no trace.received[] entry (spec 4.2: a relay MUST append one)"
        : !trace.by.startsWith("relay:") || trace.from !== key.agentId || Number.isNaN(Date.parse(trace.at)) || !trace.with
          ? `the trace entry ${JSON.stringify(trace)} is not {by: "relay:<url>", with, at, from: "${key.agentId}"}`
        : JSON.stringify(parsed.data?.body) !== JSON.stringify(message.body) || JSON.stringify(parsed.data?.security) !== JSON.stringify(message.security)
          ? "the message came back changed beyond its trace (body or signature)"
        : undefined;
      if (reason?.startsWith("skip:")) ctx.record("relay.pull.trace", "spec 2.9, 4.2, 5.6", "skip", reason.slice(5));
      else ctx.record("relay.pull.trace", "spec 2.9, 4.2, 5.6", reason ? "fail" : "pass", reason ?? `pulled back with trace ${JSON.stringify(trace)}`);
    } catch (err) {
      ctx.record("relay.pull.trace", "spec 4.2", "fail", (err as Error).message);
    }
    const path = `/relay/messages/${encodeURIComponent(id)}`;
    const first = await send("DELETE", path, { key }).catch((e: Error) => e);
    if (first instanceof Error) ctx.record("relay.ack", "spec 3, 4.2", "fail", first.message);
    else ctx.record("relay.ack", "spec 3, 4.2; docs/relay.md DELETE", first.status >= 200 && first.status < 300 ? "pass" : "fail", `DELETE ${path} → ${first.status}${codeOf(first)}`);
    await expect("relay.ack.repeat", "docs/relay.md DELETE /relay/messages/{id}", "acknowledging the same message again", 404, "not_found", () => send("DELETE", path, { key }));
  }
  await expect("relay.isolation.foreign-ack", "spec 5.5; docs/relay.md Semantics (isolation)", "acknowledging a message id that is not yours", 404, "not_found", () => send("DELETE", `/relay/messages/${encodeURIComponent(`msg:ifp-check-${randomUUID()}`)}`, { key }));
  rateLimitCheck(ctx, "relay.rate-limit-headers");
}
