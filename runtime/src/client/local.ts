// LocalApiClient, the typed client of the runtime's local API for an application, with the wire
// types it returns and the check of a hand-off's signature for an application behind spec.handler.
/**
 * Typed client of the runtime's local application API (docs/local-api.openapi.yaml). Node's
 * http and https modules, no dependencies.
 *
 * In the agent's pod (loopback, no token):
 *   const ifp = new LocalApiClient("http://127.0.0.1:8081");
 * From another pod, through the Service <agent>-local-api (spec.localApi.service):
 *   const ifp = new LocalApiClient("https://alice-local-api.team.svc:9443", {
 *     token: readFileSync("/etc/ifp/local-api/token", "utf8"),   // the Secret <agent>-local-api
 *     ca: readFileSync("/etc/ifp/trust/ca.crt", "utf8"),         // the ConfigMap <agent>-trust
 *   });
 *
 *   const { message_id } = await ifp.send({ to: "bob-agent", phase: "greeting", text: "Hello" });
 *   for await (const m of ifp.messages()) { handle(m.message); await ifp.ack(m.message_id); }
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { sseEvents } from "../net/sse.ts";
import type { ErrorBody } from "../protocol/errors.ts";
import type {
  AckResult,
  Circuits,
  ConversationState,
  DeliveryRecord,
  InboundDelivery,
  OutboxRequest,
  PeerCapabilities,
  PeerCapabilitiesView,
  Queued,
  RedriveAll,
  Redriven,
} from "../protocol/local-api.ts";
import type { Message } from "../protocol/message.ts";

export type {
  AckResult,
  ConversationState,
  DeliveryRecord,
  InboundDelivery,
  OutboxRequest,
  PeerCapabilities,
  PeerCapabilitiesView,
  Message,
  Queued,
  RedriveAll,
  Redriven,
};
export {
  HANDOFF_SCHEME_V2,
  HANDOFF_SIGNATURE_HEADER,
  HANDOFF_SIGNED_HEADERS,
  HANDOFF_TOLERANCE_S,
  handoffSignatureProblem,
  handoffSigningBase,
  signHandoff,
  type HandoffHeaders,
  type RequestHeaders,
} from "../protocol/handoff-signature.ts";

/**
 * What the runtime POSTs to spec.handler.url for each accepted message. Believe the headers only
 * after handoffSignatureProblem() found the request signed: the signature covers all of them.
 */
export interface HandlerDelivery {
  body: Message;
  headers: {
    "idempotency-key": string;
    "ifp-message-id": string;
    "ifp-sender": string;
    /** IFP-5 authentication level, "-1" (unsigned) to "2" (docs/identity.md). */
    "ifp-auth-level": string;
    /** Where the key came from: none, introduction, identity-document, peers or did:key. */
    "ifp-auth-source": string;
    /** The scheme the body was encrypted under end to end; absent for a clear message. */
    "ifp-encrypted"?: string;
    "ifp-delivery-attempt": string;
    /** `t=<unix seconds>,v2=<hex>` (docs/agent.md#hand-off-signature); absent when the runtime has no hand-off secret. */
    "ifp-handoff-signature"?: string;
  };
}

export interface LocalApiClientOptions {
  /** The bearer token of the TLS listener (Secret <agent>-local-api, key token); not needed on loopback. */
  token?: string;
  /** PEM CA bundle that signed the runtime's serving certificate (https:// only). */
  ca?: string | Buffer;
  /** Per request (not for the stream); default 30 s. */
  timeoutMs?: number;
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
  private readonly opts: LocalApiClientOptions;
  constructor(base = process.env.IFP_LOCAL_API ?? "http://127.0.0.1:8081", opts: LocalApiClientOptions = {}) {
    this.base = base.replace(/\/+$/, "");
    this.opts = { ...opts, token: opts.token?.trim() };
  }

  /** Queue a message: the short form ({to, phase, text, in_reply_to, …}) or a whole unsigned IFP-4 message. */
  send(request: OutboxRequest | Omit<Message, "security">): Promise<Queued> {
    return this.call("POST", "/outbox", request);
  }

  /** Delivery state of a queued message, per recipient. */
  status(messageId: string): Promise<DeliveryRecord> {
    return this.call("GET", `/outbox/${encodeURIComponent(messageId)}`);
  }

  /** What the runtime knows of a conversation: one record per peer (GET /conversations/{id}). */
  conversation(conversationId: string): Promise<{ conversation_id: string; peers: ConversationState[] }> {
    return this.call("GET", `/conversations/${encodeURIComponent(conversationId)}`);
  }

  /** Messages that ended failed (a 4xx) or undeliverable (the retry window passed). */
  async deadLetters(limit = 100): Promise<DeliveryRecord[]> {
    return (await this.call<{ dead_letters: DeliveryRecord[] }>("GET", `/dead-letters?limit=${limit}`)).dead_letters;
  }

  /** Send one dead letter again: back into the outbox with a fresh attempt count (404 unknown, 409 not a dead letter). */
  redrive(messageId: string): Promise<Redriven> {
    return this.call("POST", `/dead-letters/${encodeURIComponent(messageId)}/redrive`);
  }

  /** Send up to `limit` dead letters again; those not queued again are listed with the reason. */
  redriveAll(limit = 100): Promise<RedriveAll> {
    return this.call("POST", `/dead-letters/redrive?limit=${limit}`);
  }

  /** The destinations of outbound deliveries whose circuit breaker is not closed. */
  circuits(): Promise<Circuits> {
    return this.call("GET", "/circuits");
  }

  /** What the runtime knows of a peer's capabilities (endpoint, announcement, greeting); `refresh` asks the endpoint again. */
  peerCapabilities(agentId: string, opts: { refresh?: boolean } = {}): Promise<PeerCapabilitiesView> {
    return this.call("GET", `/peers/${encodeURIComponent(agentId)}/capabilities${opts.refresh ? "?refresh=true" : ""}`);
  }

  /** Up to `limit` inbound messages (waiting up to `waitSeconds` when fewer are there); acknowledge each within 60 s. */
  async pull(limit = 10, waitSeconds = 1): Promise<InboundDelivery[]> {
    return (await this.call<{ messages: InboundDelivery[] }>("GET", `/messages?limit=${limit}&wait=${waitSeconds}`))
      .messages;
  }

  /** Acknowledge one inbound message: it is not handed out again. */
  async ack(messageId: string): Promise<void> {
    await this.call("POST", `/messages/${encodeURIComponent(messageId)}/ack`);
  }

  /** Acknowledge several at once. */
  ackMany(messageIds: string[]): Promise<AckResult> {
    return this.call("POST", "/messages/ack", { message_ids: messageIds });
  }

  /**
   * Inbound messages as they arrive (GET /messages/stream), in order, until `signal` aborts or
   * the loop is left. A dropped stream is opened again after `retryMs` with Last-Event-ID, so
   * what this reader already got and has not acknowledged is not sent twice; acknowledge each
   * message with ack() once it is handled. Errors other than a dropped connection are thrown.
   */
  async *messages(
    opts: { signal?: AbortSignal; lastEventId?: number; retryMs?: number } = {},
  ): AsyncGenerator<InboundDelivery> {
    let last = opts.lastEventId;
    while (!opts.signal?.aborted) {
      const res = await this.open(
        "GET",
        "/messages/stream",
        undefined,
        last ? { "last-event-id": String(last) } : {},
        opts.signal,
      ).catch((err: unknown) => {
        if (opts.signal?.aborted) return undefined;
        if (err instanceof LocalApiError) throw err;
        return null;
      });
      if (res === undefined) return;
      if (res) {
        if (res.statusCode !== 200) throw new LocalApiError(res.statusCode ?? 0, await readJson(res));
        try {
          for await (const event of sseEvents(res)) {
            if (event.event !== "message") continue;
            const d = JSON.parse(event.data) as InboundDelivery;
            last = d.seq;
            yield d;
          }
        } catch {
          // the connection dropped: open it again below
        } finally {
          res.destroy();
        }
      }
      if (opts.signal?.aborted) return;
      await new Promise((r) => setTimeout(r, opts.retryMs ?? 1_000));
    }
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.open(method, path, body, {});
    const json = (await readJson(res)) as T & Partial<ErrorBody>;
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) throw new LocalApiError(status, json);
    return json;
  }

  private open(
    method: string,
    path: string,
    body: unknown,
    extra: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<IncomingMessage> {
    const url = new URL(`${this.base}${path}`);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = {
      accept: path.endsWith("/stream") ? "text/event-stream" : "application/json",
      ...extra,
    };
    if (payload !== undefined) headers["content-type"] = "application/json";
    if (this.opts.token) headers.authorization = `Bearer ${this.opts.token}`;
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(
        url,
        { method, headers, ...(url.protocol === "https:" && this.opts.ca ? { ca: this.opts.ca } : {}), signal },
        resolve,
      );
      if (!path.endsWith("/stream"))
        req.setTimeout(this.opts.timeoutMs ?? 30_000, () => req.destroy(new Error(`${method} ${path} timed out`)));
      req.on("error", reject);
      req.end(payload);
    });
  }
}

async function readJson(res: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  if (!text) return {};
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    return {};
  }
}

export { sseEvents };
