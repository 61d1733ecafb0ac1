import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import type { Nats } from "../nats/connection.ts";
import { nanos } from "../contract/nats.ts";
import { ConsumerWorker } from "../nats/worker.ts";
import { classifyAnswer } from "../net/answer.ts";
import type { HttpClient } from "../net/http-client.ts";
import { Message } from "../protocol/message.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { errorMessage } from "../util/errors.ts";
import { expiredRecipientState, isDue, isPending, nextRecipientState, type Deadline, type DeliveryRecord, type DeliveryStates, type Outcome, type RecipientState } from "./delivery-state.ts";
import type { AgentNames } from "./names.ts";

export type { Outcome } from "./delivery-state.ts";

/** Where a recipient's messages go. */
export type Route = { kind: "https"; inbox: string } | { kind: "relay"; relays: string[] };

/** Publishes a message through a relay (relay fallback); provided when the runtime has a relay client. */
export interface RelayPublisher {
  publish(relayUrl: string, message: Message): Promise<Outcome>;
}

export interface OutboundOptions {
  /** Pauses between attempts; the last repeats (IFP-6: 1m, 5m, 30m, then hourly). */
  backoffMs: number[];
  /** Give up this long after the message was queued (24h). */
  retryForMs: number;
  /** Base URLs of peers known from the Agent spec. */
  peerUrls: Map<string, string>;
  /** Relays of peers known from the Agent spec (spec.peers[].relay.urls). */
  peerRelays?: Map<string, string[]>;
  concurrency?: number;
}

/**
 * An inbox's (or a relay's) answer as the outcome of an attempt, by the one answer rule
 * (net/answer.ts): 408/425/429 wait for their Retry-After; 5xx follow the schedule, never
 * sooner than a Retry-After; a redirect and any other 4xx are final.
 */
export function classify(status: number, retryAfter: string | null, via: string, body: string, now = Date.now()): Outcome {
  const answer = classifyAnswer(status, retryAfter, now);
  const error = `${status}${errorDetail(body)}`;
  switch (answer.kind) {
    case "delivered":
      return { kind: "delivered", via, status };
    case "later": {
      const s = answer.retryAfterMs === undefined ? undefined : Math.max(1, answer.retryAfterMs / 1000);
      return {
        kind: "retry",
        via,
        status,
        error,
        afterMs: s !== undefined ? s * 1000 : undefined,
        decision: `${status} is not final: retry ${s !== undefined ? `after Retry-After ${s} s` : "on the backoff schedule (no Retry-After)"}`,
      };
    }
    case "retry":
      return { kind: "retry", via, status, error, ...(answer.retryAfterMs ? { notBeforeMs: answer.retryAfterMs } : {}) };
    case "final": {
      const why = answer.redirect ? "redirects are not followed" : status >= 400 && status < 500 ? "a 4xx is never retried" : "not a status to retry";
      return { kind: "failed", via, status, error: `${error}; ${why}` };
    }
  }
}

function errorDetail(body: string): string {
  try {
    const e = JSON.parse(body) as { code?: string; message?: string };
    if (e.code || e.message) return ` ${e.code ?? ""}: ${e.message ?? ""}`.trimEnd();
  } catch {
    // not JSON
  }
  return "";
}

/**
 * Delivers queued outbound messages: a durable consumer on the outbox work queue shared by
 * the replicas. Each recipient is tried directly (its inbox over HTTPS, with Idempotency-Key)
 * or through a relay; its answer is classified by classify(), and what follows for the recipient
 * is the pure nextRecipientState() (delivery-state.ts). Progress is kept in the delivery
 * records, so a restart resumes where it stopped; the recipient's idempotency absorbs the
 * rare repeat.
 */
export class OutboundDelivery {
  private readonly worker: ConsumerWorker;
  private readonly states: DeliveryStates;
  private readonly http: HttpClient;
  private readonly discovery: DiscoveryClient;
  private readonly opts: OutboundOptions;
  private readonly log: Logger;
  private readonly metrics: RuntimeMetrics;
  private readonly onGiveUp: (record: DeliveryRecord, r: RecipientState) => Promise<void>;
  relay: RelayPublisher | undefined;

  constructor(deps: {
    nats: Nats;
    names: AgentNames;
    states: DeliveryStates;
    http: HttpClient;
    discovery: DiscoveryClient;
    options: OutboundOptions;
    log: Logger;
    metrics: RuntimeMetrics;
    onGiveUp: (record: DeliveryRecord, r: RecipientState) => Promise<void>;
    relay?: RelayPublisher;
  }) {
    this.states = deps.states;
    this.http = deps.http;
    this.discovery = deps.discovery;
    this.opts = deps.options;
    this.log = deps.log;
    this.metrics = deps.metrics;
    this.onGiveUp = deps.onGiveUp;
    this.relay = deps.relay;
    this.worker = new ConsumerWorker(
      deps.nats,
      {
        stream: deps.names.outboxStream,
        // A work queue: a consumer recreated after it went away finds only what is still to send.
        consumer: {
          durable_name: deps.names.senderConsumer,
          filter_subject: deps.names.outbox,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: nanos(5 * 60_000),
          max_deliver: -1,
          max_ack_pending: 10_000,
        },
        concurrency: deps.options.concurrency ?? 8,
        handle: (m) => this.handle(m),
        label: "outbound delivery",
      },
      deps.log,
    );
  }

  start(): void {
    this.worker.start();
  }

  private async handle(m: JsMsg): Promise<void> {
    const message = Message.parse(m.json());
    const id = message.headers.message_id;
    const queuedAt = new Date(Number(m.info.timestampNanos) / 1e6);
    const record: DeliveryRecord = (await this.states.get(id)) ?? {
      message_id: id,
      state: "queued",
      queued_at: queuedAt.toISOString(),
      updated_at: queuedAt.toISOString(),
      recipients: message.headers.to.map((t) => ({ agent: t.agent, state: "queued", attempts: 0 })),
    };
    const deadline = this.deadline(record, message);
    const gaveUp: RecipientState[] = [];
    let nextDelay = Infinity;
    for (const [i, r] of record.recipients.entries()) {
      if (!isPending(r)) continue;
      if (!isDue(r, Date.now())) {
        // Woken early (another recipient's schedule): keep this one's own.
        nextDelay = Math.min(nextDelay, Date.parse(r.next_attempt_at!) - Date.now());
        continue;
      }
      if (deadline.expires && Date.now() >= deadline.at) {
        // Expired while waiting: nothing is sent after ttl_seconds, not even a first attempt.
        const next = expiredRecipientState(r, deadline);
        record.recipients[i] = next;
        gaveUp.push(next);
        continue;
      }
      const outcome = await this.attempt(message, r.agent);
      this.metrics.outbound.inc({ result: outcome.kind });
      const now = Date.now();
      const next = nextRecipientState(r, outcome, now, deadline, { schedule: this.opts.backoffMs });
      record.recipients[i] = next;
      if (next.state === "retrying") {
        const wait = Date.parse(next.next_attempt_at!) - now;
        nextDelay = Math.min(nextDelay, wait);
        this.log.warn({ messageId: id, to: next.agent, attempt: next.attempts, retryInMs: wait }, next.last_error!);
      } else if (next.state !== "delivered") gaveUp.push(next);
    }
    record.updated_at = new Date().toISOString();
    await this.states.put(record);
    for (const r of gaveUp) {
      this.metrics.outbound.inc({ result: r.state === "failed" ? "refused" : "undeliverable" });
      await this.onGiveUp(record, r).catch((err) => this.log.warn({ err: errorMessage(err) }, "notification failed"));
    }
    if (nextDelay === Infinity) m.ack();
    else m.nak(Math.max(1, Math.round(nextDelay)));
  }

  /** When retrying this message stops: the retry window's end, or its ttl_seconds when sooner. */
  private deadline(record: DeliveryRecord, message: Message): Deadline {
    const window = Date.parse(record.queued_at) + this.opts.retryForMs;
    const expiresAt = message.headers.ttl_seconds ? Date.parse(message.headers.date) + message.headers.ttl_seconds * 1000 : Infinity;
    return expiresAt <= window
      ? { at: expiresAt, reason: "the message's ttl_seconds passed", expires: true }
      : { at: window, reason: `still failing after the ${Math.round(this.opts.retryForMs / 1000)} s retry window` };
  }

  /** One delivery attempt to one recipient, direct first and through a relay when that is the way. */
  async attempt(message: Message, agent: string): Promise<Outcome> {
    let route: Route;
    try {
      route = await this.route(agent);
    } catch (err) {
      return err instanceof NoRoute
        ? { kind: "failed", error: err.message }
        : { kind: "retry", error: `discovery failed: ${errorMessage(err)}` };
    }
    if (route.kind === "relay") return this.viaRelay(route.relays, message);
    const via = route.inbox;
    let res;
    try {
      res = await this.http.request(route.inbox, {
        method: "POST",
        headers: {
          "content-type": "application/json; charset=utf-8",
          accept: "application/json",
          "idempotency-key": message.headers.message_id,
        },
        body: JSON.stringify(message),
      });
    } catch (err) {
      const error = `network error: ${errorMessage((err as Error).cause instanceof Error ? (err as Error).cause : err)}`;
      const relays = await this.relaysOf(agent);
      if (relays.length && this.relay) {
        const viaRelay = await this.viaRelay(relays, message);
        if (viaRelay.kind === "delivered") return viaRelay;
      }
      return { kind: "retry", via, error };
    }
    return classify(res.status, res.headers.get("retry-after"), via, res.text);
  }

  private async viaRelay(relays: string[], message: Message): Promise<Outcome> {
    if (!this.relay) return { kind: "retry", error: "the recipient is reachable only through a relay, and no relay client is configured" };
    let last: Outcome = { kind: "retry", error: "no relay accepted the message" };
    for (const url of relays) {
      last = await this.relay.publish(url, message);
      if (last.kind !== "retry") return last;
    }
    return last;
  }

  private async route(agent: string): Promise<Route> {
    const known = this.opts.peerUrls.get(agent);
    const base = known ?? (isHttpsUrl(agent) ? agent : undefined);
    const relays = this.opts.peerRelays?.get(agent) ?? [];
    if (!base) {
      if (relays.length) return { kind: "relay", relays };
      throw new NoRoute(`no route to ${agent}: it is not an https URL and spec.peers[] gives it neither a url nor relays`);
    }
    try {
      const identity = await this.discovery.identity(base);
      if (identity.endpoints?.inbox) return { kind: "https", inbox: identity.endpoints.inbox };
      if (identity.relay?.urls.length) return { kind: "relay", relays: identity.relay.urls };
    } catch (err) {
      if (!(err instanceof DiscoveryError) || !known) throw err;
      // A configured base URL still gives the well-known inbox when the identity is unavailable.
    }
    return { kind: "https", inbox: `${DiscoveryClient.wellKnownBase(base)}/inbox` };
  }

  private async relaysOf(agent: string): Promise<string[]> {
    const configured = this.opts.peerRelays?.get(agent) ?? [];
    const base = this.opts.peerUrls.get(agent) ?? (isHttpsUrl(agent) ? agent : undefined);
    if (!base) return configured;
    try {
      return [...new Set([...configured, ...((await this.discovery.identity(base)).relay?.urls ?? [])])];
    } catch {
      return configured;
    }
  }

  async stop(): Promise<void> {
    await this.worker.stop();
  }
}

class NoRoute extends Error {}

function isHttpsUrl(s: string): boolean {
  return /^https:\/\//.test(s);
}
