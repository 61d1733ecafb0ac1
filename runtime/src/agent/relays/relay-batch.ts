// RelayBatcher: publishes to one relay that arrive in the same event-loop turn sent as one signed
// batch request, each caller getting the relay's answer about its own message, with lone
// publishes to relays that lack the batch endpoint.
import type { Message } from "../../protocol/message.ts";
import type { SigningKey } from "../../protocol/signing.ts";
import { MAX_BATCH, PublishBatchResponse, type ItemResult } from "../../protocol/relay-api.ts";
import { RelayClient, recipientQuery, type RelayHttp } from "../../net/relay-client.ts";
import { lacksEndpoint, MissingEndpoints } from "./missing-endpoints.ts";

/**
 * A relay's answer about one message, as a lone `POST /relay/publish` gives it: its status,
 * body and Retry-After. A message's item of a batch is turned into the same thing, so that
 * both are classified by one rule (relayOutcome in relays.ts).
 */
export interface RelayAnswer {
  status: number;
  text: string;
  retryAfter: string | null;
}

/** The most the messages of a batch may weigh: every relay takes a batch body of 1 MiB and its envelope. */
export const MAX_BATCH_BYTES = 1024 * 1024;

interface Waiting {
  message: Message;
  resolve(answer: RelayAnswer): void;
  reject(err: unknown): void;
}

interface Batch {
  relayUrl: string;
  recipients: string[];
  items: Waiting[];
  bytes: number;
  closed: boolean;
}

/**
 * Publishes to relays in batches, because each relay request costs a signed HTTPS exchange (an
 * Ed25519 signature here, its verification at the relay): the publishes for the same relay and
 * the same recipients that arrive within one event-loop turn go as one signed
 * `POST /relay/publish/batch` (at most MAX_BATCH messages and MAX_BATCH_BYTES), and each caller
 * gets the relay's answer about its own message. A publish alone in its turn goes as a plain
 * `POST /relay/publish`. Batching never costs a message: a relay that answers 404 or 405 to the
 * batch endpoint does not have it and is sent lone publishes from then on (remembered for an
 * hour), a batch refused as a whole for its body (400, 413) or answered with a body that cannot
 * be read is sent again as lone publishes, and any other refusal of the whole request (401,
 * 429, 5xx, …) is every message's answer, as it would have been for each alone. A request that
 * gets no answer rejects every caller's promise with its error.
 */
export class RelayBatcher {
  private readonly signing: SigningKey;
  private readonly http: RelayHttp;
  /** The batches still taking messages this turn, by relay and recipients. */
  private readonly open = new Map<string, Batch>();
  /** Relays found without the batch endpoint. */
  private readonly unsupported: MissingEndpoints;
  /** How long one request to a relay may take (spec.outbound.resiliency.timeout); the client's default without it. */
  private readonly timeoutMs: number | undefined;

  constructor(signing: SigningKey, http: RelayHttp, opts: { now?: () => number; timeoutMs?: number } = {}) {
    this.signing = signing;
    this.http = http;
    this.unsupported = new MissingEndpoints(opts.now);
    this.timeoutMs = opts.timeoutMs;
  }

  /** A client of one relay, its requests bounded by the destination's timeout. */
  private client(relayUrl: string): RelayClient {
    return new RelayClient(relayUrl, this.signing, this.http, { timeoutMs: this.timeoutMs });
  }

  /** Publish `message` at the relay for `recipients` (`?recipient=`), alone or with the others of this turn. */
  publish(relayUrl: string, message: Message, recipients: string[]): Promise<RelayAnswer> {
    if (!this.unsupported.has(relayUrl)) return this.lone(relayUrl, message, recipients);
    const bytes = Buffer.byteLength(JSON.stringify(message));
    const key = JSON.stringify([relayUrl, recipients]);
    let batch = this.open.get(key);
    if (batch?.items.length && batch.bytes + bytes > MAX_BATCH_BYTES) {
      this.close(key, batch);
      batch = undefined;
    }
    if (!batch) {
      const b: Batch = { relayUrl, recipients, items: [], bytes: 0, closed: false };
      this.open.set(key, b);
      setImmediate(() => this.close(key, b));
      batch = b;
    }
    const b = batch;
    return new Promise<RelayAnswer>((resolve, reject) => {
      b.items.push({ message, resolve, reject });
      b.bytes += bytes;
      if (b.items.length >= MAX_BATCH) this.close(key, b);
    });
  }

  private close(key: string, batch: Batch): void {
    if (this.open.get(key) === batch) this.open.delete(key);
    if (batch.closed) return;
    batch.closed = true;
    void this.send(batch);
  }

  private async send(batch: Batch): Promise<void> {
    const { relayUrl, recipients, items } = batch;
    if (items.length === 1) return settle(items[0]!, this.lone(relayUrl, items[0]!.message, recipients));
    let res: Awaited<ReturnType<RelayClient["request"]>>;
    try {
      res = await this.client(relayUrl).request("POST", `/relay/publish/batch${recipientQuery(recipients)}`, {
        messages: items.map((i) => i.message),
      });
    } catch (err) {
      for (const i of items) i.reject(err);
      return;
    }
    if (lacksEndpoint(res.status)) {
      this.unsupported.remember(relayUrl);
      return this.eachAlone(batch);
    }
    // A refusal that may be about one message of the batch: each is sent alone, for its own answer.
    if (res.status === 400 || res.status === 413) return this.eachAlone(batch);
    if (res.status < 200 || res.status >= 300) {
      const whole: RelayAnswer = { status: res.status, text: res.text, retryAfter: res.headers.get("retry-after") };
      for (const i of items) i.resolve(whole);
      return;
    }
    const results = readResults(res.text, items.length);
    if (!results) return this.eachAlone(batch);
    for (const [n, i] of items.entries()) i.resolve(itemAnswer(results[n]!));
  }

  private lone(relayUrl: string, message: Message, recipients: string[]): Promise<RelayAnswer> {
    return this.client(relayUrl).publish(message, recipients);
  }

  private async eachAlone(batch: Batch): Promise<void> {
    await Promise.all(batch.items.map((i) => settle(i, this.lone(batch.relayUrl, i.message, batch.recipients))));
  }
}

/** A waiting caller gets what `answer` comes to, its answer or its error. */
function settle(item: Waiting, answer: Promise<RelayAnswer>): Promise<void> {
  return answer.then(item.resolve, item.reject);
}

/** One message's item of a batch answer as the answer a lone publish of it gets. */
export function itemAnswer(item: ItemResult): RelayAnswer {
  if (item.status === 202) {
    const { status: _status, ...accepted } = item;
    return { status: 202, text: JSON.stringify({ status: "accepted", ...accepted }), retryAfter: null };
  }
  const { status, code, message, retry_after } = item as Exclude<ItemResult, { status: 202 }>;
  return {
    status,
    text: JSON.stringify({ status: "error", code, message }),
    retryAfter: retry_after === undefined ? null : String(Math.ceil(retry_after)),
  };
}

/** The results of a batch answer, one per message sent; undefined when the body is not that. */
function readResults(text: string, count: number): ItemResult[] | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = PublishBatchResponse.safeParse(body);
  return parsed.success && parsed.data.results.length === count ? parsed.data.results : undefined;
}
