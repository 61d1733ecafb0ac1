// Probe: the only way `ifp check` reaches the target — https only, no redirects followed, TLS 1.2
// or later, answers read to a bound within a timeout, a bounded number of requests per run.
import { connect as tlsConnect, rootCertificates } from "node:tls";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import WebSocket from "ws";
import { HttpClient, ResponseTooLarge } from "../net/http-client.ts";
import { type SseEvent, sseEvents } from "../net/sse.ts";

/** At most this many requests in one run: a conformance check is polite, never a load test. */
export const MAX_REQUESTS = 60;
/** Answers are read to at most this many bytes. */
export const MAX_ANSWER_BYTES = 256 * 1024;
export const DEFAULT_TIMEOUT_MS = 5_000;
/** After this many timeouts or network errors in a row the target is taken as unreachable. */
const MAX_CONSECUTIVE_FAILURES = 2;

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/** A request the prober did not make or that got no HTTP answer; the check reports the reason. */
export class NoAnswer extends Error {}

/**
 * The kit's only way out to the network: https only, redirects never followed, TLS 1.2 or
 * later, every answer read to a bound within a timeout, at most MAX_REQUESTS per run, and no
 * more requests once the target has stopped answering.
 */
export class Probe {
  readonly http: HttpClient;
  readonly extraCa?: string;
  readonly timeoutMs: number;
  readonly maxRequests: number;
  count = 0;
  /** Statuses of every HTTP answer seen, with the URL, for run-wide checks (redirects, 429). */
  readonly seen: { url: string; status: number; retryAfter: string | null }[] = [];
  private failuresInARow = 0;

  constructor(opts: { extraCa?: string; timeoutMs?: number; maxRequests?: number } = {}) {
    this.extraCa = opts.extraCa;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxRequests = opts.maxRequests ?? MAX_REQUESTS;
    this.http = new HttpClient({ extraCa: opts.extraCa, timeoutMs: this.timeoutMs, userAgent: "ifp-check" });
  }

  private take(url: string): void {
    if (!url.startsWith("https://")) throw new NoAnswer(`refused to send to ${url}: the kit speaks https only`);
    if (this.failuresInARow >= MAX_CONSECUTIVE_FAILURES)
      throw new NoAnswer("not sent: the target stopped answering (earlier requests timed out or failed)");
    if (this.count >= this.maxRequests)
      throw new NoAnswer(`not sent: the run's budget of ${this.maxRequests} requests is spent`);
    this.count++;
  }

  async request(
    url: string,
    init: { method?: string; headers?: Record<string, string>; body?: string | Uint8Array } = {},
  ): Promise<Answer> {
    this.take(url);
    try {
      const res = await this.http.request(url, { ...init, timeoutMs: this.timeoutMs, maxBytes: MAX_ANSWER_BYTES });
      this.failuresInARow = 0;
      this.seen.push({ url, status: res.status, retryAfter: res.headers.get("retry-after") });
      return res;
    } catch (err) {
      if (err instanceof ResponseTooLarge) throw new NoAnswer(err.message);
      this.failuresInARow++;
      throw new NoAnswer(describe(err));
    }
  }

  /**
   * A GET whose answer is a stream of Server-Sent Events, parsed as the HTML standard says
   * (`net/sse.ts`): read until `done(events so far)` holds, the bound is reached or the wait
   * ends, then the connection is closed. `text` is the stream's beginning, for reasons.
   */
  async stream(
    url: string,
    headers: Record<string, string>,
    done: (events: SseEvent[]) => boolean,
    waitMs: number,
  ): Promise<{ status: number; text: string; events: SseEvent[]; done: boolean }> {
    this.take(url);
    return new Promise((resolve) => {
      let text = "";
      let status = 0;
      const events: SseEvent[] = [];
      const finish = (ok: boolean) => {
        clearTimeout(timer);
        req.destroy();
        resolve({ status, text, events, done: ok });
      };
      const timer = setTimeout(() => finish(false), waitMs);
      const req = httpsRequest(
        url,
        { method: "GET", headers, ca: this.ca(), minVersion: "TLSv1.2", agent: false },
        (res) => {
          status = res.statusCode ?? 0;
          let bytes = 0;
          const bounded = async function* () {
            for await (const chunk of res as AsyncIterable<Buffer>) {
              bytes += chunk.length;
              if (text.length < 4096) text += chunk.toString("utf8");
              if (bytes > MAX_ANSWER_BYTES) return;
              yield chunk;
            }
          };
          (async () => {
            for await (const event of sseEvents(bounded(), MAX_ANSWER_BYTES)) {
              events.push(event);
              if (done(events)) return finish(true);
            }
            finish(done(events));
          })().catch(() => finish(false));
        },
      );
      req.on("error", () => finish(false));
      req.end();
    });
  }

  /** A WebSocket session: frames are collected until `done(frames)` holds or the wait ends. */
  async websocket(
    url: string,
    headers: Record<string, string>,
    done: (frames: unknown[]) => boolean,
    waitMs: number,
  ): Promise<{ status?: number; error?: string; frames: unknown[]; done: boolean }> {
    this.take(url);
    return new Promise((resolve) => {
      const frames: unknown[] = [];
      let bytes = 0;
      const ws = new WebSocket(url.replace(/^https:/, "wss:"), {
        headers,
        ca: this.ca(),
        minVersion: "TLSv1.2",
        maxPayload: MAX_ANSWER_BYTES,
        followRedirects: false,
        handshakeTimeout: waitMs,
      });
      const finish = (r: { status?: number; error?: string; done: boolean }) => {
        clearTimeout(timer);
        ws.removeAllListeners();
        ws.on("error", () => undefined);
        ws.terminate();
        resolve({ ...r, frames });
      };
      const timer = setTimeout(() => finish({ done: false, error: `no such frame within ${waitMs} ms` }), waitMs);
      ws.on("unexpected-response", (_req, res) =>
        finish({ status: res.statusCode, done: false, error: `the upgrade was answered ${res.statusCode}` }),
      );
      ws.on("error", (err) => finish({ done: false, error: err.message }));
      ws.on("message", (data) => {
        bytes += (data as Buffer).length;
        try {
          frames.push(JSON.parse(data.toString()));
        } catch {
          frames.push(undefined);
        }
        if (done(frames)) finish({ status: 101, done: true });
        else if (bytes > MAX_ANSWER_BYTES)
          finish({ status: 101, done: false, error: "the bound on what is read was reached" });
      });
    });
  }

  private ca(): string[] | undefined {
    return this.extraCa ? [...rootCertificates, this.extraCa] : undefined;
  }

  /** A bare TLS handshake: the negotiated protocol, or the handshake's error. */
  async handshake(
    url: string,
    opts: { old?: boolean } = {},
  ): Promise<{ protocol: string | null } | { error: string; code?: string }> {
    this.take(url);
    const { hostname, port } = new URL(url);
    return new Promise((resolve) => {
      const socket = tlsConnect({
        host: bare(hostname),
        port: Number(port || 443),
        servername: /^[\d.]+$|:/.test(hostname) ? undefined : hostname,
        ca: this.extraCa ? [...rootCertificates, this.extraCa] : undefined,
        // Offering TLS 1.0/1.1 needs OpenSSL's security level 0; only the version is looked at.
        ...(opts.old
          ? {
              minVersion: "TLSv1" as const,
              maxVersion: "TLSv1.1" as const,
              ciphers: "DEFAULT:@SECLEVEL=0",
              rejectUnauthorized: false,
            }
          : {}),
      });
      const timer = setTimeout(() => done({ error: `no handshake within ${this.timeoutMs} ms` }), this.timeoutMs);
      const done = (r: { protocol: string | null } | { error: string; code?: string }) => {
        clearTimeout(timer);
        socket.destroy();
        if ("error" in r && r.error.startsWith("no handshake")) this.failuresInARow++;
        resolve(r);
      };
      socket.once("secureConnect", () => done({ protocol: socket.getProtocol() }));
      socket.once("error", (err: Error & { code?: string }) =>
        done({ error: err.message.split("\n")[0]!, code: err.code }),
      );
    });
  }

  /**
   * One plain-HTTP GET to the target's own authority (to see that it is refused). Only this
   * request ever goes out without TLS, and it carries no message.
   */
  async plainGet(httpsUrl: string): Promise<{ status: number; location?: string } | { error: string }> {
    this.take(httpsUrl);
    const url = httpsUrl.replace(/^https:/, "http:");
    const { hostname, port, pathname } = new URL(httpsUrl);
    return new Promise((resolve) => {
      const req = httpRequest(
        { host: bare(hostname), port: Number(port || 443), path: pathname, method: "GET", timeout: this.timeoutMs },
        (res) => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, location: res.headers.location });
        },
      );
      req.on("timeout", () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on("error", (err) => resolve({ error: `${url}: ${err.message}` }));
      req.end();
    });
  }

  async close(): Promise<void> {
    await this.http.close();
  }
}

/** A URL's hostname as sockets take it (IPv6 without brackets). */
const bare = (hostname: string) => hostname.replace(/^\[(.*)\]$/, "$1");

function describe(err: unknown): string {
  const e = err as Error & { cause?: Error & { code?: string } };
  if (e.name === "TimeoutError" || e.name === "AbortError") return "no answer within the timeout";
  const cause = e.cause?.message ?? "";
  return cause ? `${e.message}: ${cause}` : e.message;
}
