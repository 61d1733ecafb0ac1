// OutboundDelivery: the worker that delivers queued outbound messages to each recipient, to its
// inbox over HTTPS, through a relay or to an A2A agent, with the rule that turns an answer into
// the outcome of an attempt (classify) and the order a peer's relays are tried in.
import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import type { Nats } from "../nats/connection.ts";
import { nanos } from "../contract/nats.ts";
import { ConsumerWorker } from "../nats/worker.ts";
import { classifyAnswer } from "../net/answer.ts";
import type { HttpClient } from "../net/http-client.ts";
import { targetRefusedMessage } from "../net/targets.ts";
import { inboxPost, Message } from "../protocol/message.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { messageLog } from "../telemetry/logs.ts";
import {
  SPAN_ATTRIBUTES,
  failSpan,
  inSpan,
  messageAttributes,
  messageContext,
  SpanKind,
} from "../telemetry/tracing.ts";
import { errorMessage } from "../util/errors.ts";
import {
  expiredRecipientState,
  heldBackRecipientState,
  isDue,
  isPending,
  nextRecipientState,
  type Deadline,
  type DeliveryRecord,
  type DeliveryStates,
  type Outcome,
  type RecipientState,
} from "./delivery-state.ts";
import type { AgentNames } from "./names.ts";
import { Breakers, type ResiliencyOptions } from "./breakers.ts";
import type { Circuits } from "../protocol/local-api.ts";

export type { Outcome } from "./delivery-state.ts";

/** Where a recipient's messages go. */
export type Route = { kind: "https"; inbox: string } | { kind: "relay"; relays: string[] };

/** Publishes a message through a relay (relay fallback); provided when the runtime has a relay client. */
export interface RelayPublisher {
  /** Publish `message` at the relay for `recipients` only (relay `?recipient=`). */
  publish(relayUrl: string, message: Message, recipients: string[]): Promise<Outcome>;
}

/** Sends to A2A agents (recipients `a2a:<agent card URL>`, docs/a2a.md#sending-to-an-a2a-agent). */
export interface A2aSender {
  /** One attempt; `until`: when the message's retry window or ttl ends. */
  deliver(message: Message, recipient: string, until?: number): Promise<Outcome>;
}

/** The prefix of an A2A recipient's id (protocol/local-api.ts A2A_RECIPIENT_PREFIX). */
const A2A_PREFIX = "a2a:";

/** A peer's relays and how to use them (IFP-8 2.3). */
export interface PeerRelays {
  urls: string[];
  preference?: string;
}

/**
 * The order relays are tried in, by the `preference` of the list (docs/agent.md): `any`
 * (the default, and any value this runtime does not know) tries them in the order listed;
 * `spread` starts at a relay chosen from the message_id, so that messages spread over the
 * relays, and goes round the rest in order. Either way the next relay is tried after any failure.
 */
export function relayOrder(relays: PeerRelays, messageId: string): string[] {
  const urls = [...new Set(relays.urls)];
  if (relays.preference !== "spread" || urls.length < 2) return urls;
  let h = 0;
  for (const c of messageId) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  const start = h % urls.length;
  return [...urls.slice(start), ...urls.slice(0, start)];
}

const DEFAULT_ACK_WAIT_MS = 5 * 60_000;

export interface OutboundOptions {
  /** Pauses between attempts; the last repeats (IFP-6: 1m, 5m, 30m, then hourly). */
  backoffMs: number[];
  /** Give up this long after the message was queued (24h). */
  retryForMs: number;
  /** Base URLs of peers known from the Agent spec. */
  peerUrls: Map<string, string>;
  /** Relays of peers known from the Agent spec (spec.peers[].relay). */
  peerRelays?: Map<string, string[] | PeerRelays>;
  /** This agent's own relays (spec.relay.urls), the last ones tried for any peer. */
  ownRelays?: string[];
  concurrency?: number;
  /** Whether a message for `agent` may go through this relay (spec.encryption, docs/encryption.md); all may when absent. */
  relayAllowed?: (message: Message, relayUrl: string, agent: string) => Promise<boolean>;
  /** Whether handing the message to this relay puts a clear body on an untrusted relay: named in the delivery record, counted. */
  plaintextThrough?: (message: Message, relayUrl: string) => boolean;
  /**
   * The consumer's ack_wait (5 min). A message's attempts to all its recipients may take
   * longer: the handler tells JetStream it is still working every third of it, so the message
   * is never handed out a second time while its first delivery is under way.
   */
  ackWaitMs?: number;
  /** Per-destination circuit breaker, in-flight cap and timeout (spec.outbound.resiliency); none when absent. */
  resiliency?: ResiliencyOptions;
}

/**
 * An attempt that was not made: every destination for the recipient was held back by its
 * resiliency (breakers.ts). The recipient keeps its attempt count and waits until `deferredUntil`.
 */
type Deferred = Extract<Outcome, { kind: "retry" }> & { deferredUntil: number };

const isDeferred = (o: Outcome): o is Deferred => o.kind === "retry" && o.deferredUntil !== undefined;

/** A retry of a direct attempt or a relay's publish that counts against its destination's circuit. */
const isFailure = (o: Outcome) => o.kind === "retry" && (o.status === undefined || o.status >= 500);

/**
 * An inbox's (or a relay's) answer as the outcome of an attempt, by the one answer rule
 * (net/answer.ts): 408/425/429 wait for their Retry-After; 5xx follow the schedule, never
 * sooner than a Retry-After; a redirect and any other 4xx are final.
 */
export function classify(
  status: number,
  retryAfter: string | null,
  via: string,
  body: string,
  now = Date.now(),
): Outcome {
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
      return {
        kind: "retry",
        via,
        status,
        error,
        ...(answer.retryAfterMs ? { notBeforeMs: answer.retryAfterMs } : {}),
      };
    case "final": {
      const why = answer.redirect
        ? "redirects are not followed"
        : status >= 400 && status < 500
          ? "a 4xx is never retried"
          : "not a status to retry";
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
  private readonly a2a: A2aSender | undefined;
  private readonly breakers: Breakers | undefined;

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
    a2a?: A2aSender;
  }) {
    this.a2a = deps.a2a;
    this.states = deps.states;
    this.http = deps.http;
    this.discovery = deps.discovery;
    this.opts = deps.options;
    this.log = deps.log;
    this.metrics = deps.metrics;
    this.onGiveUp = deps.onGiveUp;
    this.relay = deps.relay;
    this.breakers = deps.options.resiliency && new Breakers(deps.options.resiliency, deps.metrics);
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
          ack_wait: nanos(deps.options.ackWaitMs ?? DEFAULT_ACK_WAIT_MS),
          max_deliver: -1,
          max_ack_pending: 10_000,
        },
        updatable: ["ack_wait"],
        concurrency: deps.options.concurrency ?? 8,
        handle: (m) => this.handle(m),
        label: "outbound delivery",
      },
      deps.log,
    );
  }
  /** The destinations whose circuit is not closed (GET /circuits of the local API). */
  circuits(): Circuits {
    return this.breakers?.circuits() ?? { circuits: [], total: 0 };
  }

  /** Create the durable consumer (or update it) without consuming: what start() does first. */
  ensureConsumer(): Promise<void> {
    return this.worker.ensureConsumer();
  }

  start(): void {
    this.worker.start();
  }

  private async handle(m: JsMsg): Promise<void> {
    // In progress for as long as this takes: never redelivered while still being worked on.
    const beat = setInterval(
      () => m.working(),
      Math.max(500, Math.floor((this.opts.ackWaitMs ?? DEFAULT_ACK_WAIT_MS) / 3)),
    );
    try {
      await this.deliver(m);
    } finally {
      clearInterval(beat);
    }
  }

  private async deliver(m: JsMsg): Promise<void> {
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
      const outcome = await inSpan(
        "ifp.outbound.attempt",
        {
          kind: SpanKind.CLIENT,
          parent: messageContext(message),
          attributes: () => ({
            ...messageAttributes(message),
            [SPAN_ATTRIBUTES.recipient]: r.agent,
            [SPAN_ATTRIBUTES.attempt]: r.attempts + 1,
          }),
        },
        async (span) => {
          const o = await this.attempt(message, r.agent, new Set(r.refused_relays), deadline.at);
          span.setAttributes({
            [SPAN_ATTRIBUTES.outcome]: o.kind,
            ...(o.via ? { [SPAN_ATTRIBUTES.route]: o.via } : {}),
            ...(o.status !== undefined ? { [SPAN_ATTRIBUTES.status]: o.status } : {}),
          });
          if (o.kind !== "delivered") failSpan(span, { name: o.kind, message: o.error }, o.status);
          return o;
        },
      );
      const now = Date.now();
      if (isDeferred(outcome)) {
        // No attempt was made: the recipient keeps its attempts and waits in the outbox.
        const next = heldBackRecipientState(r, outcome, now, deadline);
        record.recipients[i] = next;
        if (isPending(next)) nextDelay = Math.min(nextDelay, Date.parse(next.next_attempt_at!) - now);
        else gaveUp.push(next);
        continue;
      }
      this.metrics.outbound.inc({ result: outcome.kind });
      const next = nextRecipientState(r, outcome, now, deadline, { schedule: this.opts.backoffMs });
      record.recipients[i] = next;
      if (next.state === "retrying") {
        const wait = Date.parse(next.next_attempt_at!) - now;
        nextDelay = Math.min(nextDelay, wait);
        this.log.warn(
          { ...messageLog(message), to: next.agent, attempt: next.attempts, retryInMs: wait },
          next.last_error!,
        );
      } else if (next.state !== "delivered") gaveUp.push(next);
      else
        this.log.debug(
          { ...messageLog(message), to: next.agent, attempt: next.attempts, via: next.via },
          "message delivered",
        );
    }
    record.updated_at = new Date().toISOString();
    await this.states.put(record, m.string());
    for (const r of gaveUp) {
      this.metrics.outbound.inc({ result: r.state === "failed" ? "refused" : "undeliverable" });
      await this.onGiveUp(record, r).catch((err) => this.log.warn({ err: errorMessage(err) }, "notification failed"));
    }
    if (nextDelay === Infinity) m.ack();
    else m.nak(Math.max(1, Math.round(nextDelay)));
  }

  /**
   * When retrying this message stops: the retry window's end (counted from its last redrive, if
   * any), or its ttl_seconds when sooner.
   */
  private deadline(record: DeliveryRecord, message: Message): Deadline {
    const window = Date.parse(record.redrive?.at ?? record.queued_at) + this.opts.retryForMs;
    const expiresAt = message.headers.ttl_seconds
      ? Date.parse(message.headers.date) + message.headers.ttl_seconds * 1000
      : Infinity;
    return expiresAt <= window
      ? { at: expiresAt, reason: "the message's ttl_seconds passed", expires: true }
      : { at: window, reason: `still failing after the ${Math.round(this.opts.retryForMs / 1000)} s retry window` };
  }

  /**
   * One delivery attempt to one recipient, direct first and through a relay when that is the
   * way. `refused`: relays that already refused this message for this recipient for good, which
   * are not asked again.
   */
  async attempt(
    message: Message,
    agent: string,
    refused: ReadonlySet<string> = new Set(),
    until = Infinity,
  ): Promise<Outcome> {
    if (agent.startsWith(A2A_PREFIX)) return this.toA2a(message, agent, until);
    let route: Route;
    try {
      route = await this.route(agent, message.headers.message_id);
    } catch (err) {
      return err instanceof NoRoute || targetRefusedMessage(err)
        ? { kind: "failed", error: (err as Error).message }
        : { kind: "retry", error: `discovery failed: ${errorMessage(err)}` };
    }
    if (route.kind === "relay") return this.viaRelay(route.relays, message, agent, refused);
    const via = route.inbox;
    const admission = this.breakers?.admit(via);
    if (admission && !admission.admitted) {
      const held: Deferred = { kind: "retry", via, error: admission.error, deferredUntil: admission.retryAt };
      return this.orRelays(held, message, agent, refused);
    }
    const outcome = await this.direct(via, message);
    admission?.done(isFailure(outcome) ? "failure" : "success");
    if (outcome.kind === "failed" || outcome.kind === "delivered") return outcome;
    return outcome.status === undefined || outcome.status >= 500
      ? this.orRelays(outcome, message, agent, refused)
      : outcome;
  }

  /** One attempt at an A2A agent, behind the circuit of its recipient id (`a2a:<agent card URL>`). */
  private async toA2a(message: Message, agent: string, until: number): Promise<Outcome> {
    if (!this.a2a)
      return { kind: "failed", error: `${agent} is an A2A agent, and this runtime sends nothing over A2A` };
    const admission = this.breakers?.admit(agent);
    if (admission && !admission.admitted)
      return { kind: "retry", via: agent, error: admission.error, deferredUntil: admission.retryAt } satisfies Deferred;
    const outcome = await this.a2a.deliver(message, agent, until);
    admission?.done(isFailure(outcome) ? "failure" : "success");
    return outcome;
  }

  /** One POST to the peer's inbox, within the destination's timeout. */
  private async direct(via: string, message: Message): Promise<Outcome> {
    let res: Awaited<ReturnType<HttpClient["request"]>>;
    try {
      res = await this.http.request(via, {
        ...(this.breakers ? { timeoutMs: this.breakers.timeoutMs } : {}),
        ...inboxPost(message),
      });
    } catch (err) {
      const notATarget = targetRefusedMessage(err);
      if (notATarget) {
        // The peer's inbox resolves to an address this agent may not reach: final, and no
        // fallback to relays the same documents name.
        return { kind: "failed", via, error: `inbox refused as a target: ${notATarget}` };
      }
      return {
        kind: "retry",
        via,
        error: `network error: ${errorMessage((err as Error).cause instanceof Error ? (err as Error).cause : err)}`,
      };
    }
    return classify(res.status, res.headers.get("retry-after"), via, res.text);
  }

  /**
   * Direct delivery failed in a way that may pass (a network error, a 5xx): the peer's relays
   * are tried before the attempt counts. Delivered by the first that takes it; otherwise the
   * direct outcome stands (the inbox may come back, and its Retry-After is kept), with the
   * relays that refused for good remembered.
   */
  private async orRelays(
    direct: Extract<Outcome, { kind: "retry" }>,
    message: Message,
    agent: string,
    refused: ReadonlySet<string>,
  ): Promise<Outcome> {
    const relays = await this.relaysOf(agent, message.headers.message_id);
    if (!relays.length || !this.relay) return direct;
    const viaRelay = await this.viaRelay(relays, message, agent, refused);
    if (viaRelay.kind === "delivered") return viaRelay;
    if (isDeferred(direct)) {
      // The inbox was held back: a relay's retry is the attempt; otherwise the inbox, which may
      // come back, is waited for, and the relays that refused for good are remembered.
      if (viaRelay.kind === "retry" && !isDeferred(viaRelay)) return viaRelay;
      return {
        ...direct,
        error: `${direct.error}; ${viaRelay.error}`,
        deferredUntil: Math.min(direct.deferredUntil, isDeferred(viaRelay) ? viaRelay.deferredUntil : Infinity),
        ...(viaRelay.refused?.length ? { refused: viaRelay.refused } : {}),
      };
    }
    return viaRelay.refused?.length
      ? { ...direct, error: `${direct.error}; ${viaRelay.error}`, refused: viaRelay.refused }
      : direct;
  }

  /**
   * Publish through the recipient's relays, to each only for this recipient (so a relay that
   * does not serve the message's other recipients still takes it), moving to the next relay
   * after any failure of one — a 4xx included, since relays answer 401/404 for agents they do
   * not serve. A relay that refused for good (a final answer: a 4xx but 408/425/429, a
   * redirect) is never asked again for this message and recipient (spec 7.2 rule 3): it is
   * named in the outcome's `refused`, kept in the delivery record, and skipped on later passes.
   * Delivered at the first 202; otherwise a retry when any relay may take it later, and final
   * only when every relay refused it for good.
   */
  private async viaRelay(
    relays: string[],
    message: Message,
    agent: string,
    refused: ReadonlySet<string> = new Set(),
  ): Promise<Outcome> {
    if (!this.relay)
      return {
        kind: "retry",
        error: "the recipient is reachable only through a relay, and no relay client is configured",
      };
    const failures: string[] = [];
    const newlyRefused: string[] = [];
    let retry: Extract<Outcome, { kind: "retry" }> | undefined;
    const allowed = await this.allowedRelays(relays, message, agent);
    if (relays.length && !allowed.length) {
      return {
        kind: "failed",
        error: `the message is not encrypted, and every relay that reaches ${agent} is untrusted (spec.encryption.relayTrust); it is not sent through them`,
      };
    }
    const remaining = allowed.filter((u) => !refused.has(u));
    let heldUntil = Infinity;
    let tried = 0;
    for (const url of remaining) {
      const admission = this.breakers?.admit(url);
      if (admission && !admission.admitted) {
        failures.push(admission.error);
        heldUntil = Math.min(heldUntil, admission.retryAt);
        continue;
      }
      tried++;
      const outcome = await this.relay.publish(url, message, [agent]);
      admission?.done(isFailure(outcome) ? "failure" : "success");
      if (outcome.kind === "delivered") {
        if (!this.opts.plaintextThrough?.(message, url)) return outcome;
        this.metrics.outboundPlaintextRelay.inc();
        return { ...outcome, plaintextRelay: url };
      }
      failures.push(`${outcome.via ?? url}: ${outcome.error}`);
      if (outcome.kind === "retry" && !retry) retry = outcome;
      if (outcome.kind === "failed") newlyRefused.push(url);
    }
    const skipped = allowed.length - remaining.length;
    const earlier = skipped
      ? `${failures.length ? "; " : ""}${skipped} relay${skipped === 1 ? "" : "s"} that refused it for good not asked again`
      : "";
    const error = allowed.length
      ? `no relay accepted the message (${failures.join("; ")}${earlier})`
      : "no relay is known for the recipient";
    const refusedNow = newlyRefused.length ? { refused: newlyRefused } : {};
    if (!tried && heldUntil < Infinity) return { kind: "retry", error, deferredUntil: heldUntil } satisfies Deferred;
    // A relay held back may take it later: never final while one is.
    if (heldUntil < Infinity && !retry) return { kind: "retry", error, ...refusedNow };
    if (retry) return { ...retry, error, ...refusedNow };
    return { kind: "failed", error, ...refusedNow };
  }

  private async allowedRelays(relays: string[], message: Message, agent: string): Promise<string[]> {
    const allowed = this.opts.relayAllowed;
    if (!allowed) return relays;
    // One after the other: the first looks up the recipient's key, the rest find it cached.
    const out: string[] = [];
    for (const u of relays) if (await allowed(message, u, agent)) out.push(u);
    return out;
  }

  private async route(agent: string, messageId: string): Promise<Route> {
    const known = this.opts.peerUrls.get(agent);
    const base = known ?? (isHttpsUrl(agent) ? agent : undefined);
    if (!base) {
      const relays = relayOrder(this.configuredRelays(agent), messageId);
      if (relays.length) return { kind: "relay", relays };
      throw new NoRoute(
        `no route to ${agent}: it is not an https URL and spec.peers[] gives it neither a url nor relays`,
      );
    }
    try {
      const identity = await this.discovery.identity(base);
      const inbox = identity.endpoints?.inbox;
      if (inbox && isHttpsUrl(inbox)) return { kind: "https", inbox };
      if (inbox) {
        // A plaintext inbox is never used (spec 5.2): its relays, else a final failure.
        const relays = await this.relaysOf(agent, messageId);
        if (relays.length) return { kind: "relay", relays };
        throw new NoRoute(`${agent} advertises the inbox ${inbox}, which is not https (spec 5.2)`);
      }
      const relays = await this.relaysOf(agent, messageId);
      if (relays.length) return { kind: "relay", relays };
    } catch (err) {
      if (!(err instanceof DiscoveryError)) throw err;
      // A configured base URL still gives the well-known inbox when the identity is unavailable
      // (and the relays when that POST meets a network error: attempt()).
      if (known) return { kind: "https", inbox: `${DiscoveryClient.wellKnownBase(base)}/inbox` };
      // An https agent id whose identity document cannot be had (unreachable, 404, bad TLS, not
      // a document): the relays configured for it, and this agent's own, are still a way.
      const relays = await this.relaysOf(agent, messageId, { documents: false });
      if (relays.length) return { kind: "relay", relays };
      throw err;
    }
    return { kind: "https", inbox: `${DiscoveryClient.wellKnownBase(base)}/inbox` };
  }

  private configuredRelays(agent: string): PeerRelays {
    const c = this.opts.peerRelays?.get(agent);
    return Array.isArray(c) ? { urls: c } : (c ?? { urls: [] });
  }

  /**
   * A peer's relays (IFP-8 2.3): those of spec.peers first, then those its identity document
   * and its capability document advertise (unless `documents` is false: they could not be
   * had), then this agent's own (spec.relay.urls: a relay both use may serve the peer too),
   * each once; the preference is the first one stated, in that order. The order is
   * relayOrder() of the message.
   */
  private async relaysOf(agent: string, messageId: string, opts: { documents?: boolean } = {}): Promise<string[]> {
    const configured = this.configuredRelays(agent);
    const base = this.opts.peerUrls.get(agent) ?? (isHttpsUrl(agent) ? agent : undefined);
    const lists: PeerRelays[] = [configured];
    if (base && opts.documents !== false) {
      const identity = await this.discovery.identity(base).catch(() => undefined);
      const capabilities = await this.discovery.capabilities(base).catch(() => undefined);
      for (const r of [identity?.relay, capabilities?.relay])
        if (r?.urls.length) lists.push({ urls: r.urls.filter(isHttpsUrl), preference: r.preference });
    }
    if (this.opts.ownRelays?.length) lists.push({ urls: this.opts.ownRelays });
    const preference = lists.find((l) => l.urls.length && l.preference)?.preference;
    return relayOrder({ urls: lists.flatMap((l) => l.urls), preference }, messageId);
  }

  async stop(): Promise<void> {
    await this.worker.stop();
  }
}

class NoRoute extends Error {}

function isHttpsUrl(s: string): boolean {
  return /^https:\/\//.test(s);
}
