// The agent's side of relays: the publisher that the outbound worker falls back to (relayOutcome
// classifies a relay's answers), and RelayMailboxReader, which reads the agent's mailboxes on
// its own relays into the inbox.
import type { Logger } from "pino";
import type { HttpClient } from "../../net/http-client.ts";
import { Message } from "../../protocol/message.ts";
import { describeIssues } from "../../contract/issues.ts";
import { signMessage, type SigningKey } from "../../protocol/signing.ts";
import type { MessageVerifier, Verified } from "../../protocol/verify.ts";
import { ProtocolError } from "../../protocol/errors.ts";
import { errorReply } from "../outbound/replies.ts";
import { messageLog } from "../../telemetry/logs.ts";
import {
  SPAN_ATTRIBUTES,
  inSpan,
  messageAttributes,
  messageContext,
  SpanKind,
  withMessageContext,
} from "../../telemetry/tracing.ts";
import { admit, isMisaddressed, type Admission } from "../inbound/accept.ts";
import { RelayClient, RelayError } from "../../net/relay-client.ts";
import type { RuntimeMetrics } from "../../server/metrics.ts";
import { createHash } from "node:crypto";
import { composeMessage } from "../outbound/compose.ts";
import { CAPABILITIES_TOPIC } from "../peer-capabilities.ts";
import type { OutboxStore } from "../outbound/outbox.ts";
import type { Outcome, RelayPublisher } from "../outbound/outbound.ts";
import { classify } from "../outbound/outbound.ts";
import type { CapabilityDocument } from "../../protocol/documents.ts";
import { capabilityDocumentHash } from "../documents.ts";
import { isEncrypted } from "../../protocol/encryption.ts";
import { encryptionRequired, type AgentEncryption } from "../encryption.ts";
import { Backoff } from "../../util/backoff.ts";
import { retry } from "../../util/retry.ts";
import { setTimeout as sleep } from "node:timers/promises";
import { lacksEndpoint, MissingEndpoints } from "./missing-endpoints.ts";
import { RelayBatcher, type RelayAnswer } from "./relay-batch.ts";

/** Refusals of a relayed message that are answered and acknowledged like a 401 (never retried). */
const REFUSED = new Set<string>(["encryption_required", "decryption_failed"]);

/** What became of a relayed message: "next" (taken, or left behind on its own), "stop" (it and those behind it stay). */
type Taken = "next" | "stop";

/** How a taken message is acknowledged: at once (the event stream) or with the rest of its page (a poll). */
type Ack = (id: string, message?: Message) => Promise<void>;

import { targetRefusedMessage } from "../../net/targets.ts";

/**
 * What a relay's answer about one message means for its delivery — the answer to a lone
 * publish, the message's item of a batch, or a batch refused as a whole — classified like an
 * inbox answer; `answer` rejects when the request got no answer.
 */
export async function relayOutcome(relayUrl: string, answer: Promise<RelayAnswer>): Promise<Outcome> {
  const via = `relay:${relayUrl}`;
  try {
    const res = await answer;
    return classify(res.status, res.retryAfter, via, res.text);
  } catch (err) {
    const refused = targetRefusedMessage(err);
    if (refused) return { kind: "failed", via, error: `relay refused as a target: ${refused}` };
    return { kind: "retry", via, error: `relay unreachable: ${(err as Error).message}` };
  }
}

/**
 * Relay fallback of the outbound delivery: publish through a relay, classified like an inbox
 * answer. Concurrent publishes to one relay go in batches (RelayBatcher, relay-batch.ts);
 * `timeoutMs` bounds each request to a relay (spec.outbound.resiliency.timeout).
 */
export function relayPublisher(
  signing: SigningKey,
  http: HttpClient,
  opts: { timeoutMs?: number } = {},
): RelayPublisher {
  const batcher = new RelayBatcher(signing, http, opts);
  return {
    publish: (relayUrl: string, message: Message, recipients: string[]): Promise<Outcome> =>
      relayOutcome(relayUrl, batcher.publish(relayUrl, message, recipients)),
  };
}

/** With a relay's event stream open, its mailbox is still read this often, for what the stream had to leave. */
export const EVENTS_FALLBACK_POLL_MS = 60_000;

/**
 * An agent's mailboxes on its own relays (spec.relay.urls): followed on each relay's event
 * stream (GET /relay/events) and read by polling every pollInterval while a stream is not
 * open (and every minute while it is), each
 * message's signature verified after relay delivery (spec 5.4) with the same key lookup as the
 * inbox, accepted into the inbox exactly like a direct POST (deduplicated, inspected, handed to
 * the handler), trace kept, and only then acknowledged at the relay. A message refused as the
 * inbox would refuse it with 401 — signature does not verify, sender's key cannot be found,
 * level too low — is answered (IFP-5 4.3) with a signed error-phase message published through
 * the same relay (unless it is itself an error-phase message), counted and logged, and only then
 * acknowledged. Throttled lookups and storage
 * failures leave the message at the relay for the next read. A read that fails (the relay not
 * reachable, or answering with an error, as while it restarts) or that had to leave a message
 * behind is tried again after 1 s, doubling up to a minute, sooner than the next pollInterval
 * when that is later: an agent that polls hourly does not wait an hour because its relay was
 * restarting when it looked.
 */
export class RelayMailboxReader {
  private readonly clients: RelayClient[];
  private readonly verifier: MessageVerifier;
  private readonly signing: SigningKey;
  private readonly http: HttpClient;
  private readonly requireSignature: boolean;
  private readonly accept: (
    raw: object,
    message: Message,
    verified: Verified,
  ) => Promise<{ duplicate?: boolean } | unknown>;
  private readonly admission: Admission;
  private readonly log: Logger;
  private readonly metrics: RuntimeMetrics;
  private readonly intervalMs: number;
  private readonly topics: string[];
  private readonly onRelayed: ((message: Message, verified: Verified) => Promise<unknown>) | undefined;
  private readonly encryption: Pick<AgentEncryption, "refusesPlaintextFrom"> | undefined;
  /** Relays where the topic subscription is in place (tried again on each read until it is). */
  private readonly subscribed = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private following: Promise<void> | undefined;
  private stopped = false;
  private readonly abort = new AbortController();
  private readonly mode: "events" | "poll";
  /** Relays whose event stream is open. */
  private readonly streaming = new Set<string>();
  /** When each relay's mailbox was last read (stamped as a read starts and as it ends). */
  private readonly lastPoll = new Map<string, number>();
  /** Relays whose last read failed: the waits before their next reads, and when that is. */
  private readonly retries = new Map<string, { backoff: Backoff; at: number }>();
  /** Relays whose stream was said in the log to be in use (once). */
  private readonly announced = new Set<string>();
  /** Relays without POST /relay/messages/ack: they get one DELETE per message. */
  private readonly noAckMany = new MissingEndpoints();

  constructor(deps: {
    urls: string[];
    signing: SigningKey;
    http: HttpClient;
    verifier: MessageVerifier;
    requireSignature: boolean;
    accept: (raw: object, message: Message, verified: Verified) => Promise<unknown>;
    /** The inbox's addressing and date-window checks, applied to every relayed message too. */
    admission: Admission;
    intervalMs: number;
    log: Logger;
    metrics: RuntimeMetrics;
    /** Topics to follow on every relay (spec.relay.topics). */
    topics?: string[];
    /** Called for each relayed message once accepted, e.g. to apply a capabilities.update. */
    onRelayed?: (message: Message, verified: Verified) => Promise<unknown>;
    /** spec.relay.receive: "events" follows each relay's event stream, polling as the fallback; "poll" only polls. */
    mode?: "events" | "poll";
    /** spec.encryption: plaintext from a relay not trusted is refused when it requires encryption. */
    encryption?: Pick<AgentEncryption, "refusesPlaintextFrom">;
  }) {
    this.mode = deps.mode ?? "events";
    this.encryption = deps.encryption;
    this.clients = deps.urls.map((u) => new RelayClient(u, deps.signing, deps.http));
    this.topics = deps.topics ?? [];
    this.onRelayed = deps.onRelayed;
    this.verifier = deps.verifier;
    this.signing = deps.signing;
    this.http = deps.http;
    this.requireSignature = deps.requireSignature;
    this.accept = deps.accept;
    this.admission = deps.admission;
    this.intervalMs = deps.intervalMs;
    this.log = deps.log;
    this.metrics = deps.metrics;
  }

  start(): void {
    if (this.mode === "events") {
      // The stream hands out what is waiting first: no poll until a stream fails (or a minute).
      for (const c of this.clients) {
        this.streaming.add(c.base);
        this.lastPoll.set(c.base, Date.now());
      }
    }
    if (this.mode === "events")
      this.following = Promise.all(this.clients.map((c) => this.follow(c))).then(() => undefined);
    const tick = () => {
      if (this.stopped) return;
      this.running = this.pollDue().finally(() => {
        if (!this.stopped) this.timer = setTimeout(tick, this.untilNextRead());
      });
    };
    tick();
  }

  /** When this relay's mailbox is due to be read: its retry after a failed read, or its period since the last. */
  private dueAt(base: string): number {
    const period = this.streaming.has(base) ? EVENTS_FALLBACK_POLL_MS : this.intervalMs;
    const regular = (this.lastPoll.get(base) ?? 0) + period;
    const retry = this.retries.get(base)?.at;
    return retry === undefined ? regular : Math.min(retry, regular);
  }

  /** The wait before the next read of any relay: at most pollInterval, and never a busy loop. */
  private untilNextRead(): number {
    const now = Date.now();
    const next = Math.min(...this.clients.map((c) => this.dueAt(c.base) - now));
    return Math.max(10, Math.min(this.intervalMs, next));
  }

  /** The wait before this relay is read again if the read under way fails (for the log). */
  private nextRetryMs(base: string): number {
    return this.retries.get(base)?.backoff.delayMs ?? 1_000;
  }

  /** A read ended: read through (the retries start over), or failed (read again after the next wait). */
  private readEnded(base: string, ok: boolean): void {
    this.lastPoll.set(base, Date.now());
    if (ok) {
      this.retries.delete(base);
      return;
    }
    const retry = this.retries.get(base) ?? { backoff: new Backoff({ initialMs: 1_000, maxMs: 60_000 }), at: 0 };
    retry.at = Date.now() + retry.backoff.next();
    this.retries.set(base, retry);
  }

  /** Read every relay once; resolves when all waiting messages have been taken. */
  async pollAll(): Promise<void> {
    await Promise.all(this.clients.map((c) => this.poll(c)));
  }

  /**
   * Read the relays whose mailbox is due: every pollInterval without an event stream; with
   * one, once every EVENTS_FALLBACK_POLL_MS (what the stream could not take waits no longer).
   */
  private async pollDue(): Promise<void> {
    const now = Date.now();
    await Promise.all(this.clients.filter((c) => this.dueAt(c.base) <= now).map((c) => this.poll(c)));
  }

  /** Follow spec.relay.topics on this relay, once; a failure is logged and tried again on the next read. */
  private async subscribe(client: RelayClient): Promise<void> {
    if (!this.topics.length || this.subscribed.has(client.base)) return;
    try {
      await client.subscribe(this.topics);
      this.subscribed.add(client.base);
      this.log.info({ relay: client.base, topics: this.topics }, "following topics on the relay");
    } catch (err) {
      this.log.warn(
        { relay: client.base, topics: this.topics, err: (err as Error).message },
        "could not subscribe to topics on the relay; will retry",
      );
    }
  }

  private async poll(client: RelayClient): Promise<void> {
    this.readEnded(client.base, await this.read(client));
  }

  /** Read one relay's mailbox through, page by page; false when a read failed or a message had to stay. */
  private async read(client: RelayClient): Promise<boolean> {
    await this.subscribe(client);
    this.lastPoll.set(client.base, Date.now());
    let after: number | undefined;
    const topicsAtRelay = this.topicsOnce(client);
    for (let page = 0; page < 50 && !this.stopped; page++) {
      let messages: Message[];
      let next: number | undefined;
      try {
        ({ messages, next } = await client.pull({ limit: 100, after }));
      } catch (err) {
        this.log.warn(
          { relay: client.base, err: (err as Error).message, retryInMs: this.nextRetryMs(client.base) },
          "could not read the relay mailbox",
        );
        return false;
      }
      if (!messages.length) return true;
      // What the page made durable (or let go) is acknowledged together once the page is taken.
      const taken: string[] = [];
      const ack: Ack = async (id) => void (id && taken.push(id));
      let held = false;
      for (const raw of messages) {
        if ((await this.take(client, raw, topicsAtRelay, ack)) === "stop") {
          held = true;
          break;
        }
      }
      await this.ackPage(client, taken);
      if (held) return false;
      // Messages left at the relay (throttled lookups) stay behind the cursor until the next read.
      if (next === undefined) return true;
      after = next;
    }
    return true;
  }

  /** The topics this agent is subscribed to at a relay, read once (per read or stream) when a message names a topic. */
  private topicsOnce(client: RelayClient): () => Promise<ReadonlySet<string>> {
    let topics: Promise<ReadonlySet<string>> | undefined;
    return () => (topics ??= client.subscriptions().then((s) => new Set(s.topics)));
  }

  /**
   * One message from a relay, read by a poll or pushed on the event stream: checked, verified,
   * accepted and acknowledged, or refused and answered. "stop" when it must stay at the relay
   * and the messages behind it too (the store failed): the next read takes them again; "next"
   * otherwise (a throttled lookup leaves only its own message behind).
   */
  private async take(
    client: RelayClient,
    raw: unknown,
    topicsAtRelay: () => Promise<ReadonlySet<string>>,
    ack: Ack,
  ): Promise<Taken> {
    const id = (raw as { headers?: { message_id?: string } }).headers?.message_id ?? "";
    const parsed = Message.safeParse(raw);
    if (!parsed.success) return this.dropInvalid(client, id, parsed.error, ack);
    const message = parsed.data;
    const admitted = await this.admitRelayed(client, message, id, topicsAtRelay, ack);
    if (typeof admitted === "string") return admitted;
    const accepted = admitted ?? (await this.acceptRelayed(client, raw, message));
    if (typeof accepted === "string") return accepted;
    if (accepted instanceof ProtocolError) return this.refuseRelayed(client, message, id, accepted, ack);
    await ack(id, message);
    // Read twice (the stream and a poll at once, or a copy the relay handed out again): taken once.
    this.metrics.relay.inc({ operation: "intake", result: accepted.duplicate ? "duplicate" : "accepted" });
    return "next";
  }

  /** A relayed message that is not a message: logged, acknowledged so that it is not read again. */
  private async dropInvalid(
    client: RelayClient,
    id: string,
    error: Parameters<typeof describeIssues>[0],
    ack: Ack,
  ): Promise<Taken> {
    this.log.warn(
      { relay: client.base, message_id: id, problem: describeIssues(error) },
      "dropping an invalid message from the relay",
    );
    await ack(id);
    return "next";
  }

  /**
   * The inbox's own checks first: a relay must not hand this agent what was addressed to
   * another, nor a message older than a copy of it can be recognised (judged by when the relay
   * accepted it: it may have waited there for days). Undefined when admitted; the refusal to
   * answer; "next" once a misaddressed message is dropped; "stop" when the subscriptions at the
   * relay could not be read.
   */
  private async admitRelayed(
    client: RelayClient,
    message: Message,
    id: string,
    topicsAtRelay: () => Promise<ReadonlySet<string>>,
    ack: Ack,
  ): Promise<Taken | ProtocolError | undefined> {
    try {
      const named = message.headers.to.some((t) => t.agent.startsWith("topic:"));
      admit(message, this.admission, named ? await topicsAtRelay() : undefined, true);
      return undefined;
    } catch (err) {
      if (isMisaddressed(err)) {
        this.metrics.relay.inc({ operation: "intake", result: "misaddressed" });
        this.log.warn(
          { relay: client.base, ...messageLog(message), to: message.headers.to, err: (err as Error).message },
          "dropping a relayed message addressed to someone else",
        );
        await ack(id, message);
        return "next";
      }
      if (err instanceof ProtocolError) return err;
      this.log.warn(
        { relay: client.base, err: (err as Error).message },
        "could not read the subscriptions at the relay; will retry",
      );
      return "stop";
    }
  }

  /**
   * An admitted message verified (signature, encryption where the relay is not trusted),
   * accepted into the inbox as a direct POST would be, and applied (onRelayed): whether it was a
   * duplicate; the refusal to answer (a 401, a plaintext where encryption is required, a body
   * that does not decrypt); or "next"/"stop" when it must be read again (a throttled identity
   * lookup holds back only its own message, a store failure all behind it).
   */
  private async acceptRelayed(
    client: RelayClient,
    raw: unknown,
    message: Message,
  ): Promise<Taken | ProtocolError | { duplicate: boolean }> {
    let duplicate = false;
    try {
      const verified = await inSpan(
        "ifp.relay.intake",
        {
          kind: SpanKind.CONSUMER,
          parent: messageContext(message),
          attributes: () => ({ ...messageAttributes(message), [SPAN_ATTRIBUTES.relay]: client.base }),
        },
        async () => {
          const verified = await this.verifier.verify(message, this.requireSignature, {
            address: `relay:${client.base}`,
          });
          if (!isEncrypted(message) && this.encryption?.refusesPlaintextFrom(client.base)) {
            throw encryptionRequired(
              `${this.signing.agentId} accepts only end-to-end encrypted messages through the relay ${client.base}, which it does not trust; encrypt the body for its encryption key (identity document, use "encryption")`,
            );
          }
          const result = await this.accept(raw as object, message, verified);
          duplicate = (result as { duplicate?: boolean } | undefined)?.duplicate === true;
          return verified;
        },
      );
      await this.onRelayed?.(message, verified).catch((e: Error) =>
        this.log.warn({ ...messageLog(message), err: e.message }, "could not apply a relayed announcement"),
      );
      return { duplicate };
    } catch (err) {
      if (err instanceof ProtocolError && (err.statusCode === 401 || REFUSED.has(err.code))) return err;
      this.log.warn(
        { relay: client.base, ...messageLog(message), err: (err as Error).message },
        "could not accept a relayed message; will retry",
      );
      return err instanceof ProtocolError && err.statusCode === 429 ? "next" : "stop";
    }
  }

  /**
   * A refused message: counted, logged, answered with an error-phase message through the relay
   * (IFP-5 4.3) and acknowledged; "stop" when the answer could not be sent (answered again on the
   * next read).
   */
  private async refuseRelayed(
    client: RelayClient,
    message: Message,
    id: string,
    refusal: ProtocolError,
    ack: Ack,
  ): Promise<Taken> {
    this.metrics.relay.inc({ operation: "intake", result: refusal.code });
    this.log.warn(
      { relay: client.base, ...messageLog(message), code: refusal.code, err: refusal.message },
      "refused a relayed message; answering its sender",
    );
    // An error is never answered with an error: two agents refusing each other would echo forever.
    if (message.headers.phase !== "error" && !(await this.answer(client, message, refusal))) return "stop";
    await ack(id, message);
    return "next";
  }

  /** Acknowledge at the relay, which then hands the message out no more; a failure is only logged. */
  private async ackRelayed(client: RelayClient, id: string, message?: Message): Promise<void> {
    await client
      .ack(id)
      .catch((err: Error) =>
        this.log.warn(
          { relay: client.base, ...(message ? messageLog(message) : { message_id: id }), err: err.message },
          "could not acknowledge at the relay",
        ),
      );
  }

  /**
   * Acknowledge what one page made durable in the inbox (or let go), in one signed
   * POST /relay/messages/ack. A relay that answers it 404 or 405 does not have it: those
   * messages, and that relay's for the next hour, get one DELETE each. Any other failure is
   * logged and leaves them at the relay: the next read takes them again and deduplication
   * absorbs the copy.
   */
  private async ackPage(client: RelayClient, ids: string[]): Promise<void> {
    if (!ids.length) return;
    if (ids.length > 1 && this.noAckMany.has(client.base)) {
      try {
        await client.ackMany(ids);
        return;
      } catch (err) {
        if (!(err instanceof RelayError && lacksEndpoint(err.status))) {
          this.log.warn(
            { relay: client.base, messages: ids.length, err: (err as Error).message },
            "could not acknowledge a page at the relay; it is read again",
          );
          return;
        }
        this.noAckMany.remember(client.base);
        this.log.info(
          { relay: client.base, status: err.status },
          "the relay has no POST /relay/messages/ack; acknowledging each message",
        );
      }
    }
    for (const id of ids) await this.ackRelayed(client, id);
  }

  /**
   * Follow one relay's event stream (GET /relay/events) for as long as the intake runs: each
   * pushed message is taken at once. A stream that cannot be opened or ends is opened again
   * after a pause (1 s doubling to 30 s); meanwhile, and whenever a message had to stay at the
   * relay, the poll reads the mailbox.
   */
  private async follow(client: RelayClient): Promise<void> {
    const backoff = new Backoff({ initialMs: 1_000, maxMs: 30_000 });
    while (!this.stopped) {
      const signal = this.abort.signal;
      try {
        await this.subscribe(client);
        // Read for each message that names a topic: a stream lives long, subscriptions change.
        const topicsAtRelay = () => client.subscriptions().then((s) => new Set(s.topics));
        const ack: Ack = (id, message) => this.ackRelayed(client, id, message);
        let held = false;
        for await (const { message } of client.events({ signal })) {
          if (!this.announced.has(client.base)) {
            this.announced.add(client.base);
            this.log.info({ relay: client.base }, "reading the relay mailbox from its event stream");
          }
          this.streaming.add(client.base);
          backoff.reset();
          // A message that must stay at the relay is read again by the poll; the stream goes on
          // only when nothing is held back, so that the poll sees it.
          if ((await this.take(client, message, topicsAtRelay, ack)) === "stop") {
            held = true;
            break;
          }
          if (this.stopped) break;
        }
        if (held) this.streaming.delete(client.base);
      } catch (err) {
        if (this.stopped) break;
        this.log.warn(
          { relay: client.base, err: (err as Error).message, retryInMs: backoff.delayMs },
          "the relay's event stream is not available; reading the mailbox by polling",
        );
      }
      this.streaming.delete(client.base);
      if (this.stopped) break;
      // Without the stream, what waits is read now rather than at the next poll.
      if (Date.now() - (this.lastPoll.get(client.base) ?? 0) >= Math.min(this.intervalMs, EVENTS_FALLBACK_POLL_MS))
        await this.poll(client);
      await backoff.wait(this.abort.signal);
    }
  }

  /**
   * The error-phase answer to a refused message, through the relay it came by. False when the
   * relay could not be reached (try again later); a relay that refuses the answer is logged and
   * the message is let go, since no later read would do better.
   */
  private async answer(client: RelayClient, message: Message, refusal: ProtocolError): Promise<boolean> {
    const unsigned = errorReply(
      message,
      { agentId: this.signing.agentId },
      {
        code: refusal.code,
        text: `Your message ${message.headers.message_id} was not accepted: ${refusal.message}`,
        details: { status: refusal.statusCode, reason: refusal.message },
      },
    );
    // The answer continues the refused message's trace.
    const parent = messageContext(message);
    const reply = signMessage(parent ? withMessageContext(unsigned, parent) : unsigned, this.signing);
    try {
      const res = await client.publish(reply);
      if (res.status !== 202)
        this.log.warn(
          { relay: client.base, status: res.status, body: res.text },
          "the relay refused the error-phase answer",
        );
      return true;
    } catch (err) {
      this.log.warn(
        { relay: client.base, err: (err as Error).message },
        "could not publish the error-phase answer; will retry",
      );
      return false;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    if (this.timer) clearTimeout(this.timer);
    await Promise.all([this.running, this.following]);
  }
}

/**
 * The capabilities.update message (spec 6, 9.2): the new document, signed, as a body part named
 * `capabilities`, marked as sent automatically (extension `auto-submitted`, so that no
 * application answers it), to a topic or to one peer. `messageId` makes it idempotent.
 */
export function capabilityUpdate(opts: {
  to: string;
  signing: SigningKey;
  document: CapabilityDocument;
  displayName?: string;
  messageId?: string;
}): Message {
  const message = composeMessage(
    {
      to: opts.to,
      phase: "context",
      subject: CAPABILITIES_TOPIC,
      extensions: { "auto-submitted": "auto-generated" },
      body: {
        text: `${opts.signing.agentId} has updated its capabilities.`,
        parts: [{ content_type: "application/json", name: "capabilities", content: opts.document }],
      },
    },
    { agentId: opts.signing.agentId, displayName: opts.displayName },
  );
  if (opts.messageId) message.headers.message_id = opts.messageId;
  return signMessage(message, opts.signing);
}

/**
 * The message_id of the capabilities.update of one change of the document to one recipient (a
 * peer, or the topic): from what the document says, its `updated` and the recipient, so that
 * announcing the same change again (a start after a crash half-way) is one message,
 * deduplicated by the outbox and by the relays, and another document is another message.
 */
export function capabilityUpdateId(document: CapabilityDocument, to: string): string {
  const digest = createHash("sha256")
    .update(`${capabilityDocumentHash(document)}\n${document.updated ?? ""}\n${to}`)
    .digest("hex")
    .slice(0, 32);
  return `msg:capabilities-${digest}`;
}

/**
 * The capabilities.update announcement (spec 6): the new document, signed, to the topic on each
 * relay. A relay that cannot be reached or answers for later (5xx, 408/425/429) is asked again
 * with backoff (1 s doubling to 5 min, never sooner than its Retry-After) until it takes it or
 * `signal` stops the runtime; a final refusal is logged and not retried.
 */
export async function announceCapabilities(opts: {
  urls: string[];
  signing: SigningKey;
  http: HttpClient;
  document: CapabilityDocument;
  displayName?: string;
  log: Logger;
  signal?: AbortSignal;
  initialMs?: number;
}): Promise<void> {
  const to = `topic:${CAPABILITIES_TOPIC}`;
  const message = capabilityUpdate({
    to,
    signing: opts.signing,
    document: opts.document,
    displayName: opts.displayName,
    messageId: capabilityUpdateId(opts.document, to),
  });
  const toOne = async (url: string) => {
    const client = new RelayClient(url, opts.signing, opts.http);
    await retry(
      async () => {
        const res = await client.publish(message);
        const outcome = classify(res.status, res.retryAfter, url, res.text);
        if (outcome.kind === "retry") {
          if (outcome.afterMs ?? outcome.notBeforeMs)
            await sleep(outcome.afterMs ?? outcome.notBeforeMs!, undefined, { signal: opts.signal });
          throw new Error(`answered ${outcome.error}`);
        }
        if (outcome.kind === "failed")
          opts.log.warn(
            { relay: url, status: res.status, body: res.text },
            "the capabilities.update announcement was refused",
          );
        else opts.log.info({ relay: url }, "announced the new capability document on capabilities.update");
      },
      {
        signal: opts.signal,
        initialMs: opts.initialMs ?? 1000,
        maxMs: 300_000,
        onError: (err, retryInMs) =>
          opts.log.warn({ relay: url, err: err.message, retryInMs }, "could not announce the capability document"),
      },
    ).catch((err) => {
      if (!opts.signal?.aborted) throw err;
    });
  };
  await Promise.all(opts.urls.map(toOne));
}

/**
 * The capabilities.update to each peer of a recent conversation (Conversations.recentPeers),
 * straight to its inbox: queued in the outbox, so delivered and retried like any message (relay
 * fallback included). The message_id is capabilityUpdateId(), so queueing the same change again
 * (a restart half-way) queues nothing new.
 */
export async function tellPeersCapabilities(opts: {
  peers: string[];
  signing: SigningKey;
  document: CapabilityDocument;
  displayName?: string;
  outbox: Pick<OutboxStore, "enqueue">;
  log: Logger;
}): Promise<number> {
  let queued = 0;
  for (const peer of opts.peers) {
    const message = capabilityUpdate({
      to: peer,
      signing: opts.signing,
      document: opts.document,
      displayName: opts.displayName,
      messageId: capabilityUpdateId(opts.document, peer),
    });
    const { duplicate } = await opts.outbox.enqueue(message);
    if (!duplicate) queued++;
  }
  if (opts.peers.length)
    opts.log.info(
      { peers: opts.peers.length, queued },
      "queued capabilities.update for the peers of recent conversations",
    );
  return queued;
}
