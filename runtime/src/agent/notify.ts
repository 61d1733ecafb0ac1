// Notifier: tells the agent's human of a message that could not be delivered (a Kubernetes Event
// on the Agent, a POST to spec.notify.url, a log line) and of a problem of the runtime's own (the
// status summary and a Warning Event).
import type { Logger } from "pino";
import type { EventRecorder } from "../kube/events.ts";
import type { LastError } from "../nats/last-error.ts";
import { retry } from "../util/retry.ts";
import type { HttpClient } from "../net/http-client.ts";
import type { Agent } from "../resources/agent.ts";
import type { DeliveryRecord, RecipientState } from "./delivery-state.ts";

export interface Notification {
  event: "undeliverable" | "failed" | "dead_letter";
  agent_id: string;
  message_id: string;
  recipient?: string;
  reason: string;
  attempts?: number;
  queued_at?: string;
  at: string;
}

/**
 * Tells the agent's human that a message could not be delivered: a Kubernetes Event on the
 * Agent (in a cluster), a POST to spec.notify.url when set, and a log line. The metric and
 * the dead-letter entry are written by the delivery loop itself.
 */
export class Notifier {
  private readonly agent: Agent;
  private readonly events: EventRecorder | undefined;
  private readonly http: HttpClient;
  private readonly log: Logger;
  private readonly lastError: Pick<LastError, "record"> | undefined;

  /**
   * `events` is undefined outside a cluster (no Events then); `http` is the runtime's one client;
   * `lastError` keeps the newest warning for the status summary.
   */
  constructor(
    agent: Agent,
    events: EventRecorder | undefined,
    http: HttpClient,
    log: Logger,
    lastError?: Pick<LastError, "record">,
  ) {
    this.agent = agent;
    this.events = events;
    this.http = http;
    this.log = log;
    this.lastError = lastError;
  }

  /** A problem of the runtime's own (a stream gone missing, replicas not applied): status summary and a Warning Event. */
  trouble(reason: string, message: string): void {
    void this.warn(reason, message).catch((err: unknown) =>
      this.log.debug({ err: String(err) }, "could not record a Warning Event"),
    );
  }

  private async warn(reason: string, message: string): Promise<void> {
    this.lastError?.record(`${reason}: ${message}`);
    await this.events?.record(this.agent, "Warning", reason, message);
  }

  async undeliverable(record: DeliveryRecord, r: RecipientState): Promise<void> {
    const event: Notification = {
      event: r.state === "failed" ? "failed" : "undeliverable",
      agent_id: this.agent.spec.agentId,
      message_id: record.message_id,
      recipient: r.agent,
      reason: r.last_error ?? "delivery failed",
      attempts: r.attempts,
      queued_at: record.queued_at,
      at: new Date().toISOString(),
    };
    this.log.error(event, "message could not be delivered");
    await this.warn(
      r.state === "failed" ? "DeliveryRefused" : "Undeliverable",
      `message ${record.message_id} to ${r.agent}: ${event.reason} (${r.attempts} attempts since ${record.queued_at})`,
    );
    await this.post(event);
  }

  async handlerDeadLetter(messageId: string, reason: string): Promise<void> {
    await this.warn("HandlerDeadLetter", `message ${messageId} was not taken by the handler: ${reason}`);
    await this.post({
      event: "dead_letter",
      agent_id: this.agent.spec.agentId,
      message_id: messageId,
      reason,
      at: new Date().toISOString(),
    });
  }

  private async post(n: Notification): Promise<void> {
    const url = this.agent.spec.notify?.url;
    if (!url) return;
    const accepted = await retry(
      async () => {
        const res = await this.http.request(url, {
          // The owner's own notification endpoint.
          trusted: true,
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(n),
          timeoutMs: 10_000,
        });
        // A redirect is not followed: like any other non-2xx it is tried again, then reported.
        if (res.status < 200 || res.status >= 300) throw new Error(`answered ${res.status}`);
      },
      { attempts: 3, initialMs: 500 },
    ).then(
      () => true,
      () => false,
    );
    if (accepted) return;
    this.log.warn({ url, message_id: n.message_id }, "the notification webhook did not accept the notification");
  }
}
