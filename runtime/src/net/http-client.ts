// HttpClient: the runtime's outbound HTTPS — one connection pool, the system's CAs plus a
// re-read extra CA file, a timeout per request, no redirects followed, answers read to a cap,
// and, given a TargetPolicy, only to the addresses it allows.
import { X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import * as tls from "node:tls";
import { Agent, fetch, type Dispatcher } from "undici";
import { type TargetPolicy, TargetRefused } from "./targets.ts";

export interface HttpClientOptions {
  /** Extra PEM CA certificates trusted besides the system's (self-signed peers both humans agreed on). */
  extraCa?: string;
  /**
   * A file of extra PEM CA certificates trusted besides the system's (`--ca-file`, in a pod the
   * operator's trust bundle). It is read at start and again whenever it changes, so that a
   * rotated CA is trusted without a restart.
   */
  caFile?: string;
  /** How often, at most, the CA file is looked at for a change (default 10 s). */
  caFileCheckMs?: number;
  /** Told each time the CA file was read again: how many certificates it holds, or why it was refused. */
  onCaFileReload?: (result: { file: string; certificates: number } | { file: string; error: string }) => void;
  /** Per-request timeout. */
  timeoutMs?: number;
  userAgent?: string;
  /** Default cap on every answer's body, decoded bytes (DEFAULT_MAX_RESPONSE_BYTES unless set). */
  maxResponseBytes?: number;
  /**
   * Where requests may go: when set, every request not marked `trusted` must be https and reach
   * only addresses the policy allows, checked after DNS resolution on the address the connection
   * is made to (targets.ts). Without it, nothing is checked (the command-line tools).
   */
  targets?: TargetPolicy;
}

/** Every answer is read up to this many bytes unless a call or the client says otherwise. */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

export interface HttpResult {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * The CA certificates of a PEM text (each must parse; anything between the blocks is ignored).
 * Empty or white space only: none. Throws with what is wrong, never with the text itself.
 */
export function parsePemCertificates(text: string): string[] {
  if (!text.trim()) return [];
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (!blocks.length) throw new Error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  blocks.forEach((b, i) => {
    try {
      new X509Certificate(b);
    } catch {
      throw new Error(`certificate ${i + 1} of ${blocks.length} is not a valid X.509 certificate`);
    }
  });
  return blocks.map((b) => `${b}\n`);
}

/**
 * The CA certificates Node trusts by default: its bundled roots plus NODE_EXTRA_CA_CERTS (and the
 * system store when Node is told to use it). Extra CAs are added to these: giving TLS a `ca`
 * list replaces Node's default, so the list must carry the default along.
 */
export function defaultCaCertificates(): string[] {
  const get = (tls as { getCACertificates?: (type: "default") => string[] }).getCACertificates;
  return get ? get("default") : [...tls.rootCertificates];
}

function fileVersion(st: { mtimeMs: number; size: number; ino: number }): string {
  return `${st.mtimeMs}:${st.size}:${st.ino}`;
}

/**
 * Outbound HTTPS for the runtime: one connection pool, the system trust store plus optional
 * extra CAs (never instead of it), a timeout per request, and no following of redirects (an
 * inbox that redirects is a misconfiguration to report, not to chase). Every answer's body is
 * read up to a cap (the call's `maxBytes`, else the client's `maxResponseBytes`, else 1 MiB) and
 * the connection is cut past it; `Accept-Encoding: identity` is asked for, and a compressed
 * answer sent anyway is counted after decoding, so a small compressed body cannot expand past
 * the cap.
 */
export class HttpClient {
  private dispatcher: Dispatcher;
  /** The pool of checked requests: its connections resolve names through the target policy. */
  private checkedDispatcher: Dispatcher | undefined;
  private readonly targets: TargetPolicy | undefined;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly extraCa: string[];
  private fileCas: string[] = [];
  private readonly caFile: string | undefined;
  private readonly caFileCheckMs: number;
  private readonly onCaFileReload: HttpClientOptions["onCaFileReload"];
  private caFileVersion = "";
  private caFileCheckedAt = 0;
  private reloading: Promise<void> | undefined;
  private readonly maxResponseBytes: number;

  constructor(opts: HttpClientOptions = {}) {
    this.extraCa = opts.extraCa ? [opts.extraCa] : [];
    this.caFile = opts.caFile;
    this.caFileCheckMs = opts.caFileCheckMs ?? 10_000;
    this.onCaFileReload = opts.onCaFileReload;
    if (this.caFile) {
      // At start a missing or unusable file is an error of the command line: say so at once.
      const version = fileVersion(statSync(this.caFile));
      try {
        this.fileCas = parsePemCertificates(readFileSync(this.caFile, "utf8"));
      } catch (err) {
        throw new Error(`CA file ${this.caFile} ${(err as Error).message}`);
      }
      this.caFileVersion = version;
      this.caFileCheckedAt = Date.now();
    }
    this.targets = opts.targets;
    this.dispatcher = this.makeDispatcher();
    this.checkedDispatcher = this.targets ? this.makeDispatcher(this.targets) : undefined;
    this.timeoutMs = opts.timeoutMs ?? 15_000;
    this.userAgent = opts.userAgent ?? "ifp-runtime";
    this.maxResponseBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  /** The CA certificates outbound TLS trusts, or undefined for Node's default (the system roots alone). */
  trustedCas(): string[] | undefined {
    const extra = [...this.extraCa, ...this.fileCas];
    return extra.length ? [...defaultCaCertificates(), ...extra] : undefined;
  }

  private makeDispatcher(targets?: TargetPolicy): Dispatcher {
    return new Agent({
      connect: { ca: this.trustedCas(), minVersion: "TLSv1.2", ...(targets ? { lookup: targets.lookup } : {}) },
      keepAliveTimeout: 10_000,
    });
  }

  /** Read the CA file again if it changed (at most every caFileCheckMs); an unusable new version keeps the old trust. */
  async reloadCaFile(force = false): Promise<void> {
    if (!this.caFile) return;
    if (!force && Date.now() - this.caFileCheckedAt < this.caFileCheckMs) return;
    this.reloading ??= (async () => {
      const file = this.caFile!;
      this.caFileCheckedAt = Date.now();
      try {
        const version = fileVersion(await stat(file));
        if (version === this.caFileVersion) return;
        this.caFileVersion = version;
        const cas = parsePemCertificates(await readFile(file, "utf8"));
        const old = [this.dispatcher, this.checkedDispatcher];
        this.fileCas = cas;
        this.dispatcher = this.makeDispatcher();
        this.checkedDispatcher = this.targets ? this.makeDispatcher(this.targets) : undefined;
        // Requests in flight finish on the old pools.
        for (const d of old) void d?.close().catch(() => {});
        this.onCaFileReload?.({ file, certificates: cas.length });
      } catch (err) {
        this.onCaFileReload?.({ file, error: (err as Error).message });
      }
    })().finally(() => {
      this.reloading = undefined;
    });
    await this.reloading;
  }

  async request(
    url: string,
    init: {
      method?: string;
      headers?: Record<string, string>;
      body?: string | Uint8Array;
      timeoutMs?: number;
      maxBytes?: number;
      /** A URL the resource's owner configured for its own service (the handler, notifications): not checked against the target policy. */
      trusted?: boolean;
    } = {},
  ): Promise<HttpResult> {
    await this.reloadCaFile();
    const checked = this.targets && !init.trusted;
    // Scheme and IP literals here (a literal is connected to without a lookup); names in the lookup.
    if (checked) this.targets!.checkUrl(url);
    const res = await fetch(url, {
      method: init.method ?? "GET",
      headers: { "user-agent": this.userAgent, ...init.headers, "accept-encoding": "identity" },
      body: init.body,
      redirect: "manual",
      dispatcher: checked ? this.checkedDispatcher! : this.dispatcher,
      signal: AbortSignal.timeout(init.timeoutMs ?? this.timeoutMs),
    });
    try {
      return {
        status: res.status,
        headers: res.headers as unknown as Headers,
        text: await readAtMost(res, init.maxBytes ?? this.maxResponseBytes),
      };
    } catch (err) {
      if (err instanceof ResponseTooLarge) err.status = res.status;
      throw err;
    }
  }

  /**
   * A request whose response body is read as it comes (a stream of events): no overall
   * timeout, only `signal`; the connection and the answer's head must come within the timeout.
   * A non-2xx answer's body is read (capped) into `text` and the stream is not returned.
   */
  async stream(
    url: string,
    init: { method?: string; headers?: Record<string, string>; signal: AbortSignal; timeoutMs?: number },
  ): Promise<{ status: number; headers: Headers; text?: string; body?: AsyncIterable<Uint8Array> }> {
    await this.reloadCaFile();
    // Checked against the target policy like request() (the relays are not the owner's own service).
    if (this.targets) this.targets.checkUrl(url);
    const head = AbortSignal.timeout(init.timeoutMs ?? this.timeoutMs);
    const controller = new AbortController();
    const abort = () => controller.abort();
    init.signal.addEventListener("abort", abort, { once: true });
    head.addEventListener("abort", abort, { once: true });
    try {
      const res = await fetch(url, {
        method: init.method ?? "GET",
        headers: { "user-agent": this.userAgent, ...init.headers, "accept-encoding": "identity" },
        redirect: "manual",
        dispatcher: this.targets ? this.checkedDispatcher! : this.dispatcher,
        signal: controller.signal,
      });
      head.removeEventListener("abort", abort);
      if (res.status < 200 || res.status >= 300 || !res.body) {
        init.signal.removeEventListener("abort", abort);
        return {
          status: res.status,
          headers: res.headers as unknown as Headers,
          text: await readAtMost(res, this.maxResponseBytes).catch(() => ""),
        };
      }
      const stream = res.body as unknown as AsyncIterable<Uint8Array>;
      async function* body(): AsyncGenerator<Uint8Array> {
        try {
          yield* stream;
        } finally {
          // Read to the end or left early: the connection is let go, and the caller's signal forgotten.
          init.signal.removeEventListener("abort", abort);
          controller.abort();
        }
      }
      return { status: res.status, headers: res.headers as unknown as Headers, body: body() };
    } catch (err) {
      head.removeEventListener("abort", abort);
      init.signal.removeEventListener("abort", abort);
      throw err;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.dispatcher.close(), this.checkedDispatcher?.close()]);
  }
}

export { TargetRefused };

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

/** A reload report for the runtime's log: a rotated bundle at info, a refused one at warn. */
export function caFileLogger(log: {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}): NonNullable<HttpClientOptions["onCaFileReload"]> {
  return (r) =>
    "error" in r
      ? log.warn({ file: r.file, err: r.error }, "kept the previous CA certificates: the CA file could not be used")
      : log.info({ file: r.file, certificates: r.certificates }, "read the CA file again");
}
