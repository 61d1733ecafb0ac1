// WebhookPush: each copy waiting in a mailbox with a registered webhook POSTed to it from a
// durable consumer, removed after a 2xx, retried per spec.delivery, else made a dead letter.
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { LastError } from "../nats/last-error.ts";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import { nanos } from "../contract/nats.ts";
import { ConsumerWorker } from "../nats/worker.ts";
import { classifyAnswer } from "../net/answer.ts";
import type { HttpClient } from "../net/http-client.ts";
import { targetRefusedMessage } from "../net/targets.ts";
import { parseDuration } from "../resources/common.ts";
import type { RelaySpec } from "../resources/relay.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { exponentialDelay } from "../util/backoff.ts";
import { errorMessage } from "../util/errors.ts";
import { messageLogOf } from "../telemetry/logs.ts";
import { SPAN_ATTRIBUTES, failSpan, headersContext, SpanKind, startSpan } from "../telemetry/tracing.ts";
import { isExpired, COPY_HEADERS, type Mailboxes } from "./mailbox.ts";
import type { RelayNames } from "../contract/relay-stream.ts";
import type { PushRegistration, Subscriptions } from "./subscriptions.ts";

type Delivery = RelaySpec["delivery"];

/** The pause before retry n (n ≥ 1) of a push, per spec.delivery; at most an hour. */
export function pushBackoff(delivery: Pick<Delivery, "backoff" | "backoffDelay">, retry: number): number {
  const base = parseDuration(delivery.backoffDelay);
  const hour = 3_600_000;
  return delivery.backoff === "linear"
    ? Math.min(base * retry, hour)
    : exponentialDelay(retry, { initialMs: base, maxMs: hour });
}

export type WebhookOutcome =
  | { kind: "delivered" }
  | { kind: "retry"; reason: string; minDelayMs?: number }
  | { kind: "refused"; reason: string };

/**
 * What a webhook's answer means for the copy, by the one answer rule (net/answer.ts): a 2xx
 * takes it; 408, 425, 429 and 5xx are retried, never sooner than Retry-After (at most an hour);
 * a redirect or any other status is a refusal that a retry would not change.
 */
export function classifyWebhookAnswer(status: number, retryAfter: string | null, now = Date.now()): WebhookOutcome {
  const answer = classifyAnswer(status, retryAfter, now);
  switch (answer.kind) {
    case "delivered":
      return { kind: "delivered" };
    case "later":
    case "retry":
      return {
        kind: "retry",
        reason: `webhook answered ${status}`,
        ...(answer.retryAfterMs !== undefined ? { minDelayMs: Math.min(answer.retryAfterMs, 3_600_000) } : {}),
      };
    case "final":
      return {
        kind: "refused",
        reason: answer.redirect
          ? `webhook answered ${status} (redirects are not followed)`
          : `webhook refused the message with ${status}`,
      };
  }
}

export interface WebhookPushDeps {
  nats: Nats;
  names: RelayNames;
  mailboxes: Mailboxes;
  subs: Subscriptions;
  delivery: Delivery;
  http: HttpClient;
  relayUrl: string;
  log: Logger;
  metrics: RuntimeMetrics;
  /** Where a push given up is noted for the Relay's status summary. */
  lastError?: Pick<LastError, "record">;
}

/**
 * Webhook push: for each agent with a webhook registered, a durable consumer over its
 * mailbox. Every copy waiting there is POSTed to the webhook and removed from the mailbox only
 * after a 2xx. Failures are retried per spec.delivery (retries, backoff, backoffDelay,
 * timeout); a copy that exhausts them, or that the webhook refuses with a 4xx, becomes a
 * dead letter of its recipient. Replicas share the consumers, so each copy is pushed by one.
 */
export class WebhookPush {
  private readonly workers = new Map<string, ConsumerWorker>();
  private readonly deps: WebhookPushDeps;
  private started = false;

  constructor(deps: WebhookPushDeps) {
    this.deps = deps;
    deps.subs.onPushChange((agent, reg) => this.sync(agent, reg));
  }

  start(): void {
    this.started = true;
    for (const reg of this.deps.subs.registrations()) this.sync(reg.agent, reg);
  }

  async stop(): Promise<void> {
    this.started = false;
    const workers = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(workers.map((w) => w.stop()));
  }

  private sync(agent: string, reg: PushRegistration | undefined): void {
    if (!this.started) return;
    const running = this.workers.get(agent);
    if (reg && !running) {
      const worker = this.worker(agent);
      this.workers.set(agent, worker);
      worker.start();
    } else if (!reg && running) {
      // The consumer stays (unworked, JetStream removes it after an hour): a copy in retry
      // resumes if the agent registers again soon.
      this.workers.delete(agent);
      void running.stop();
    }
  }

  private worker(agent: string): ConsumerWorker {
    const { nats, names, delivery, log } = this.deps;
    return new ConsumerWorker(
      nats,
      {
        stream: names.stream,
        // Acknowledged copies are deleted from the mailbox, so a consumer recreated after it
        // went away (an hour unworked, a NATS store lost) starts at the oldest copy still waiting.
        consumer: {
          durable_name: names.pushConsumer(agent),
          filter_subject: names.mailbox(agent),
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(parseDuration(delivery.timeout) + 30_000),
          max_deliver: -1,
          max_ack_pending: 1000,
          inactive_threshold: nanos(3_600_000),
        },
        updatable: ["ack_wait", "inactive_threshold"],
        concurrency: delivery.concurrency,
        handle: (m) => this.handle(agent, m),
        label: "webhook push",
      },
      log.child({ agent }),
    );
  }

  private async handle(agent: string, m: JsMsg): Promise<void> {
    const { mailboxes, subs, delivery, http, metrics, log } = this.deps;
    const messageId = m.headers?.get(COPY_HEADERS.messageId) ?? "";
    if (isExpired(m.headers, Date.now())) {
      metrics.relayExpired.inc({ path: "push" });
      m.ack(); // never handed out; JetStream removes it at its TTL
      return;
    }
    const reg = subs.push(agent);
    if (!reg) {
      m.nak(5_000); // the registration is going away; the copy waits in the mailbox
      return;
    }
    const attempt = m.info.deliveryCount;
    if (attempt > 1) metrics.relayRedeliveries.inc({ transport: "webhook" });
    const span = startSpan("ifp.relay.push", {
      kind: SpanKind.CLIENT,
      parent: headersContext(m.headers),
      attributes: () => ({
        [SPAN_ATTRIBUTES.messageId]: messageId,
        [SPAN_ATTRIBUTES.recipient]: agent,
        [SPAN_ATTRIBUTES.transport]: "webhook",
        [SPAN_ATTRIBUTES.attempt]: attempt,
        [SPAN_ATTRIBUTES.relay]: this.deps.relayUrl,
      }),
    });
    let outcome: WebhookOutcome;
    try {
      const res = await http.request(reg.webhook, {
        method: "POST",
        headers: {
          "content-type": "application/json; charset=utf-8",
          "idempotency-key": messageId,
          "ifp-message-id": messageId,
          "ifp-delivery-attempt": String(attempt),
          "ifp-relay": this.deps.relayUrl,
        },
        body: m.data,
        timeoutMs: parseDuration(delivery.timeout),
      });
      outcome = classifyWebhookAnswer(res.status, res.headers.get("retry-after"));
      span.setAttribute(SPAN_ATTRIBUTES.status, res.status);
    } catch (err) {
      const refused = targetRefusedMessage(err);
      // A webhook whose name now resolves to a refused address: given up, never retried.
      outcome = refused
        ? { kind: "refused", reason: `webhook refused as a target: ${refused}` }
        : { kind: "retry", reason: `webhook unreachable: ${errorMessage(err)}` };
    }
    span.setAttribute(SPAN_ATTRIBUTES.outcome, outcome.kind);
    if (outcome.kind !== "delivered") failSpan(span, { name: outcome.kind, message: outcome.reason });
    span.end();
    if (outcome.kind === "delivered") {
      await mailboxes.deleteSeq(m.seq);
      m.ack();
      metrics.relay.inc({ operation: "push", result: "delivered" });
      metrics.relayDeliveries.inc({ transport: "webhook", result: "delivered" });
      return;
    }
    metrics.relay.inc({ operation: "push", result: outcome.kind === "refused" ? "refused" : "failed" });
    metrics.relayDeliveries.inc({ transport: "webhook", result: outcome.kind === "refused" ? "refused" : "failed" });
    if (outcome.kind === "refused" || attempt > delivery.retries) {
      const reason =
        outcome.kind === "refused" ? outcome.reason : `${outcome.reason}; gave up after ${attempt} attempts`;
      await mailboxes.deadLetter(
        { seq: m.seq, recipient: agent, messageId, data: m.data },
        reason,
        parseDuration(delivery.deadLetter.maxAge) / 1000,
      );
      m.ack();
      metrics.deadLetters.inc({ source: "relay-push" });
      log.error({ agent, ...logFields(m), reason }, "push given up; moved to dead letters");
      this.deps.lastError?.record(`PushGivenUp: message ${messageId} to ${agent}: ${reason}`);
      return;
    }
    const wait = Math.max(pushBackoff(delivery, attempt), outcome.minDelayMs ?? 0);
    log.warn({ agent, ...logFields(m), attempt, retryInMs: wait }, outcome.reason);
    m.nak(wait);
  }
}

/** The log fields of a stored copy, from the headers stored with it. */
function logFields(m: JsMsg) {
  return messageLogOf(
    m.headers?.get(COPY_HEADERS.messageId) ?? "",
    m.headers?.get(COPY_HEADERS.conversationId) || undefined,
    m.headers?.get(COPY_HEADERS.sender) || undefined,
  );
}
