// RelayClient: a relay's HTTPS API as one agent uses it, every request signed with the agent's
// key (RFC 9421) — publish, read and acknowledge its mailbox, subscriptions, webhook, dead letters.
import type { HttpClient, HttpResult } from "./http-client.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import type { Message } from "../protocol/message.ts";
import type {
  AckResponse,
  DeadLetter,
  PageQuery,
  PublishBatchResponse,
  SubscribeRequest,
  SubscribeResponse,
} from "../protocol/relay-api.ts";
import type { SigningKey } from "../protocol/signing.ts";
import { ResponseTooLarge } from "./http-client.ts";
import { sseEvents } from "./sse.ts";

/**
 * The most a page of messages or dead letters may weigh: above the largest message a relay
 * takes (16 MiB), with room for its trace. A fuller page is read again in smaller pages.
 */
export const MAX_PAGE_BYTES = 32 * 1024 * 1024;

export type { DeadLetter, SubscribeResponse };

/** What the client needs of an HTTPS client: HttpClient, or any other with its request(). */
export type RelayHttp = Pick<HttpClient, "request"> & Partial<Pick<HttpClient, "stream">>;

export class RelayError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A relay's answer as JSON, or undefined when it is not JSON. */
function parsedBody(text: string | undefined): unknown {
  try {
    return JSON.parse(text ?? "");
  } catch {
    return undefined;
  }
}

/**
 * A relay's refusal of a request: the `code` and `message` of its error body, or `fallback`'s
 * where the body (not JSON, or without them) says nothing.
 */
export function relayRefusal(
  status: number,
  text: string | undefined,
  fallback: { code: string; message: string },
): RelayError {
  const body = (parsedBody(text) ?? {}) as { code?: unknown; message?: unknown };
  return new RelayError(
    status,
    typeof body.code === "string" ? body.code : fallback.code,
    typeof body.message === "string" ? body.message : fallback.message,
  );
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
  private readonly timeoutMs: number | undefined;

  /** `timeoutMs`: how long each request may take (the HTTP client's own default without it). */
  constructor(base: string, key: SigningKey, http: RelayHttp, opts: { timeoutMs?: number } = {}) {
    this.base = base.replace(/\/+$/, "");
    this.key = key;
    this.http = http;
    this.timeoutMs = opts.timeoutMs;
  }

  async request(
    method: string,
    path: string,
    body?: unknown,
    extra: Record<string, string> = {},
    maxBytes?: number,
  ): Promise<HttpResult> {
    const url = `${this.base}${path}`;
    const text = body === undefined ? undefined : JSON.stringify(body);
    const headers = await signRequest(
      {
        method,
        url,
        body: text,
        headers: { accept: "application/json", ...(text ? { "content-type": "application/json" } : {}), ...extra },
      },
      this.key,
    );
    return this.http.request(url, {
      method,
      headers,
      body: text,
      ...(maxBytes ? { maxBytes } : {}),
      ...(this.timeoutMs ? { timeoutMs: this.timeoutMs } : {}),
    });
  }

  /**
   * The agent's mailbox as it fills (GET /relay/events, Server-Sent Events): waiting copies
   * first, then new ones, each with its stream sequence (`seq`, the resume cursor). Nothing is
   * removed until acknowledged. Ends when the relay ends the stream or `signal` aborts; throws
   * RelayError for a refusal.
   */
  async *events(opts: { after?: number; signal: AbortSignal }): AsyncGenerator<{ seq: number; message: unknown }> {
    if (!this.http.stream) throw new Error("this HTTP client cannot read a stream");
    const url = `${this.base}/relay/events`;
    const extra: Record<string, string> = opts.after ? { "last-event-id": String(opts.after) } : {};
    const headers = await signRequest(
      { method: "GET", url, headers: { accept: "text/event-stream", ...extra } },
      this.key,
    );
    const res = await this.http.stream(url, { method: "GET", headers, signal: opts.signal });
    if (!res.body)
      throw relayRefusal(res.status, res.text, {
        code: "unexpected_status",
        message: `the relay answered ${res.status} to GET /relay/events`,
      });
    for await (const event of sseEvents(res.body, MAX_PAGE_BYTES)) {
      if (event.event !== "message" || !event.id || !/^\d{1,15}$/.test(event.id)) continue;
      let message: unknown;
      try {
        message = JSON.parse(event.data);
      } catch {
        continue; // the pull loop reads it and says what is wrong with it
      }
      yield { seq: Number(event.id), message };
    }
  }

  /** Publish a message; `recipients` narrows it to those of its direct recipients (`?recipient=`). */
  async publish(
    message: Message,
    recipients?: string[],
  ): Promise<{ status: number; text: string; retryAfter: string | null }> {
    const res = await this.request("POST", `/relay/publish${recipientQuery(recipients)}`, message);
    return { status: res.status, text: res.text, retryAfter: res.headers.get("retry-after") };
  }

  /**
   * Publish up to 100 messages in one signed request (POST /relay/publish/batch): one result per
   * message, in order, each the 202 answer or the refusal a lone publish would have got.
   */
  async publishMany(messages: Message[], recipients?: string[]): Promise<PublishBatchResponse> {
    return this.json(await this.request("POST", `/relay/publish/batch${recipientQuery(recipients)}`, { messages }));
  }

  /** Waiting messages, oldest first; `next` is the cursor of the following page. */
  async pull(opts: Page = {}): Promise<{ messages: Message[]; next: number | undefined }> {
    const res = await this.page("/relay/messages", opts);
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
  async ackMany(messageIds: string[]): Promise<AckResponse> {
    return this.json(await this.request("POST", "/relay/messages/ack", { message_ids: messageIds }));
  }

  subscribe(topics: string[]): Promise<SubscribeResponse> {
    return this.changeSubscription({ subscribe: { topics, agent: this.key.agentId } });
  }

  unsubscribe(topics: string[]): Promise<SubscribeResponse> {
    return this.changeSubscription({ unsubscribe: { topics, agent: this.key.agentId } });
  }

  /** Register (or with null remove) the webhook the relay pushes this agent's messages to. */
  registerWebhook(webhook: string | null): Promise<SubscribeResponse> {
    return this.changeSubscription({ push: { webhook, agent: this.key.agentId } });
  }

  subscriptions(): Promise<SubscribeResponse> {
    return this.request("GET", "/relay/subscribe").then((r) => this.json(r));
  }

  private changeSubscription(body: SubscribeRequest): Promise<SubscribeResponse> {
    return this.request("POST", "/relay/subscribe", body).then((r) => this.json(r));
  }

  async deadLetters(opts: Page = {}): Promise<DeadLetter[]> {
    const res = await this.page("/relay/dead-letters", opts);
    return this.json<{ dead_letters: DeadLetter[] }>(res).dead_letters;
  }

  async removeDeadLetter(messageId: string): Promise<boolean> {
    const res = await this.request("DELETE", `/relay/dead-letters/${encodeURIComponent(messageId)}`);
    if (res.status === 404) return false;
    if (res.status !== 204) this.json(res);
    return true;
  }

  /** One page, up to MAX_PAGE_BYTES; a heavier page is asked for again with half the limit. */
  private async page(path: string, opts: Page): Promise<HttpResult> {
    let limit = opts.limit ?? 100;
    for (;;) {
      try {
        return await this.request("GET", `${path}${pageQuery({ ...opts, limit })}`, undefined, {}, MAX_PAGE_BYTES);
      } catch (err) {
        if (!(err instanceof ResponseTooLarge) || limit <= 1) throw err;
        limit = Math.max(1, Math.floor(limit / 2));
      }
    }
  }

  private json<T>(res: HttpResult): T {
    if (res.status >= 400)
      throw relayRefusal(res.status, res.text, { code: "unknown", message: `relay answered ${res.status}` });
    return parsedBody(res.text) as T;
  }
}

/** Paging of the list endpoints, as numbers. */
export type Page = { [K in keyof PageQuery]?: number };

/** `?recipient=` once per recipient, or nothing. */
export function recipientQuery(recipients: string[] | undefined): string {
  return recipients?.length ? `?${recipients.map((r) => `recipient=${encodeURIComponent(r)}`).join("&")}` : "";
}

function pageQuery(opts: Page): string {
  const q = new URLSearchParams();
  if (opts.limit) q.set("limit", String(opts.limit));
  if (opts.after) q.set("after", String(opts.after));
  return q.size ? `?${q}` : "";
}
