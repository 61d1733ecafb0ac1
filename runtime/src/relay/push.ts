import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import { nanos } from "../nats/streams.ts";
import { ConsumerWorker } from "../nats/worker.ts";
import type { RelaySpec } from "../resources/relay.ts";
import { parseDuration } from "../resources/common.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { RH, type Mailboxes } from "./mailbox.ts";
import type { RelayNames } from "./stream.ts";
import type { Subscriptions } from "./subscriptions.ts";

/** The pause before retry n (n ≥ 1) of a push, per spec.delivery. */
export function pushBackoff(delivery: RelaySpec["delivery"], retry: number): number {
  const base = parseDuration(delivery.backoffDelay);
  const ms = delivery.backoff === "linear" ? base * retry : base * 2 ** (retry - 1);
  return Math.min(ms, 3_600_000);
}

/**
 * Webhook push: a durable consumer over every mailbox; each new copy whose recipient has a
 * webhook registered is POSTed to it, and removed from the mailbox only after a 2xx. Failures
 * are retried per spec.delivery (retries, backoff, backoffDelay, timeout); a copy that
 * exhausts them becomes a dead letter of its recipient. Copies of agents without a webhook
 * stay in their mailbox for pull, SSE or WebSocket.
 */
export class WebhookPush {
  private readonly worker: ConsumerWorker;
  private readonly mailboxes: Mailboxes;
  private readonly subs: Subscriptions;
  private readonly delivery: RelaySpec["delivery"];
  private readonly log: Logger;
  private readonly metrics: RuntimeMetrics;

  constructor(deps: { nats: Nats; names: RelayNames; mailboxes: Mailboxes; subs: Subscriptions; delivery: RelaySpec["delivery"]; log: Logger; metrics: RuntimeMetrics }) {
    this.mailboxes = deps.mailboxes;
    this.subs = deps.subs;
    this.delivery = deps.delivery;
    this.log = deps.log;
    this.metrics = deps.metrics;
    this.worker = new ConsumerWorker(
      deps.nats,
      {
        stream: deps.names.stream,
        consumer: {
          durable_name: deps.names.pushConsumer,
          filter_subject: deps.names.mailboxes,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.New,
          ack_wait: nanos(parseDuration(deps.delivery.timeout) + 30_000),
          max_deliver: -1,
          max_ack_pending: 1000,
        },
        updatable: ["ack_wait"],
        concurrency: 8,
        handle: (m) => this.handle(m),
        label: "webhook push",
      },
      deps.log,
    );
  }

  start(): void {
    this.worker.start();
  }

  stop(): Promise<void> {
    return this.worker.stop();
  }

  private async handle(m: JsMsg): Promise<void> {
    const recipient = m.headers?.get(RH.recipient) ?? "";
    const messageId = m.headers?.get(RH.messageId) ?? "";
    const expiresAt = m.headers?.get(RH.expiresAt);
    if (expiresAt && Date.parse(expiresAt) <= Date.now()) {
      m.ack();
      return;
    }
    const reg = await this.subs.push(recipient);
    if (!reg) {
      m.ack(); // no webhook: the copy waits in the mailbox
      return;
    }
    // Acknowledged meanwhile by pull, SSE or WebSocket? Then there is nothing to push.
    if (!(await this.mailboxes.find(recipient, messageId))) {
      m.ack();
      return;
    }
    const attempt = m.info.deliveryCount;
    let failure: string;
    try {
      const res = await fetch(reg.webhook, {
        method: "POST",
        headers: { "content-type": "application/json; charset=utf-8", "ifp-message-id": messageId, "idempotency-key": messageId, "ifp-delivery-attempt": String(attempt) },
        body: m.data,
        signal: AbortSignal.timeout(parseDuration(this.delivery.timeout)),
        redirect: "manual",
      });
      await res.body?.cancel().catch(() => {});
      if (res.ok) {
        await this.mailboxes.deleteSeq(m.seq);
        m.ack();
        this.metrics.relay.inc({ operation: "push", result: "delivered" });
        return;
      }
      failure = `webhook answered ${res.status}`;
    } catch (err) {
      failure = `webhook unreachable: ${(err as Error).message}`;
    }
    this.metrics.relay.inc({ operation: "push", result: "failed" });
    if (attempt > this.delivery.retries) {
      const reason = `${failure}; gave up after ${attempt} attempts`;
      await this.mailboxes.deadLetter({ seq: m.seq, recipient, messageId, data: m.data }, reason);
      m.ack();
      this.metrics.deadLetters.inc({ source: "relay-push" });
      this.log.error({ recipient, messageId, reason }, "push dead-lettered");
      return;
    }
    const wait = pushBackoff(this.delivery, attempt);
    this.log.warn({ recipient, messageId, attempt, retryInMs: wait }, failure);
    m.nak(wait);
  }
}
