import type { Logger } from "pino";
import type { HttpClient } from "../net/http-client.ts";
import { Message } from "../protocol/message.ts";
import { describeIssues } from "../contract/issues.ts";
import { signMessage, type SigningKey } from "../protocol/signing.ts";
import type { Verifier } from "../protocol/verify.ts";
import { RelayClient } from "../relay/client.ts";
import type { RuntimeMetrics } from "../server/metrics.ts";
import { composeMessage } from "./compose.ts";
import type { Outcome, RelayPublisher } from "./outbound.ts";
import { classify } from "./outbound.ts";
import type { CapabilityDocument } from "../protocol/documents.ts";

/** Relay fallback of the outbound delivery: publish through a relay, classified like an inbox answer. */
export function relayPublisher(signing: SigningKey, http: HttpClient): RelayPublisher {
  return {
    async publish(relayUrl: string, message: Message): Promise<Outcome> {
      const via = `relay:${relayUrl}`;
      try {
        const res = await new RelayClient(relayUrl, signing, http).publish(message);
        return classify(res.status, res.retryAfter, via, res.text);
      } catch (err) {
        return { kind: "retry", via, error: `relay unreachable: ${(err as Error).message}` };
      }
    },
  };
}

/**
 * An agent's mailboxes on its own relays (spec.relay.urls): read every pollInterval, each
 * message's signature verified after relay delivery (spec 5.4), accepted into the inbox exactly
 * like a direct POST (deduplicated, inspected, handed to the handler), trace kept, and only
 * then acknowledged at the relay. A message whose signature fails is acknowledged and dropped,
 * with a log line and a metric: the relay or the sender tampered with it.
 */
export class RelayIntake {
  private readonly clients: RelayClient[];
  private readonly verifier: Verifier;
  private readonly requireSignature: boolean;
  private readonly accept: (raw: unknown, message: Message, verified: ReturnType<Verifier["verify"]>) => Promise<unknown>;
  private readonly log: Logger;
  private readonly metrics: RuntimeMetrics;
  private readonly intervalMs: number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(deps: {
    urls: string[];
    signing: SigningKey;
    http: HttpClient;
    verifier: Verifier;
    requireSignature: boolean;
    accept: (raw: unknown, message: Message, verified: ReturnType<Verifier["verify"]>) => Promise<unknown>;
    intervalMs: number;
    log: Logger;
    metrics: RuntimeMetrics;
  }) {
    this.clients = deps.urls.map((u) => new RelayClient(u, deps.signing, deps.http));
    this.verifier = deps.verifier;
    this.requireSignature = deps.requireSignature;
    this.accept = deps.accept;
    this.intervalMs = deps.intervalMs;
    this.log = deps.log;
    this.metrics = deps.metrics;
  }

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.running = this.pollAll().finally(() => {
        if (!this.stopped) this.timer = setTimeout(tick, this.intervalMs);
      });
    };
    tick();
  }

  /** Read every relay once; resolves when all waiting messages have been taken. */
  async pollAll(): Promise<void> {
    await Promise.all(this.clients.map((c) => this.poll(c)));
  }

  private async poll(client: RelayClient): Promise<void> {
    for (let page = 0; page < 50 && !this.stopped; page++) {
      let messages: Message[];
      try {
        ({ messages } = await client.pull({ limit: 100 }));
      } catch (err) {
        this.log.warn({ relay: client.base, err: (err as Error).message }, "could not read the relay mailbox");
        return;
      }
      if (!messages.length) return;
      for (const raw of messages) {
        const parsed = Message.safeParse(raw);
        const id = (raw as { headers?: { message_id?: string } }).headers?.message_id ?? "";
        if (!parsed.success) {
          this.log.warn({ relay: client.base, messageId: id, problem: describeIssues(parsed.error) }, "dropping an invalid message from the relay");
          await client.ack(id).catch(() => false);
          continue;
        }
        let verified;
        try {
          verified = this.verifier.verify(parsed.data, this.requireSignature);
        } catch (err) {
          this.metrics.relay.inc({ operation: "intake", result: "invalid_signature" });
          this.log.warn({ relay: client.base, messageId: id, err: (err as Error).message }, "dropping a relayed message whose signature does not verify");
          await client.ack(id).catch(() => false);
          continue;
        }
        try {
          await this.accept(raw, parsed.data, verified);
        } catch (err) {
          this.log.warn({ relay: client.base, messageId: id, err: (err as Error).message }, "could not accept a relayed message; will retry");
          return; // leave it at the relay
        }
        await client.ack(id).catch((err: Error) => this.log.warn({ messageId: id, err: err.message }, "could not acknowledge at the relay"));
        this.metrics.relay.inc({ operation: "intake", result: "accepted" });
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}

/** The capabilities.update announcement (spec 6): the new document, signed, to the topic on each relay. */
export async function announceCapabilities(opts: { urls: string[]; signing: SigningKey; http: HttpClient; document: CapabilityDocument; displayName?: string; log: Logger }): Promise<void> {
  const message = signMessage(
    composeMessage(
      {
        to: "topic:capabilities.update",
        phase: "context",
        text: `${opts.signing.agentId} has updated its capabilities.`,
        body: { parts: [{ content_type: "application/json", name: "capabilities", content: opts.document }] },
      },
      { agentId: opts.signing.agentId, displayName: opts.displayName },
    ),
    opts.signing,
  );
  for (const url of opts.urls) {
    try {
      const res = await new RelayClient(url, opts.signing, opts.http).publish(message);
      if (res.status !== 202) opts.log.warn({ relay: url, status: res.status, body: res.text }, "the capabilities.update announcement was refused");
      else opts.log.info({ relay: url }, "announced the new capability document on capabilities.update");
    } catch (err) {
      opts.log.warn({ relay: url, err: (err as Error).message }, "could not announce the capability document");
    }
  }
}
