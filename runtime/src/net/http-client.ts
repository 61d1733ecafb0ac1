import { rootCertificates } from "node:tls";
import { Agent, fetch, type Dispatcher } from "undici";

export interface HttpClientOptions {
  /** Extra PEM CA certificates trusted besides the system's (self-signed peers both humans agreed on). */
  extraCa?: string;
  /** Per-request timeout. */
  timeoutMs?: number;
  userAgent?: string;
  /** Default cap on every answer's body, decoded bytes (DEFAULT_MAX_RESPONSE_BYTES unless set). */
  maxResponseBytes?: number;
}

/** Every answer is read up to this many bytes unless a call or the client says otherwise. */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

export interface HttpResult {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * Outbound HTTPS for the runtime: one connection pool, the system trust store plus optional
 * extra CAs, a timeout per request, and no following of redirects (an inbox that redirects is
 * a misconfiguration to report, not to chase). Every answer's body is read up to a cap (the
 * call's `maxBytes`, else the client's `maxResponseBytes`, else 1 MiB) and the connection is
 * cut past it; `Accept-Encoding: identity` is asked for, and a compressed answer sent anyway is
 * counted after decoding, so a small compressed body cannot expand past the cap.
 */
export class HttpClient {
  private readonly dispatcher: Dispatcher;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly maxResponseBytes: number;

  constructor(opts: HttpClientOptions = {}) {
    this.dispatcher = new Agent({
      connect: { ca: opts.extraCa ? [...rootCertificates, opts.extraCa] : undefined, minVersion: "TLSv1.2" },
      keepAliveTimeout: 10_000,
    });
    this.timeoutMs = opts.timeoutMs ?? 15_000;
    this.userAgent = opts.userAgent ?? "ifp-runtime";
    this.maxResponseBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  async request(
    url: string,
    init: { method?: string; headers?: Record<string, string>; body?: string | Uint8Array; timeoutMs?: number; maxBytes?: number } = {},
  ): Promise<HttpResult> {
    const res = await fetch(url, {
      method: init.method ?? "GET",
      headers: { "user-agent": this.userAgent, ...init.headers, "accept-encoding": "identity" },
      body: init.body,
      redirect: "manual",
      dispatcher: this.dispatcher,
      signal: AbortSignal.timeout(init.timeoutMs ?? this.timeoutMs),
    });
    try {
      return { status: res.status, headers: res.headers as unknown as Headers, text: await readAtMost(res, init.maxBytes ?? this.maxResponseBytes) };
    } catch (err) {
      if (err instanceof ResponseTooLarge) err.status = res.status;
      throw err;
    }
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}

/** An answer whose body passed the cap; its status is known, its body was not read. */
export class ResponseTooLarge extends Error {
  status = 0;
}

/** The body as text, refused (and the connection cut) as soon as it exceeds maxBytes. */
async function readAtMost(res: Response, maxBytes: number): Promise<string> {
  // A declared length counts only for an answer that is not compressed (it is the encoded size).
  const encoded = (res.headers.get("content-encoding") ?? "identity").toLowerCase() !== "identity";
  const declared = encoded ? NaN : Number(res.headers.get("content-length") ?? NaN);
  if (declared > maxBytes) {
    await res.body?.cancel().catch(() => undefined);
    throw new ResponseTooLarge(`the answer declares ${declared} bytes, more than the ${maxBytes} allowed`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (res.body) {
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => undefined);
        throw new ResponseTooLarge(`the answer exceeds the ${maxBytes} bytes allowed`);
      }
      chunks.push(value);
    }
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** Seconds from a Retry-After header (delta-seconds or HTTP date), or undefined. */
export function retryAfterSeconds(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}
