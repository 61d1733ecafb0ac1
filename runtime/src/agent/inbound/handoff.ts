// HandlerHandoff: accepted messages handed to the application at spec.handler.url from a durable
// JetStream consumer, signed, retried and dead-lettered; and the TTL check that both ways to the
// application (this and the local API's stream) make before handing a message out.
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import { readFileSync } from "node:fs";
import { HANDOFF_SIGNATURE_HEADER, signHandoff, type HandoffHeaders } from "../../protocol/handoff-signature.ts";
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { Nats } from "../../nats/connection.ts";
import { nanos } from "../../contract/nats.ts";
import { ConsumerWorker } from "../../nats/worker.ts";
import type { HttpClient } from "../../net/http-client.ts";
import type { RuntimeMetrics } from "../../server/metrics.ts";
import { exponentialDelay } from "../../util/backoff.ts";
import { errorMessage } from "../../util/errors.ts";
import { messageLogOf } from "../../telemetry/logs.ts";
import { SPAN_ATTRIBUTES, failSpan, headersContext, SpanKind, startSpan } from "../../telemetry/tracing.ts";
import type { AgentNames } from "../names.ts";
import { INBOX_HEADERS } from "./store.ts";

export interface HandlerOptions {
  url: string;
  /** The hand-off secret: each hand-off carries Ifp-Handoff-Signature made with it. */
  secret?: string;
  timeoutMs: number;
  deadLetterAfterMs: number;
  /** Messages handed on at once by one replica. */
  concurrency?: number;
  /** First and largest pause between attempts. */
  backoffMs?: { initial: number; max: number };
}

export interface HandoffHooks {
  /** A message that was dead-lettered. */
  onDeadLetter?(messageId: string, reason: string): void;
}

/**
 * Hands accepted messages to the user's application at spec.handler.url: a durable JetStream
 * consumer shared by all replicas, acknowledged only after the handler's 2xx, retried with
 * exponential backoff, and dead-lettered (with a metric and a log line) once it has been
 * failing for `deadLetterAfter`. The POST goes through the runtime's one HTTP client (its CAs,
 * no redirects followed: a 3xx is a failure like any other non-2xx).
 */
export class HandlerHandoff {
  private readonly nats: Nats;
  private readonly names: AgentNames;
  private readonly opts: Required<HandlerOptions>;
  private readonly log: Logger;
  private readonly metrics: RuntimeMetrics;
  private readonly hooks: HandoffHooks;
  private readonly worker: ConsumerWorker;
  private readonly http: HttpClient;
  private readonly expiry: ExpiryDeps;

  constructor(
    nats: Nats,
    names: AgentNames,
    http: HttpClient,
    opts: HandlerOptions,
    log: Logger,
    metrics: RuntimeMetrics,
    hooks: HandoffHooks,
  ) {
    this.nats = nats;
    this.names = names;
    this.http = http;
    this.opts = { concurrency: 4, backoffMs: { initial: 1_000, max: 300_000 }, ...opts } as Required<HandlerOptions>;
    this.log = log;
    this.metrics = metrics;
    this.hooks = hooks;
    this.expiry = { nats, names, log, metrics };
    this.worker = new ConsumerWorker(
      nats,
      {
        stream: names.inboxStream,
        consumer: {
          durable_name: names.handlerConsumer,
          filter_subject: names.inboxMessages,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(this.opts.timeoutMs + 30_000),
          max_deliver: -1,
          max_ack_pending: 1000,
        },
        updatable: ["ack_wait", "max_ack_pending"],
        // The inbox keeps handed-off messages (the replay window): a recreated consumer must not
        // hand them all out again.
        recreateFrom: "ack-floor",
        concurrency: this.opts.concurrency,
        handle: (m) => this.handle(m),
        label: "handler delivery",
      },
      log,
    );
  }

  /** Create the durable consumer (or update it) without consuming: what start() does first. */
  ensureConsumer(): Promise<void> {
    return this.worker.ensureConsumer();
  }

  start(): void {
    this.worker.start();
  }

  private async handle(m: JsMsg): Promise<void> {
    const messageId = m.headers?.get(INBOX_HEADERS.messageId) ?? "";
    // Inspection at intake decided this one is answered by the runtime, not handed on.
    if (m.headers?.get(INBOX_HEADERS.handoff) === "no") {
      m.ack();
      return;
    }
    // A message whose ttl_seconds passed is never handed on: dropped with its reason, counted.
    if (await setAsideExpired(this.expiry, m, this.backoff(m.info.deliveryCount))) return;
    const url = this.opts.url;
    const attempt = m.info.deliveryCount;
    const ended = this.metrics.handlerLatency.startTimer();
    const span = startSpan("ifp.handoff.deliver", {
      kind: SpanKind.CLIENT,
      parent: headersContext(m.headers),
      attributes: () => ({
        [SPAN_ATTRIBUTES.messageId]: messageId,
        [SPAN_ATTRIBUTES.sender]: m.headers?.get(INBOX_HEADERS.sender) ?? "",
        [SPAN_ATTRIBUTES.attempt]: attempt,
        [SPAN_ATTRIBUTES.url]: url,
      }),
    });
    let failure: string;
    try {
      const handed = handoffHeaders(m, messageId, attempt);
      const res = await this.http.request(url, {
        // spec.handler.url: the owner's own application, typically on the pod's loopback.
        trusted: true,
        method: "POST",
        headers: {
          "content-type": "application/json; charset=utf-8",
          ...handed,
          // Covers every header above but the content type, and the body (scheme v2).
          ...(this.opts.secret ? { [HANDOFF_SIGNATURE_HEADER]: signHandoff(this.opts.secret, handed, m.data) } : {}),
        },
        body: m.data,
        timeoutMs: this.opts.timeoutMs,
      });
      span.setAttribute(SPAN_ATTRIBUTES.status, res.status);
      if (res.status >= 200 && res.status < 300) {
        m.ack();
        this.metrics.handler.inc({ result: "delivered" });
        span.setAttribute(SPAN_ATTRIBUTES.outcome, "delivered");
        this.log.debug({ ...logFields(m), attempt }, "message handed to the application");
        this.metrics.handlerLag.observe(Math.max(0, (Date.now() - Number(m.info.timestampNanos) / 1e6) / 1000));
        return;
      }
      failure =
        res.status >= 300 && res.status < 400
          ? `handler answered ${res.status} (redirects are not followed)`
          : `handler answered ${res.status}`;
      failSpan(span, new Error(failure), res.status);
    } catch (err) {
      failure = `handler unreachable: ${errorMessage(err)}`;
      failSpan(span, err);
    } finally {
      ended();
      span.end();
    }
    this.metrics.handler.inc({ result: "failed" });
    const ageMs = Date.now() - Number(m.info.timestampNanos) / 1e6;
    if (ageMs >= this.opts.deadLetterAfterMs) {
      await this.deadLetter(
        m,
        messageId,
        `${failure}; gave up after ${attempt} attempts over ${Math.round(ageMs / 1000)} s`,
      );
      return;
    }
    const wait = retryDelay(this.backoff(attempt), m.data);
    this.log.warn({ ...logFields(m), attempt, retryInMs: wait }, failure);
    m.nak(wait);
  }

  private backoff(attempt: number): number {
    const { initial, max } = this.opts.backoffMs;
    return Math.round(exponentialDelay(attempt, { initialMs: initial, maxMs: max, jitter: 0.2 }));
  }

  private async deadLetter(m: JsMsg, messageId: string, reason: string): Promise<void> {
    try {
      await moveToDead(this.nats, this.names, m, reason);
    } catch (err) {
      this.log.warn({ ...logFields(m), err: errorMessage(err) }, "dead-lettering failed; will retry");
      m.nak(this.backoff(m.info.deliveryCount));
      return;
    }
    this.metrics.deadLetters.inc({ source: "handler" });
    this.log.error({ ...logFields(m), reason }, "message dead-lettered");
    this.hooks.onDeadLetter?.(messageId, reason);
  }

  async stop(): Promise<void> {
    await this.worker.stop();
  }
}

/** The headers a hand-off carries about its message, each of them covered by the hand-off signature. */
function handoffHeaders(m: JsMsg, messageId: string, attempt: number): HandoffHeaders {
  const sender = m.headers?.get(INBOX_HEADERS.sender) ?? "";
  const encrypted = m.headers?.get(INBOX_HEADERS.encrypted);
  return {
    // message_id is unique per sender only: the key names both.
    "idempotency-key": idempotencyKey(sender, messageId, m.headers?.get(INBOX_HEADERS.signed) !== "no"),
    "ifp-message-id": messageId,
    "ifp-sender": sender,
    "ifp-auth-level": m.headers?.get(INBOX_HEADERS.authLevel) ?? "",
    "ifp-auth-source": m.headers?.get(INBOX_HEADERS.authSource) ?? "",
    // The scheme the body was encrypted under end to end; absent for a clear message.
    ...(encrypted ? { "ifp-encrypted": encrypted } : {}),
    "ifp-delivery-attempt": String(attempt),
  };
}

/** The log fields of a stored inbound message, from the headers stored with it. */
const logFields = (m: JsMsg) =>
  messageLogOf(
    m.headers?.get(INBOX_HEADERS.messageId) ?? "",
    m.headers?.get(INBOX_HEADERS.conversationId) || undefined,
    m.headers?.get(INBOX_HEADERS.sender) || undefined,
  );

/**
 * Move a stored inbound message to the dead-letter subject, its reason in Ifp-Dead-Reason, and
 * end it for its consumer. Throws when the dead letter is not written (the message is then untouched).
 */
async function moveToDead(nats: Nats, names: AgentNames, m: JsMsg, reason: string): Promise<void> {
  const h = natsHeaders();
  // Our own headers only: a copied Nats-Msg-Id would make JetStream drop the dead letter as a duplicate.
  for (const [k, v] of m.headers ?? []) if (k.startsWith("Ifp-")) for (const value of v) h.append(k, value);
  h.set(INBOX_HEADERS.deadReason, reason);
  // One dead letter per stored message: on a layout whose subjects take one message each, its own subject.
  await nats.layout.once.publish(nats.js, names.dead, `dead ${m.seq}`, m.data, { headers: h, timeout: 5_000 });
  m.term(reason);
}

/** What setAsideExpired needs of the runtime. */
export interface ExpiryDeps {
  nats: Nats;
  names: AgentNames;
  log: Logger;
  metrics: RuntimeMetrics;
}

/**
 * The TTL check of both ways to the application, spec.handler.url and the local API's message
 * stream, made each time before a stored message is handed out: one whose ttl_seconds passed
 * (expiredFor) is moved to the dead-letter subject with its reason, counted as
 * ifp_handler_deliveries_total{result="expired"} and logged, and true is returned: it is not
 * handed on. Should the dead letter not be written, it is put back for another try after
 * `retryMs` (and true is still returned). False for a message that may be handed on.
 */
export async function setAsideExpired(deps: ExpiryDeps, m: JsMsg, retryMs: number, now = Date.now()): Promise<boolean> {
  const reason = expiredFor(m.data, now);
  if (!reason) return false;
  try {
    await moveToDead(deps.nats, deps.names, m, reason);
  } catch (err) {
    deps.log.warn({ ...logFields(m), err: errorMessage(err) }, "dead-lettering an expired message failed; will retry");
    m.nak(retryMs);
    return true;
  }
  // Expiry is not a failure of the application: no dead-letter alarm.
  deps.metrics.handler.inc({ result: "expired" });
  deps.log.warn({ ...logFields(m), reason }, "expired message not handed on");
  return true;
}

/**
 * Why a stored message may no longer be handed on: its ttl_seconds, counted from headers.date,
 * has passed. Undefined when it has no TTL, has time left, or cannot be read (it was validated
 * at intake, so that does not happen; it is then handed on as before).
 */
export function expiredFor(data: Uint8Array, now: number): string | undefined {
  const ttl = ttlOf(data);
  return ttl && now >= ttl.expiresAt
    ? `expired: ttl_seconds ${ttl.seconds} from ${ttl.date} passed before hand-off`
    : undefined;
}

/**
 * The wait before a refused hand-off is tried again: the backoff's, or less when the message's
 * ttl_seconds run out sooner, so that it is set aside as expired when it expires, not a backoff later.
 */
export function retryDelay(backoffMs: number, data: Uint8Array, now = Date.now()): number {
  const ttl = ttlOf(data);
  return ttl ? Math.max(0, Math.min(backoffMs, ttl.expiresAt - now)) : backoffMs;
}

/** A message's ttl_seconds and headers.date, and when they make it expire; undefined without both. */
function ttlOf(data: Uint8Array): { seconds: number; date: string; expiresAt: number } | undefined {
  let headers: { date?: unknown; ttl_seconds?: unknown } | undefined;
  try {
    headers = (JSON.parse(new TextDecoder().decode(data)) as { headers?: typeof headers }).headers;
  } catch {
    return undefined;
  }
  const ttl = headers?.ttl_seconds;
  const date = typeof headers?.date === "string" ? Date.parse(headers.date) : NaN;
  if (typeof ttl !== "number" || !Number.isFinite(ttl) || Number.isNaN(date)) return undefined;
  return { seconds: ttl, date: headers!.date as string, expiresAt: date + ttl * 1000 };
}

/** The hand-off's Idempotency-Key: `<sender> <message_id>`, the sender prefixed `unsigned:` when nothing verified it. */
export function idempotencyKey(sender: string, messageId: string, signed: boolean): string {
  return `${signed ? "" : "unsigned:"}${sender} ${messageId}`;
}

/** The hand-off secret from its file (trimmed): at least 16 characters, else a start-up error. */
export function readHandoffSecret(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8").trim();
  } catch (err) {
    throw new Error(`cannot read the hand-off secret: ${(err as Error).message}`);
  }
  if (text.length < 16) throw new Error(`the hand-off secret in ${path} is shorter than 16 characters`);
  return text;
}
