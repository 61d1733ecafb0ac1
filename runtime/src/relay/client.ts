import type { HttpClient, HttpResult } from "../net/http-client.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import type { Message } from "../protocol/message.ts";
import type { SigningKey } from "../protocol/signing.ts";
import type { DeadLetter } from "./mailbox.ts";
import type { SubscriptionState } from "./subscriptions.ts";

export type { DeadLetter, SubscriptionState };

/** What the client needs of an HTTPS client: HttpClient, or any other with its request(). */
export type RelayHttp = Pick<HttpClient, "request">;

export class RelayError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * A relay's HTTPS API as one agent sees it: every request signed with the agent's key
 * (RFC 9421, see protocol/http-signatures.ts). For the agent's sending side (relay fallback,
 * relay-only agents, announcements on topics) and for command-line tools.
 */
export class RelayClient {
  readonly base: string;
  private readonly key: SigningKey;
  private readonly http: RelayHttp;

  constructor(base: string, key: SigningKey, http: RelayHttp) {
    this.base = base.replace(/\/+$/, "");
    this.key = key;
    this.http = http;
  }

  async request(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<HttpResult> {
    const url = `${this.base}${path}`;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const headers = await signRequest(
      { method, url, body: text, headers: { accept: "application/json", ...(text ? { "content-type": "application/json" } : {}), ...extra } },
      this.key,
    );
    return this.http.request(url, { method, headers, body: text });
  }

  async publish(message: Message): Promise<{ status: number; text: string; retryAfter: string | null }> {
    const res = await this.request("POST", "/relay/publish", message);
    return { status: res.status, text: res.text, retryAfter: res.headers.get("retry-after") };
  }

  /** Waiting messages, oldest first; `next` is the cursor of the following page. */
  async pull(opts: { limit?: number; after?: number } = {}): Promise<{ messages: Message[]; next: number | undefined }> {
    const q = new URLSearchParams();
    if (opts.limit) q.set("limit", String(opts.limit));
    if (opts.after) q.set("after", String(opts.after));
    const res = await this.request("GET", `/relay/messages${q.size ? `?${q}` : ""}`);
    const body = this.json<Message[]>(res);
    const next = res.headers.get("ifp-next-after");
    return { messages: body, next: next ? Number(next) : undefined };
  }

  async ack(messageId: string): Promise<boolean> {
    const res = await this.request("DELETE", `/relay/messages/${encodeURIComponent(messageId)}`);
    if (res.status === 404) return false;
    if (res.status !== 204) this.json(res);
    return true;
  }

  /** Acknowledge many messages in one request. */
  async ackMany(messageIds: string[]): Promise<{ acknowledged: string[]; not_found: string[] }> {
    return this.json(await this.request("POST", "/relay/messages/ack", { message_ids: messageIds }));
  }

  subscribe(topics: string[]): Promise<SubscriptionState> {
    return this.request("POST", "/relay/subscribe", { subscribe: { topics, agent: this.key.agentId } }).then((r) => this.json(r));
  }

  unsubscribe(topics: string[]): Promise<SubscriptionState> {
    return this.request("POST", "/relay/subscribe", { unsubscribe: { topics, agent: this.key.agentId } }).then((r) => this.json(r));
  }

  /** Register (or with null remove) the webhook the relay pushes this agent's messages to. */
  registerWebhook(webhook: string | null): Promise<SubscriptionState> {
    return this.request("POST", "/relay/subscribe", { push: { webhook, agent: this.key.agentId } }).then((r) => this.json(r));
  }

  subscriptions(): Promise<SubscriptionState> {
    return this.request("GET", "/relay/subscribe").then((r) => this.json(r));
  }

  async deadLetters(opts: { limit?: number; after?: number } = {}): Promise<DeadLetter[]> {
    const q = new URLSearchParams();
    if (opts.limit) q.set("limit", String(opts.limit));
    if (opts.after) q.set("after", String(opts.after));
    const res = await this.request("GET", `/relay/dead-letters${q.size ? `?${q}` : ""}`);
    return this.json<{ dead_letters: DeadLetter[] }>(res).dead_letters;
  }

  async removeDeadLetter(messageId: string): Promise<boolean> {
    const res = await this.request("DELETE", `/relay/dead-letters/${encodeURIComponent(messageId)}`);
    if (res.status === 404) return false;
    if (res.status !== 204) this.json(res);
    return true;
  }

  private json<T>(res: HttpResult): T {
    let body: unknown;
    try {
      body = JSON.parse(res.text);
    } catch {
      body = undefined;
    }
    if (res.status >= 400) {
      const e = (body ?? {}) as { code?: string; message?: string };
      throw new RelayError(res.status, e.code ?? "unknown", e.message ?? `relay answered ${res.status}`);
    }
    return body as T;
  }
}
