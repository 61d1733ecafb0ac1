import { hostname } from "node:os";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
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

/** Kubernetes Events on the Agent, when the runtime can reach the API server. */
export class EventRecorder {
  private readonly api: CoreV1Api;
  private readonly agent: Agent;
  private readonly log: Logger;

  constructor(kc: KubeConfig, agent: Agent, log: Logger) {
    this.api = kc.makeApiClient(CoreV1Api);
    this.agent = agent;
    this.log = log;
  }

  /** In a pod (service account) or with an explicit kubeconfig; otherwise no events. */
  static create(agent: Agent, log: Logger, kubeconfig?: string): EventRecorder | undefined {
    if (!agent.metadata.name || !agent.metadata.namespace) return undefined;
    const kc = new KubeConfig();
    if (kubeconfig) kc.loadFromFile(kubeconfig);
    else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
    else return undefined;
    return new EventRecorder(kc, agent, log);
  }

  async warn(reason: string, message: string): Promise<void> {
    const { name, namespace } = this.agent.metadata;
    const now = new Date();
    try {
      await this.api.createNamespacedEvent({
        namespace: namespace!,
        body: {
          metadata: { name: `${name}.${now.getTime().toString(16)}${Math.floor(Math.random() * 0xfff).toString(16)}`, namespace },
          involvedObject: {
            apiVersion: "ifp.dev/v1alpha1",
            kind: "Agent",
            name,
            namespace,
            uid: (this.agent.metadata as { uid?: string }).uid,
          },
          reason,
          message: message.slice(0, 1024),
          type: "Warning",
          source: { component: "ifp-runtime", host: hostname() },
          reportingComponent: "ifp.dev/ifp-runtime",
          reportingInstance: hostname(),
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      });
    } catch (err) {
      this.log.warn({ err: (err as Error).message, reason }, "could not record a Kubernetes event");
    }
  }
}

/**
 * Tells the agent's human that a message could not be delivered: a Kubernetes Event on the
 * Agent (in a cluster), a POST to spec.notify.url when set, and a log line. The metric and
 * the dead-letter entry are written by the delivery loop itself.
 */
export class Notifier {
  private readonly agent: Agent;
  private readonly events: EventRecorder | undefined;
  private readonly log: Logger;

  constructor(agent: Agent, events: EventRecorder | undefined, log: Logger) {
    this.agent = agent;
    this.events = events;
    this.log = log;
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
    await this.events?.warn(
      r.state === "failed" ? "DeliveryRefused" : "Undeliverable",
      `message ${record.message_id} to ${r.agent}: ${event.reason} (${r.attempts} attempts since ${record.queued_at})`,
    );
    await this.post(event);
  }

  async handlerDeadLetter(messageId: string, reason: string): Promise<void> {
    await this.events?.warn("HandlerDeadLetter", `message ${messageId} was not taken by the handler: ${reason}`);
    await this.post({ event: "dead_letter", agent_id: this.agent.spec.agentId, message_id: messageId, reason, at: new Date().toISOString() });
  }

  private async post(n: Notification): Promise<void> {
    const url = this.agent.spec.notify?.url;
    if (!url) return;
    for (let attempt = 1; attempt <= 3; attempt++) {
      try {
        const res = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(n),
          signal: AbortSignal.timeout(10_000),
        });
        await res.body?.cancel().catch(() => {});
        if (res.ok) return;
      } catch {
        // retried below
      }
      await new Promise((r) => setTimeout(r, 500 * attempt));
    }
    this.log.warn({ url, messageId: n.message_id }, "the notification webhook did not accept the notification");
  }
}
