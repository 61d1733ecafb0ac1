// The example application of an agent: it receives the messages its runtime hands off at
// spec.handler.url, logs each one in one line, and answers through the runtime's local API.
// Only Node's built-ins and the package's typed client; see examples/README.md.
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import {
  handoffSignatureProblem,
  LocalApiClient,
  LocalApiError,
  type Message,
  type OutboxRequest,
  type Queued,
} from "ifp-operator/client";

export interface AppConfig {
  /** Address and port the hand-off endpoint listens on (spec.handler.url points here). */
  host: string;
  port: number;
  /** Base URL of the runtime's local API on the pod's loopback. */
  localApi: string;
  /** Agent ids greeted once at start. */
  greet: string[];
  greetText: string;
  /** Replies per conversation and sender at most; 0 turns replies off. */
  maxReplies: number;
  /** Also answer automatic replies (still at most maxReplies per conversation). */
  answerReplies: boolean;
  /** Largest hand-off body taken; keep it at least spec.inbox.maxMessageBytes. */
  maxBodyBytes: number;
  /** How long the greeting is retried while the local API does not answer. */
  greetForMs: number;
  /** How long the greeting waits for the peer's capability document (the peer is up) before it is queued anyway. */
  greetWaitMs: number;
  /**
   * The hand-off secret (IFP_HANDOFF_SECRET, which the operator gives the pod's sidecars): a
   * hand-off without a valid Ifp-Handoff-Signature is refused with 401. Unset: not checked.
   */
  handoffSecret?: string;
}

export class ConfigError extends Error {}

const DEFAULTS = {
  IFP_APP_HOST: "127.0.0.1",
  IFP_APP_PORT: "8080",
  IFP_LOCAL_API: "http://127.0.0.1:8081",
  IFP_APP_GREET: "",
  IFP_APP_GREET_TEXT: "Hello from the example application",
  IFP_APP_MAX_REPLIES: "3",
  IFP_APP_ANSWER_REPLIES: "false",
  IFP_APP_MAX_BODY_BYTES: String(1024 * 1024),
  IFP_APP_GREET_FOR_SECONDS: "600",
  IFP_APP_GREET_WAIT_SECONDS: "180",
};

/** The configuration from environment variables (documented in examples/README.md); throws ConfigError. */
export function configFromEnv(env: NodeJS.ProcessEnv): AppConfig {
  const get = (k: keyof typeof DEFAULTS) => (env[k] ?? "").trim() || DEFAULTS[k];
  const int = (k: keyof typeof DEFAULTS, min: number, max: number) => {
    const v = get(k);
    const n = Number(v);
    if (!/^\d+$/.test(v) || n < min || n > max)
      throw new ConfigError(`${k}=${JSON.stringify(v)}: expected a whole number from ${min} to ${max}`);
    return n;
  };
  const bool = (k: keyof typeof DEFAULTS) => {
    const v = get(k).toLowerCase();
    if (!["true", "false", "1", "0", "yes", "no"].includes(v))
      throw new ConfigError(`${k}=${JSON.stringify(v)}: expected true or false`);
    return ["true", "1", "yes"].includes(v);
  };
  const localApi = get("IFP_LOCAL_API");
  let parsed: URL;
  try {
    parsed = new URL(localApi);
  } catch {
    throw new ConfigError(`IFP_LOCAL_API=${JSON.stringify(localApi)}: not a URL`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new ConfigError(`IFP_LOCAL_API=${JSON.stringify(localApi)}: expected an http(s) URL`);
  const greet = get("IFP_APP_GREET")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const g of greet)
    if (g.length > 512) throw new ConfigError("IFP_APP_GREET: an agent id is at most 512 characters");
  return {
    host: get("IFP_APP_HOST"),
    port: int("IFP_APP_PORT", 0, 65535),
    localApi,
    greet,
    greetText: get("IFP_APP_GREET_TEXT"),
    maxReplies: int("IFP_APP_MAX_REPLIES", 0, 1000),
    answerReplies: bool("IFP_APP_ANSWER_REPLIES"),
    maxBodyBytes: int("IFP_APP_MAX_BODY_BYTES", 1024, 64 * 1024 * 1024),
    greetForMs: int("IFP_APP_GREET_FOR_SECONDS", 0, 7 * 24 * 3600) * 1000,
    greetWaitMs: int("IFP_APP_GREET_WAIT_SECONDS", 0, 24 * 3600) * 1000,
    ...(env.IFP_HANDOFF_SECRET?.trim() ? { handoffSecret: env.IFP_HANDOFF_SECRET.trim() } : {}),
  };
}

/** Lines for people: what arrived, what was sent. */
export interface AppLog {
  info(line: string): void;
  warn(line: string): void;
}

export const consoleLog: AppLog = {
  info: (line) => process.stdout.write(`${line}\n`),
  warn: (line) => process.stderr.write(`${line}\n`),
};

/**
 * The marker of an automatic reply, after e-mail's Auto-Submitted header (RFC 3834): a header
 * extension `auto-submitted` whose value is not "no". Applications that answer messages by
 * themselves set it and do not answer messages that carry it, so two of them never ping-pong.
 */
export const AUTO_SUBMITTED = "auto-submitted";

/** What the app reads of a hand-off, checked. */
export interface Received {
  messageId: string;
  /** The verified signer (Ifp-Sender), else headers.from.agent. */
  sender: string;
  conversationId: string;
  sequence: number;
  phase: string;
  text: string | undefined;
  inReplyTo: string | undefined;
  references: string[];
  autoSubmitted: boolean;
  toTopic: boolean;
  /** The first addressee, normally this agent. */
  recipient: string;
}

class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown, max: number): v is string => typeof v === "string" && v.length > 0 && v.length <= max;

/** Check a hand-off body (an IFP-4 message as the runtime accepted it); an error names the field. */
export function readHandoff(body: unknown, senderHeader: string | undefined): Received {
  const bad = (what: string) => new HttpError(400, "invalid_format", `not an IFP-4 message: ${what}`);
  if (!isObject(body)) throw bad("the body is not a JSON object");
  const h = body.headers;
  if (!isObject(h)) throw bad("headers is not an object");
  if (!str(h.message_id, 256)) throw bad("headers.message_id is not a string of 1 to 256 characters");
  if (!isObject(h.from) || !str(h.from.agent, 512))
    throw bad("headers.from.agent is not a string of 1 to 512 characters");
  if (
    !Array.isArray(h.to) ||
    h.to.length === 0 ||
    h.to.length > 100 ||
    !h.to.every((t) => isObject(t) && str(t.agent, 512))
  ) {
    throw bad("headers.to is not a list of 1 to 100 {agent}");
  }
  if (!str(h.conversation_id, 256)) throw bad("headers.conversation_id is not a string of 1 to 256 characters");
  if (!Number.isSafeInteger(h.sequence) || (h.sequence as number) < 0)
    throw bad("headers.sequence is not a whole number");
  if (!str(h.phase, 64)) throw bad("headers.phase is not a string of 1 to 64 characters");
  if (h.thread !== undefined && !isObject(h.thread)) throw bad("headers.thread is not an object");
  const thread = (h.thread ?? {}) as Record<string, unknown>;
  if (thread.in_reply_to !== undefined && typeof thread.in_reply_to !== "string")
    throw bad("headers.thread.in_reply_to is not a string");
  if (
    thread.references !== undefined &&
    !(Array.isArray(thread.references) && thread.references.every((r) => typeof r === "string"))
  ) {
    throw bad("headers.thread.references is not a list of strings");
  }
  if (h.extensions !== undefined && !isObject(h.extensions)) throw bad("headers.extensions is not an object");
  if (!isObject(body.body)) throw bad("body is not an object");
  if (body.body.text !== undefined && typeof body.body.text !== "string") throw bad("body.text is not a string");
  const marker = (h.extensions as Record<string, unknown> | undefined)?.[AUTO_SUBMITTED];
  const sender = senderHeader && senderHeader.length <= 512 ? senderHeader : h.from.agent;
  return {
    messageId: h.message_id,
    sender,
    conversationId: h.conversation_id,
    sequence: h.sequence as number,
    phase: h.phase,
    text: body.body.text as string | undefined,
    inReplyTo: thread.in_reply_to as string | undefined,
    references: (thread.references as string[] | undefined) ?? [],
    autoSubmitted: marker !== undefined && marker !== "no",
    toTopic: (h.to as { agent: string }[]).every((t) => t.agent.startsWith("topic:")),
    recipient: (h.to as { agent: string }[])[0]!.agent,
  };
}

/** Characters that would break a log line or a terminal (controls, line and direction marks), escaped. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it matches
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"\\]/g;
const NAMED: Record<string, string> = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };
const escapeText = (s: string) =>
  s.replace(UNSAFE, (c) => NAMED[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
/** An id as is when plain, else quoted and escaped. */
export const showId = (s: string) => (/^[\w.:@/#+~=-]{1,256}$/.test(s) ? s : `"${escapeText(s.slice(0, 256))}"`);
/** A text quoted, escaped, and cut at `max` characters. */
export const showText = (s: string, max = 500) => `"${escapeText(s.length > max ? `${s.slice(0, max)}…` : s)}"`;

/** A reply's message_id, derived from what it answers: answering the same message twice queues one reply. */
export function replyId(m: Received): string {
  return `msg:reply-${createHash("sha256").update(`${m.sender}\n${m.messageId}`).digest("hex").slice(0, 32)}`;
}

export function replyText(m: Received): string {
  const t = (m.text ?? "").replace(/\s+/g, " ").trim();
  if (!t) return `Got your ${m.phase} message.`;
  return `Got your ${m.phase} message: “${t.length > 80 ? `${t.slice(0, 80)}…` : t}”`;
}

/** A bounded map: the oldest entry goes when it is full. */
class Bounded<K, V> extends Map<K, V> {
  private readonly limit: number;
  constructor(limit: number) {
    super();
    this.limit = limit;
  }
  override set(key: K, value: V): this {
    if (!this.has(key) && this.size >= this.limit) this.delete(this.keys().next().value as K);
    return super.set(key, value);
  }
}

interface Handled {
  /** The reply decided for this message, until it is queued. */
  reply?: Omit<Message, "security">;
  sending?: Promise<void>;
}

/** An answer of the local API that a later attempt may not meet: no answer at all, a 5xx, 408, 425 or 429. */
const transient = (err: unknown) =>
  !(err instanceof LocalApiError) || err.status >= 500 || [408, 425, 429].includes(err.status);
const describe = (err: unknown) =>
  err instanceof LocalApiError
    ? `${err.status} ${err.code}: ${err.message}`
    : err instanceof Error
      ? err.cause instanceof Error
        ? `${err.message} (${err.cause.message})`
        : err.message
      : String(err);
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/** How long a hand-off waits for the local API before answering 503 (the runtime's hand-off timeout is 10 s). */
const SEND_WAIT_MS = 8_000;

export interface RunningApp {
  url: string;
  server: Server;
  /** Settles when the greetings are queued or given up. */
  greeted: Promise<void>;
  close(): Promise<void>;
}

export async function startApp(config: AppConfig, log: AppLog = consoleLog): Promise<RunningApp> {
  const ifp = new LocalApiClient(config.localApi);
  const handled = new Bounded<string, Handled>(10_000);
  const repliesPerConversation = new Bounded<string, number>(10_000);
  const stopping = new AbortController();

  function decide(m: Received): string | undefined {
    if (m.phase === "close" || m.phase === "error") return `it is a ${m.phase} message`;
    if (m.toTopic) return "it went to a topic";
    if (m.autoSubmitted && !config.answerReplies) return "it is an automatic reply";
    const key = `${m.sender}\n${m.conversationId}`;
    const sent = repliesPerConversation.get(key) ?? 0;
    if (sent >= config.maxReplies) return `${config.maxReplies} replies were sent in this conversation already`;
    repliesPerConversation.set(key, sent + 1);
    return undefined;
  }

  function reply(m: Received): NonNullable<Handled["reply"]> {
    return {
      ifp: 4,
      headers: {
        message_id: replyId(m),
        date: new Date().toISOString(),
        // The runtime always sets `from` to this agent, whatever is given here.
        from: { agent: m.recipient },
        to: [{ agent: m.sender }],
        conversation_id: m.conversationId,
        sequence: m.sequence + 1,
        // A first greeting is answered with a greeting, which carries this agent's capabilities.
        phase: m.phase === "greeting" && !m.inReplyTo ? "greeting" : "context",
        thread: { in_reply_to: m.messageId, references: [...m.references.slice(-19), m.messageId] },
        extensions: { [AUTO_SUBMITTED]: "auto-replied" },
      },
      body: { text: replyText(m) },
    };
  }

  /** Queue the decided reply once; a failure that may pass leaves it to the runtime's next hand-off. */
  function send(m: Received, state: Handled): Promise<void> {
    if (!state.reply) return Promise.resolve();
    state.sending ??= ifp
      .send(state.reply)
      .then((q: Queued) => {
        state.reply = undefined;
        log.info(
          `replied ${showId(q.message_id)} to ${showId(m.sender)} thread ${showId(m.conversationId)}${q.duplicate ? " (already queued)" : ""}: ${showText(q.message.body.text ?? "")}`,
        );
      })
      .catch((err: unknown) => {
        if (transient(err)) {
          log.warn(
            `could not queue the reply to ${showId(m.messageId)} (the hand-off will be retried): ${describe(err)}`,
          );
          throw err;
        }
        state.reply = undefined;
        log.warn(`the local API refused the reply to ${showId(m.messageId)}: ${describe(err)}`);
      })
      .finally(() => {
        state.sending = undefined;
      });
    return state.sending;
  }

  async function handoff(req: IncomingMessage): Promise<object> {
    const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    if (type !== "application/json")
      throw new HttpError(415, "unsupported_media_type", "the hand-off body must be application/json");
    const raw = await readBody(req, config.maxBodyBytes);
    // Only the runtime holds the secret: anything else reaching this port is not believed.
    if (config.handoffSecret) {
      // The signature covers the body and the Ifp- headers read below (scheme v2): all headers go in.
      const problem = handoffSignatureProblem(config.handoffSecret, req.headers, raw);
      if (problem) throw new HttpError(401, "unauthorized", `not a hand-off from this agent's runtime: ${problem}`);
    }
    let body: unknown;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch (err) {
      throw new HttpError(400, "invalid_format", `the body is not JSON: ${(err as Error).message}`);
    }
    const sender = req.headers["ifp-sender"];
    const m = readHandoff(body, typeof sender === "string" && sender ? sender : undefined);
    const key = `${m.sender}\n${m.messageId}`;
    let state = handled.get(key);
    if (!state) {
      state = {};
      handled.set(key, state);
      log.info(
        `received ${m.phase} ${showId(m.messageId)} from ${showId(m.sender)} thread ${showId(m.conversationId)}${m.inReplyTo ? ` in reply to ${showId(m.inReplyTo)}` : ""}: ${m.text === undefined ? "(no text)" : showText(m.text)}`,
      );
      const notReplying = config.maxReplies === 0 ? undefined : decide(m);
      if (config.maxReplies > 0 && !notReplying) state.reply = reply(m);
      else if (notReplying) log.info(`no reply to ${showId(m.messageId)}: ${notReplying}`);
    }
    if (state.reply) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), SEND_WAIT_MS)));
      try {
        const outcome = await Promise.race([send(m, state), late]);
        if (outcome === "late")
          throw new HttpError(503, "unavailable", "the local API did not answer in time; try again");
      } catch (err) {
        if (err instanceof HttpError) throw err;
        throw new HttpError(503, "unavailable", `the reply could not be queued yet: ${describe(err)}`);
      } finally {
        clearTimeout(timer);
      }
    }
    return { status: "ok" };
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let status = 200;
    let body: object;
    try {
      const path = (req.url ?? "/").split("?")[0];
      if (req.method === "POST") body = await handoff(req);
      else if ((req.method === "GET" || req.method === "HEAD") && path === "/healthz") body = { status: "ok" };
      else throw new HttpError(404, "not_found", `no endpoint ${req.method} ${path}; hand-offs are POSTed`);
    } catch (err) {
      const e =
        err instanceof HttpError ? err : new HttpError(500, "internal_error", "the hand-off could not be handled");
      if (!(err instanceof HttpError)) log.warn(`internal error: ${describe(err)}`);
      else if (e.status !== 404 && e.status !== 503) log.warn(`refused a hand-off (${e.status}): ${e.message}`);
      status = e.status;
      body = { status: "error", code: e.code, message: e.message };
    }
    const text = JSON.stringify(body);
    res
      .writeHead(status, {
        "content-type": "application/json; charset=utf-8",
        "content-length": Buffer.byteLength(text),
      })
      .end(req.method === "HEAD" ? undefined : text);
  }

  /**
   * Wait (bounded by greetWaitMs) until the runtime can fetch the peer's capability document,
   * that is until the peer answers: a greeting queued while the peer is still starting would
   * wait out the first retry pause of IFP-6 (one minute) or more.
   */
  async function awaitPeer(peer: string): Promise<void> {
    const until = Date.now() + config.greetWaitMs;
    let said = false;
    while (!stopping.signal.aborted && Date.now() < until) {
      const known = await ifp.peerCapabilities(peer, { refresh: true }).catch(() => undefined);
      if (known && !known.stale) return;
      if (!said)
        log.info(
          `waiting for ${showId(peer)} to answer (its capability document) before greeting it, at most ${Math.round(config.greetWaitMs / 1000)} s`,
        );
      said = true;
      await sleep(2_000, stopping.signal);
    }
  }

  async function greet(peer: string): Promise<void> {
    await awaitPeer(peer);
    const request: OutboxRequest = { to: peer, phase: "greeting", text: config.greetText };
    const deadline = Date.now() + config.greetForMs;
    for (let attempt = 1, wait = 500; !stopping.signal.aborted; attempt++, wait = Math.min(wait * 2, 10_000)) {
      try {
        const q = await ifp.send(request);
        log.info(
          `greeted ${showId(peer)}: ${showId(q.message_id)} queued, thread ${showId(q.message.headers.conversation_id)}: ${showText(config.greetText)}`,
        );
        await follow(q.message_id, peer);
        return;
      } catch (err) {
        if (!transient(err)) return log.warn(`the local API refused the greeting to ${showId(peer)}: ${describe(err)}`);
        if (Date.now() + wait > deadline)
          return log.warn(`gave up greeting ${showId(peer)} after ${attempt} attempts: ${describe(err)}`);
        if (attempt === 1 || attempt % 10 === 0)
          log.info(
            `the local API at ${config.localApi} does not answer yet (${describe(err)}); retrying the greeting to ${showId(peer)}`,
          );
        await sleep(wait, stopping.signal);
      }
    }
  }

  /** Follow a greeting until it is delivered or given up, logging each new state (bounded: one hour). */
  async function follow(messageId: string, peer: string): Promise<void> {
    let last = "queued";
    const until = Date.now() + 3_600_000;
    while (!stopping.signal.aborted && Date.now() < until) {
      await sleep(1_000, stopping.signal);
      const record = await ifp.status(messageId).catch(() => undefined);
      if (!record || record.state === last) continue;
      last = record.state;
      const r = record.recipients[0];
      const why = r?.last_error
        ? ` (${r.last_error}${r.next_attempt_at ? `; next attempt at ${r.next_attempt_at}` : ""})`
        : "";
      log.info(`greeting ${showId(messageId)} to ${showId(peer)}: ${record.state}${why}`);
      if (["delivered", "failed", "undeliverable"].includes(record.state)) return;
    }
  }

  const server = createServer({ requestTimeout: 30_000, headersTimeout: 10_000 }, (req, res) => {
    route(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(config.port, config.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : config.port;
  const url = `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
  log.info(
    `listening for hand-offs on ${url}; local API ${config.localApi}; replies at most ${config.maxReplies} per conversation${config.answerReplies ? ", automatic replies answered too" : ""}`,
  );
  const greeted = Promise.all(config.greet.map((p) => greet(p))).then(() => undefined);

  return {
    url,
    server,
    greeted,
    async close() {
      stopping.abort();
      server.closeIdleConnections();
      await Promise.race([
        new Promise<void>((r) => server.close(() => r())),
        new Promise((r) => setTimeout(r, 5_000).unref()),
      ]);
      server.closeAllConnections();
    },
  };
}

/** Read a request body of at most `limit` bytes; 413 when a declared or counted length is over it. */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"]);
  const tooLarge = () =>
    new HttpError(413, "payload_too_large", `the hand-off body is over ${limit} bytes (IFP_APP_MAX_BODY_BYTES)`);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(tooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (err?: Error) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      if (err) reject(err);
      else resolve(Buffer.concat(chunks));
    };
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        // The rest is read and dropped (the server's request timeout bounds it), so that the
        // answer is not lost to a reset of a connection closed with unread data.
        done(tooLarge());
        req.resume();
        return;
      }
      chunks.push(c);
    };
    const onEnd = () => done();
    const onError = (err: Error) =>
      done(new HttpError(400, "invalid_format", `the body could not be read: ${err.message}`));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
  });
}
