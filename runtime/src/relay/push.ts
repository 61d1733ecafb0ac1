import { AckPolicy, DeliverPolicy, type ConsumerConfig, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import { isNotFound, nanos } from "../nats/streams.ts";
import { retryAfterSeconds, type HttpClient } from "../net/http-client.ts";
import { parseDuration } from "../resources/common.ts";
import type { RelaySpec } from "../resources/relay.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { isExpired, RH, type Mailboxes } from "./mailbox.ts";
import type { RelayNames } from "./stream.ts";
import type { PushRegistration, Subscriptions } from "./subscriptions.ts";

type Delivery = RelaySpec["delivery"];

/** The pause before retry n (n ≥ 1) of a push, per spec.delivery; at most an hour. */
export function pushBackoff(delivery: Pick<Delivery, "backoff" | "backoffDelay">, retry: number): number {
  const base = parseDuration(delivery.backoffDelay);
  const ms = delivery.backoff === "linear" ? base * retry : base * 2 ** (retry - 1);
  return Math.min(ms, 3_600_000);
}

export type WebhookOutcome =
  | { kind: "delivered" }
  | { kind: "retry"; reason: string; minDelayMs?: number }
  | { kind: "refused"; reason: string };

/**
 * What a webhook's answer means for the copy: a 2xx takes it; 408, 425, 429 and 5xx are
 * worth retrying (after Retry-After when given); any other status is a refusal that a retry
 * would not change (spec 7.2 rule 3: no retry after a 4xx; redirects are not followed).
 */
export function classifyWebhookAnswer(status: number, retryAfter: string | null, now = Date.now()): WebhookOutcome {
  if (status >= 200 && status < 300) return { kind: "delivered" };
  if (status === 408 || status === 425 || status === 429 || status >= 500) {
    const after = retryAfterSeconds(retryAfter, now);
    return { kind: "retry", reason: `webhook answered ${status}`, ...(after !== undefined ? { minDelayMs: Math.min(after, 3600) * 1000 } : {}) };
  }
  return { kind: "refused", reason: status >= 300 && status < 400 ? `webhook answered ${status} (redirects are not followed)` : `webhook refused the message with ${status}` };
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
}

/**
 * Webhook push: for each agent with a webhook registered, a durable consumer over its
 * mailbox. Every copy waiting there is POSTed to the webhook and removed from the mailbox only
 * after a 2xx. Failures are retried per spec.delivery (retries, backoff, backoffDelay,
 * timeout); a copy that exhausts them, or that the webhook refuses with a 4xx, becomes a
 * dead letter of its recipient. Replicas share the consumers, so each copy is pushed by one.
 */
export class WebhookPush {
  private readonly workers = new Map<string, PushLoop>();
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

  private worker(agent: string): PushLoop {
    const { nats, names, delivery, log } = this.deps;
    return new PushLoop(
      nats,
      names.stream,
      {
        durable_name: names.pushConsumer(agent),
        filter_subject: names.mailbox(agent),
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: nanos(parseDuration(delivery.timeout) + 30_000),
        max_deliver: -1,
        max_ack_pending: 1000,
        inactive_threshold: nanos(3_600_000),
      },
      delivery.concurrency,
      (m) => this.handle(agent, m),
      log.child({ agent }),
    );
  }

  private async handle(agent: string, m: JsMsg): Promise<void> {
    const { mailboxes, subs, delivery, http, metrics, log } = this.deps;
    const messageId = m.headers?.get(RH.messageId) ?? "";
    if (isExpired(m.headers, Date.now())) {
      m.ack(); // never handed out; JetStream removes it at its TTL
      return;
    }
    const reg = subs.push(agent);
    if (!reg) {
      m.nak(5_000); // the registration is going away; the copy waits in the mailbox
      return;
    }
    const attempt = m.info.deliveryCount;
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
    } catch (err) {
      outcome = { kind: "retry", reason: `webhook unreachable: ${(err as Error).message}` };
    }
    if (outcome.kind === "delivered") {
      await mailboxes.deleteSeq(m.seq);
      m.ack();
      metrics.relay.inc({ operation: "push", result: "delivered" });
      return;
    }
    metrics.relay.inc({ operation: "push", result: outcome.kind === "refused" ? "refused" : "failed" });
    if (outcome.kind === "refused" || attempt > delivery.retries) {
      const reason = outcome.kind === "refused" ? outcome.reason : `${outcome.reason}; gave up after ${attempt} attempts`;
      await mailboxes.deadLetter({ seq: m.seq, recipient: agent, messageId, data: m.data }, reason, parseDuration(delivery.deadLetter.maxAge) / 1000);
      m.ack();
      metrics.deadLetters.inc({ source: "relay-push" });
      log.error({ agent, messageId, reason }, "push given up; moved to dead letters");
      return;
    }
    const wait = Math.max(pushBackoff(delivery, attempt), outcome.minDelayMs ?? 0);
    log.warn({ agent, messageId, attempt, retryInMs: wait }, outcome.reason);
    m.nak(wait);
  }
}

/**
 * One agent's push consumer, worked by this process until stop(): creates or updates the
 * durable consumer, keeps up to `concurrency` POSTs in flight, and starts over with backoff
 * when the consumer or the connection goes away. (Like nats/worker.ts, whose stop() does not
 * return while its consumer is still being set up; registrations come and go at any time.)
 */
class PushLoop {
  private stopped = false;
  private active: { stop(): void } | undefined;
  private loop: Promise<void> | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly nats: Nats;
  private readonly stream: string;
  private readonly config: Partial<ConsumerConfig> & { durable_name: string };
  private readonly concurrency: number;
  private readonly handle: (m: JsMsg) => Promise<void>;
  private readonly log: Logger;

  constructor(nats: Nats, stream: string, config: Partial<ConsumerConfig> & { durable_name: string }, concurrency: number, handle: (m: JsMsg) => Promise<void>, log: Logger) {
    this.nats = nats;
    this.stream = stream;
    this.config = config;
    this.concurrency = concurrency;
    this.handle = handle;
    this.log = log;
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.active?.stop();
    await this.loop;
  }

  private async ensureConsumer(): Promise<void> {
    const { jsm } = this.nats;
    try {
      await jsm.consumers.info(this.stream, this.config.durable_name);
      await jsm.consumers.update(this.stream, this.config.durable_name, { ack_wait: this.config.ack_wait, inactive_threshold: this.config.inactive_threshold });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await jsm.consumers.add(this.stream, this.config);
    }
  }

  private async run(): Promise<void> {
    for (let delay = 500; !this.stopped; delay = Math.min(delay * 2, 10_000)) {
      try {
        await this.ensureConsumer();
        const consumer = await this.nats.js.consumers.get(this.stream, this.config.durable_name);
        if (this.stopped) break;
        const messages = await consumer.consume({ max_messages: this.concurrency * 2 });
        this.active = messages;
        if (this.stopped) {
          messages.stop();
          break;
        }
        delay = 500;
        for await (const m of messages) {
          while (this.inFlight.size >= this.concurrency) await Promise.race(this.inFlight);
          const p: Promise<void> = this.handle(m)
            .catch((err) => {
              this.log.warn({ err: (err as Error).message }, "push step failed; retrying in 5 s");
              m.nak(5_000);
            })
            .finally(() => this.inFlight.delete(p));
          this.inFlight.add(p);
          if (this.stopped) break;
        }
      } catch (err) {
        if (this.stopped) break;
        this.log.warn({ err: (err as Error).message, retryInMs: delay }, "webhook push interrupted");
      }
      if (!this.stopped) await new Promise((r) => setTimeout(r, delay));
    }
    await Promise.allSettled([...this.inFlight]);
  }
}
