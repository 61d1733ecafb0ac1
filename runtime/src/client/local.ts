/**
 * Typed client of the runtime's local application API (docs/local-api.openapi.yaml), for an
 * application in the agent's pod. Plain fetch, no dependencies.
 *
 *   const ifp = new LocalApiClient("http://127.0.0.1:8081");
 *   const { message_id } = await ifp.send({ to: "bob-agent", phase: "greeting", text: "Hello" });
 *   const state = await ifp.status(message_id);
 */
import type { DeliveryRecord } from "../agent/delivery-state.ts";
import type { OutboxRequest } from "../agent/compose.ts";
import type { PeerCapabilities } from "../agent/inbound.ts";
import type { PeerCapabilitiesView } from "../agent/peer-capabilities.ts";
import type { ErrorBody } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";

export type { DeliveryRecord, OutboxRequest, PeerCapabilities, PeerCapabilitiesView, Message };

export interface Queued {
  status: "queued";
  message_id: string;
  /** True when this message_id had been queued before (nothing new was queued). */
  duplicate: boolean;
  /** The message as signed and queued. */
  message: Message;
}

/** What the runtime POSTs to spec.handler.url for each accepted message. */
export interface HandlerDelivery {
  body: Message;
  headers: {
    "idempotency-key": string;
    "ifp-message-id": string;
    "ifp-sender": string;
    /** IFP-5 authentication level, "-1" (unsigned) to "3" (docs/identity.md). */
    "ifp-auth-level": string;
    /** Where the key came from: none, introduction, identity-document, peers or did:key. */
    "ifp-auth-source": string;
    "ifp-delivery-attempt": string;
  };
}

export class LocalApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, body: Partial<ErrorBody>) {
    super(body.message ?? `local API answered ${status}`);
    this.status = status;
    this.code = body.code ?? "unknown";
  }
}

export class LocalApiClient {
  private readonly base: string;
  constructor(base = process.env.IFP_LOCAL_API ?? "http://127.0.0.1:8081") {
    this.base = base.replace(/\/+$/, "");
  }

  /** Queue a message: the short form ({to, phase, text, in_reply_to, …}) or a whole unsigned IFP-4 message. */
  send(request: OutboxRequest | Omit<Message, "security">): Promise<Queued> {
    return this.call("POST", "/outbox", request);
  }

  /** Delivery state of a queued message, per recipient. */
  status(messageId: string): Promise<DeliveryRecord> {
    return this.call("GET", `/outbox/${encodeURIComponent(messageId)}`);
  }

  /** Messages that ended failed (a 4xx) or undeliverable (the retry window passed). */
  async deadLetters(limit = 100): Promise<DeliveryRecord[]> {
    return (await this.call<{ dead_letters: DeliveryRecord[] }>("GET", `/dead-letters?limit=${limit}`)).dead_letters;
  }

  /** What the runtime knows of a peer's capabilities (endpoint, announcement, greeting); `refresh` asks the endpoint again. */
  peerCapabilities(agentId: string, opts: { refresh?: boolean } = {}): Promise<PeerCapabilitiesView> {
    return this.call("GET", `/peers/${encodeURIComponent(agentId)}/capabilities${opts.refresh ? "?refresh=true" : ""}`);
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.base}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = (await res.json().catch(() => ({}))) as T & Partial<ErrorBody>;
    if (!res.ok) throw new LocalApiError(res.status, json);
    return json;
  }
}
