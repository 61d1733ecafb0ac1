// Sending to an A2A agent (docs/a2a.md#sending-to-an-a2a-agent): an outbound IFP message whose
// recipient is `a2a:<agent card URL>` goes to that agent as an A2A SendMessage. The card is
// fetched with the runtime's hardened HTTP client (target policy, size cap, timeout), its
// signatures checked when it has any, and its first usable interface (JSONRPC or HTTP+JSON, A2A
// 1.x) chosen; the task is followed with GetTask until it is terminal or waits for input, for a
// bounded time; what the agent answered is handed to the application as an IFP reply.
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { z } from "zod";
import { classifyAnswer } from "../net/answer.ts";
import { type HttpClient, type HttpResult, ResponseTooLarge } from "../net/http-client.ts";
import { targetRefusedMessage } from "../net/targets.ts";
import { ProtocolError } from "../protocol/errors.ts";
import { signRequest } from "../protocol/http-signatures.ts";
import { A2A_RECIPIENT_PREFIX, type RecipientState } from "../protocol/local-api.ts";
import type { Message as IfpMessage } from "../protocol/message.ts";
import type { SigningKey } from "../protocol/signing.ts";
import { errorMessage } from "../util/errors.ts";
import { MIN_TOKEN_LENGTH, tokenFile } from "../util/token-file.ts";
import { type CardJwsHeader, CardSignatureError, keyOfJwks, verifyCardSignatures } from "./card.ts";
import type { HandOffMeta } from "./service.ts";
import { A2A_PROTOCOL_VERSION, INTERRUPTED, TERMINAL } from "./wire.ts";

export { A2A_RECIPIENT_PREFIX };

export type A2aDelivery = NonNullable<RecipientState["a2a"]>;

/** How one attempt to an A2A agent ended (the outbound delivery's Outcome, structurally). */
export type PeerOutcome =
  | { kind: "delivered"; via: string; status: number; decision?: string; a2a?: A2aDelivery }
  | { kind: "retry"; via?: string; status?: number; error: string; afterMs?: number; notBeforeMs?: number }
  | { kind: "failed"; via?: string; status?: number; error: string; a2a?: A2aDelivery };

export interface PeerLimits {
  /** Largest agent card (and JWKS) accepted. */
  maxCardBytes: number;
  /** Time allowed for fetching the card or its JWKS. */
  cardTimeoutMs: number;
  /** Time allowed for one SendMessage or GetTask. */
  requestTimeoutMs: number;
  /** Largest answer of SendMessage or GetTask accepted. */
  maxAnswerBytes: number;
  /** How long a task is followed (GetTask) after the agent took the message, at most. */
  followForMs: number;
  /** The longest pause between two GetTask; the first is 500 ms, doubling. */
  maxPollMs: number;
  /** How long a verified card is used without fetching it again. */
  cardFreshMs: number;
}

export const PEER_DEFAULTS: PeerLimits = {
  maxCardBytes: 64 * 1024,
  cardTimeoutMs: 5_000,
  requestTimeoutMs: 30_000,
  maxAnswerBytes: 1024 * 1024,
  followForMs: 10 * 60_000,
  maxPollMs: 5_000,
  cardFreshMs: 5 * 60_000,
};

export interface A2aPeersDeps {
  http: Pick<HttpClient, "request">;
  /** The agent's IFP signing key: every request is signed with it (RFC 9421), as the A2A face verifies. */
  signing: SigningKey;
  /** A bearer token for this card URL, when one is configured for it. */
  bearerFor?(cardUrl: string): string | undefined;
  /** Store an answer for the application (the inbox stream and its hand-off); resolves after the ack. */
  handOff(message: Record<string, unknown>, meta: HandOffMeta): Promise<void>;
  log: Logger;
  limits?: Partial<PeerLimits>;
  now?: () => number;
}

const Interface = z.looseObject({
  url: z.string().max(2048),
  protocolBinding: z.string().max(64),
  protocolVersion: z.string().max(32).optional(),
  tenant: z.string().max(256).optional(),
});
const Card = z.looseObject({
  name: z.string().max(1024).optional(),
  supportedInterfaces: z.array(z.unknown()).max(64),
  signatures: z.array(z.unknown()).optional(),
});

const BINDINGS = ["JSONRPC", "HTTP+JSON"] as const;
type Binding = (typeof BINDINGS)[number];

interface Peer {
  cardUrl: string;
  name?: string;
  url: string;
  binding: Binding;
  version: string;
  tenant?: string;
  signed: boolean;
}

/** The card could not be had or used: `final` unless a later attempt may fare better. */
class PeerError extends Error {
  readonly final: boolean;
  readonly status?: number;
  readonly retryAfterMs?: number;
  constructor(message: string, final: boolean, status?: number, retryAfterMs?: number) {
    super(message);
    this.final = final;
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

const A2aPart = z.looseObject({
  text: z.string().optional(),
  raw: z.string().optional(),
  url: z.string().optional(),
  data: z.unknown().optional(),
  filename: z.string().optional(),
  mediaType: z.string().optional(),
});
const A2aMessage = z.looseObject({
  messageId: z.string(),
  role: z.string().optional(),
  parts: z.array(A2aPart).max(1024).default([]),
  taskId: z.string().optional(),
  contextId: z.string().optional(),
});
const A2aTask = z.looseObject({
  id: z.string().min(1).max(256),
  contextId: z.string().max(256).optional(),
  status: z.looseObject({ state: z.string(), message: A2aMessage.optional() }),
  artifacts: z
    .array(
      z.looseObject({
        artifactId: z.string(),
        name: z.string().optional(),
        parts: z.array(A2aPart).max(1024).default([]),
      }),
    )
    .optional(),
  history: z.array(A2aMessage).optional(),
});
type A2aTask = z.infer<typeof A2aTask>;
type A2aMessage = z.infer<typeof A2aMessage>;
const SendResult = z.union([z.object({ task: A2aTask }), z.object({ message: A2aMessage })]);

/** The IFP message_id of the hand-off of an A2A agent's answer to the outbound message `ifpId`. */
export const peerReplyId = (ifpId: string): string =>
  `a2a-reply:${createHash("sha256").update(ifpId).digest("hex").slice(0, 32)}`;

/**
 * Whether a task is done with the message `ours`: terminal, or waiting for input with a status
 * that is not the one it had before `ours` (a follow-up's first answer is often the task as it
 * stood, still asking the question the follow-up answers).
 */
function settled(task: A2aTask, ours: string): boolean {
  if (TERMINAL.has(task.status.state)) return true;
  if (!INTERRUPTED.has(task.status.state)) return false;
  const asked = task.status.message?.messageId;
  return asked === undefined || !before(task, ours).has(asked);
}

/** The ids of the task's messages before `ours` in its history (none when `ours` is not there). */
function before(task: A2aTask, ours: string): Set<string> {
  const history = task.history ?? [];
  const i = history.findIndex((m) => m.messageId === ours);
  return new Set(i < 0 ? [] : history.slice(0, i).map((m) => m.messageId));
}

/** Sends outbound messages to A2A agents and hands their answers on. */
export class A2aPeers {
  private readonly deps: A2aPeersDeps;
  private readonly limits: PeerLimits;
  private readonly now: () => number;
  private readonly cards = new Map<string, { peer: Peer; until: number }>();

  constructor(deps: A2aPeersDeps) {
    this.deps = deps;
    this.limits = { ...PEER_DEFAULTS, ...deps.limits };
    this.now = deps.now ?? Date.now;
  }

  /** Whether a recipient id names an A2A agent. */
  static isA2a(recipient: string): boolean {
    return recipient.startsWith(A2A_RECIPIENT_PREFIX);
  }

  /**
   * One attempt: the card, the SendMessage, the task followed until it rests or `until` (the
   * message's deadline) or the follow bound, and the answer handed on. Delivered once the agent
   * took the message and its answer is stored for the application.
   */
  async deliver(message: IfpMessage, recipient: string, until = Infinity): Promise<PeerOutcome> {
    const cardUrl = recipient.slice(A2A_RECIPIENT_PREFIX.length);
    let peer: Peer;
    try {
      peer = await this.peer(cardUrl);
    } catch (err) {
      return asOutcome(err, cardUrl);
    }
    const a2a: A2aDelivery = { interface: peer.url, binding: peer.binding, card_signed: peer.signed };
    let outgoing: Record<string, unknown>;
    try {
      outgoing = toA2a(message);
    } catch (err) {
      return { kind: "failed", via: peer.url, error: (err as Error).message, a2a };
    }
    let result: z.infer<typeof SendResult>;
    try {
      result = await this.send(peer, outgoing);
    } catch (err) {
      return { ...asOutcome(err, peer.url), ...(err instanceof PeerError && err.final ? { a2a } : {}) } as PeerOutcome;
    }
    let task: A2aTask | undefined;
    let answer: A2aMessage | undefined;
    let decision: string;
    if ("message" in result) {
      answer = result.message;
      decision = "the agent answered with a message";
      Object.assign(a2a, { state: "MESSAGE", ...(answer.contextId ? { context_id: answer.contextId } : {}) });
    } else {
      const started = this.now();
      const ours = outgoing.messageId as string;
      task = await this.follow(peer, result.task, ours, Math.min(until, started + this.limits.followForMs));
      const seconds = Math.round((this.now() - started) / 1000);
      decision = settled(task, ours)
        ? `task ${task.id} ${task.status.state}`
        : `task ${task.id} still ${task.status.state} after following it for ${seconds} s; not followed further`;
      Object.assign(a2a, {
        task_id: task.id,
        state: task.status.state,
        ...(task.contextId ? { context_id: task.contextId } : {}),
      });
    }
    try {
      await this.handOffAnswer(message, recipient, peer, outgoing, task, answer);
    } catch (err) {
      const error = `the agent's answer could not be stored: ${errorMessage(err)}`;
      // Too large for the store: the same answer would be again.
      if (err instanceof ProtocolError && err.statusCode === 413) return { kind: "failed", via: peer.url, error, a2a };
      return { kind: "retry", via: peer.url, error };
    }
    return { kind: "delivered", via: peer.url, status: 200, decision, a2a };
  }

  /** The card's usable interface, from the cache while it is fresh. */
  private async peer(cardUrl: string): Promise<Peer> {
    const cached = this.cards.get(cardUrl);
    if (cached && cached.until > this.now()) return cached.peer;
    const res = await this.get(cardUrl, "the agent card");
    let json: unknown;
    try {
      json = JSON.parse(res.text);
    } catch {
      throw new PeerError(`the agent card at ${cardUrl} is not JSON`, true);
    }
    const card = Card.safeParse(json);
    if (!card.success || typeof json !== "object")
      throw new PeerError(`${cardUrl} is not an A2A agent card: it has no supportedInterfaces list`, true);
    const usable = card.data.supportedInterfaces
      .map((i) => Interface.safeParse(i))
      .filter((i) => i.success)
      .map((i) => i.data)
      .find(
        (i) =>
          (BINDINGS as readonly string[]).includes(i.protocolBinding) &&
          /^1(\.\d+)*$/.test(i.protocolVersion ?? "") &&
          URL.canParse(i.url) &&
          new URL(i.url).protocol === "https:",
      );
    if (!usable) {
      const offered = card.data.supportedInterfaces
        .map((i) => Interface.safeParse(i))
        .map((i) => (i.success ? `${i.data.protocolBinding} ${i.data.protocolVersion ?? "?"} at ${i.data.url}` : "?"));
      throw new PeerError(
        `the agent card at ${cardUrl} names no usable interface (JSONRPC or HTTP+JSON, A2A 1.x, https): it offers ${offered.join("; ") || "none"}`,
        true,
      );
    }
    let signed: boolean;
    try {
      ({ signed } = await verifyCardSignatures(json as Record<string, unknown>, (h) => this.keyOf(cardUrl, h)));
    } catch (err) {
      if (err instanceof CardSignatureError)
        throw new PeerError(`the agent card at ${cardUrl} is refused: its signature ${err.message}`, true);
      throw err;
    }
    const peer: Peer = {
      cardUrl,
      name: card.data.name,
      url: usable.url.replace(/\/+$/, ""),
      binding: usable.protocolBinding as Binding,
      version: usable.protocolVersion!,
      ...(usable.tenant ? { tenant: usable.tenant } : {}),
      signed,
    };
    if (this.cards.size >= 256) this.cards.delete(this.cards.keys().next().value!);
    this.cards.set(cardUrl, { peer, until: this.now() + this.limits.cardFreshMs });
    return peer;
  }

  /** The key a card's signature names: from its `jku`, a JWKS of the card's own origin. */
  private async keyOf(cardUrl: string, header: CardJwsHeader) {
    if (typeof header.jku !== "string") throw new CardSignatureError("names no JWKS (jku) to find its key in");
    if (!URL.canParse(header.jku) || new URL(header.jku).origin !== new URL(cardUrl).origin)
      throw new CardSignatureError(`names the JWKS ${header.jku}, which is not at the card's own origin`);
    const res = await this.get(header.jku, "the card's JWKS");
    let jwks: unknown;
    try {
      jwks = JSON.parse(res.text);
    } catch {
      throw new CardSignatureError(`names the JWKS ${header.jku}, which is not JSON`);
    }
    return keyOfJwks(jwks, header);
  }

  /** GET a card or a JWKS: capped, timed, through the target policy; 200 or a PeerError. */
  private async get(url: string, what: string): Promise<HttpResult> {
    let res: HttpResult;
    try {
      res = await this.deps.http.request(url, {
        // The 1.0 card: an agent serving 0.3 beside it answers a request without A2A-Version with 0.3's.
        headers: { accept: "application/json", "a2a-version": A2A_PROTOCOL_VERSION },
        timeoutMs: this.limits.cardTimeoutMs,
        maxBytes: this.limits.maxCardBytes,
      });
    } catch (err) {
      const refused = targetRefusedMessage(err);
      if (refused) throw new PeerError(`${what} at ${url} is refused as a target: ${refused}`, true);
      if (err instanceof ResponseTooLarge) throw new PeerError(`${what} at ${url} is refused: ${err.message}`, true);
      throw new PeerError(`cannot fetch ${what} at ${url}: ${causeOf(err)}`, false);
    }
    if (res.status !== 200) {
      const c = classifyAnswer(res.status, res.headers.get("retry-after"), this.now());
      throw new PeerError(
        `${what} at ${url} answered ${res.status}`,
        c.kind === "final" || c.kind === "delivered",
        res.status,
        c.kind === "later" || c.kind === "retry" ? c.retryAfterMs : undefined,
      );
    }
    return res;
  }

  /** The headers of a request to the agent: A2A's, a bearer token when one is configured, the IFP signature. */
  private async headers(peer: Peer, method: string, url: string, body?: string): Promise<Record<string, string>> {
    const token = this.deps.bearerFor?.(peer.cardUrl);
    return signRequest(
      {
        method,
        url,
        body,
        headers: {
          accept: "application/json",
          "a2a-version": peer.version,
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
      },
      this.deps.signing,
    );
  }

  /** SendMessage (returnImmediately: the task is followed with GetTask). */
  private async send(peer: Peer, message: Record<string, unknown>): Promise<z.infer<typeof SendResult>> {
    const params = {
      ...(peer.tenant ? { tenant: peer.tenant } : {}),
      message,
      configuration: { returnImmediately: true },
    };
    const raw = await this.call(peer, "SendMessage", params, "POST", "/message:send");
    const parsed = SendResult.safeParse(raw);
    if (!parsed.success)
      throw new PeerError(`the agent's answer to SendMessage is neither a task nor a message`, false);
    return parsed.data;
  }

  /** GetTask until the task rests or `until`; the task as it last stood. */
  private async follow(peer: Peer, task: A2aTask, ours: string, until: number): Promise<A2aTask> {
    let last = task;
    let pause = 500;
    while (!settled(last, ours) && this.now() + pause < until) {
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, this.limits.maxPollMs);
      try {
        const raw = await this.call(
          peer,
          "GetTask",
          { ...(peer.tenant ? { tenant: peer.tenant } : {}), id: last.id },
          "GET",
          `/tasks/${encodeURIComponent(last.id)}`,
        );
        const next = A2aTask.safeParse(raw);
        if (next.success && next.data.id === last.id) last = next.data;
        else this.deps.log.debug({ taskId: last.id }, "an A2A agent's GetTask answer is not its task");
      } catch (err) {
        // A failed poll is tried again at the next pause; a final refusal ends the following.
        if (err instanceof PeerError && err.final) {
          this.deps.log.warn({ taskId: last.id, err: err.message }, "stopped following an A2A task");
          break;
        }
      }
    }
    return last;
  }

  /** One call in the interface's binding; its result, or a PeerError saying whether to retry. */
  private async call(
    peer: Peer,
    method: string,
    params: Record<string, unknown>,
    restMethod: "GET" | "POST",
    restPath: string,
  ): Promise<unknown> {
    const rpc = peer.binding === "JSONRPC";
    const url = rpc ? peer.url : `${peer.url}${peer.tenant ? `/${encodeURIComponent(peer.tenant)}` : ""}${restPath}`;
    const httpMethod = rpc ? "POST" : restMethod;
    const body = rpc
      ? JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
      : restMethod === "POST"
        ? JSON.stringify(params)
        : undefined;
    let res: HttpResult;
    try {
      res = await this.deps.http.request(url, {
        method: httpMethod,
        headers: await this.headers(peer, httpMethod, url, body),
        ...(body !== undefined ? { body } : {}),
        timeoutMs: this.limits.requestTimeoutMs,
        maxBytes: this.limits.maxAnswerBytes,
      });
    } catch (err) {
      const refused = targetRefusedMessage(err);
      if (refused) throw new PeerError(`the interface ${url} is refused as a target: ${refused}`, true);
      if (err instanceof ResponseTooLarge)
        throw new PeerError(`the agent's answer to ${method} is refused: ${err.message}`, true, err.status);
      throw new PeerError(`network error: ${causeOf(err)}`, false);
    }
    const detail = errorText(res.text);
    if (res.status < 200 || res.status >= 300) {
      const c = classifyAnswer(res.status, res.headers.get("retry-after"), this.now());
      const why = c.kind === "final" ? (c.redirect ? "; redirects are not followed" : "; a 4xx is never retried") : "";
      throw new PeerError(
        `${method} answered ${res.status}${detail ? ` ${detail}` : ""}${why}`,
        c.kind === "final",
        res.status,
        c.kind === "later" || c.kind === "retry" ? c.retryAfterMs : undefined,
      );
    }
    let json: unknown;
    try {
      json = JSON.parse(res.text);
    } catch {
      throw new PeerError(
        `the agent's answer to ${method} is not JSON (${res.status}, ${res.text.length} bytes)`,
        false,
        res.status,
      );
    }
    if (!rpc) return json;
    const envelope = json as { jsonrpc?: unknown; result?: unknown; error?: { code?: unknown; message?: unknown } };
    if (envelope?.jsonrpc !== "2.0" || (envelope.result === undefined && envelope.error === undefined))
      throw new PeerError(`the agent's answer to ${method} is not a JSON-RPC 2.0 response`, false, res.status);
    if (envelope.error !== undefined) {
      const code = typeof envelope.error?.code === "number" ? envelope.error.code : undefined;
      // -32603 (internal: the agent's store or limits) may pass; every other error is the agent's last word.
      throw new PeerError(
        `${method} answered JSON-RPC error ${code ?? "?"}: ${String(envelope.error?.message ?? "").slice(0, 300)}`,
        code !== -32603,
        res.status,
      );
    }
    return envelope.result;
  }

  /** The agent's answer as an IFP reply to `message`, stored for the application. */
  private async handOffAnswer(
    message: IfpMessage,
    recipient: string,
    peer: Peer,
    sent: Record<string, unknown>,
    task: A2aTask | undefined,
    answer: A2aMessage | undefined,
  ): Promise<void> {
    const ours = sent.messageId as string;
    const messages: A2aMessage[] = [];
    // The agent's messages after ours: what it said before (an earlier turn of the task) is not repeated.
    const seen = new Set<string>([ours, ...(task ? before(task, ours) : [])]);
    const add = (m: A2aMessage | undefined) => {
      if (!m || seen.has(m.messageId) || m.role === "ROLE_USER") return;
      seen.add(m.messageId);
      messages.push(m);
    };
    add(answer);
    for (const m of task?.history ?? []) add(m);
    add(task?.status.message);
    const text = messages.flatMap((m) => m.parts.filter((p) => p.text !== undefined).map((p) => p.text!)).join("\n");
    const parts = [
      ...messages.flatMap((m) => m.parts.filter((p) => p.text === undefined).map((p) => toIfpPart(p))),
      ...(task?.artifacts ?? []).flatMap((a) => a.parts.map((p) => toIfpPart(p, a.name ?? a.artifactId))),
    ];
    const h = message.headers;
    const reply = {
      ifp: 4,
      headers: {
        message_id: peerReplyId(h.message_id),
        date: new Date(this.now()).toISOString(),
        from: { agent: recipient, ...(peer.name ? { display: peer.name } : {}) },
        to: [{ agent: h.from.agent }],
        conversation_id: h.conversation_id,
        sequence: h.sequence + 1,
        phase: "reply",
        content_type: "text/plain; charset=utf-8",
        thread: { in_reply_to: h.message_id, references: [...(h.thread?.references ?? []), h.message_id] },
        extensions: {
          a2a: {
            origin: "a2a-peer",
            card: peer.cardUrl,
            interface: peer.url,
            card_signed: peer.signed,
            ...(task ? { task_id: task.id, state: task.status.state } : { state: "MESSAGE" }),
            ...((task?.contextId ?? answer?.contextId) ? { context_id: task?.contextId ?? answer?.contextId } : {}),
            message_ids: messages.map((m) => m.messageId),
            ...(task?.artifacts?.length ? { artifact_ids: task.artifacts.map((a) => a.artifactId) } : {}),
          },
        },
      },
      body: { ...(text ? { text } : {}), ...(parts.length ? { parts } : {}) },
    };
    await this.deps.handOff(reply, {
      messageId: reply.headers.message_id,
      sender: recipient,
      authLevel: peer.signed ? 1 : 0,
      source: peer.signed ? "a2a-peer:signed-card" : "a2a-peer:card",
      conversationId: h.conversation_id,
    });
  }
}

/**
 * The bearer tokens presented to A2A agents (the mounted spec.a2a.peerTokenSecret): one a line,
 * an agent card's URL or an https origin, white space, the token (16 characters at least). A
 * card's own URL wins over its origin. Read again when the file changes, as the callers' tokens.
 */
export function peerTokenFile(path: string, log?: Logger, now = Date.now): (cardUrl: string) => string | undefined {
  const lines = tokenFile(path, "A2A peer token lines", log, now);
  let parsed: { of: readonly string[]; map: Map<string, string> } | undefined;
  return (cardUrl) => {
    const current = lines();
    if (parsed?.of !== current) {
      const map = new Map<string, string>();
      let bad = 0;
      for (const line of current) {
        const [where, token, ...rest] = line.split(/\s+/);
        if (!where || !token || rest.length || token.length < MIN_TOKEN_LENGTH || !URL.canParse(where)) bad++;
        else map.set(where.replace(/\/+$/, ""), token);
      }
      if (bad)
        log?.error(
          { path, refused: bad },
          "A2A peer token lines are <card URL or https origin> <token of 16 characters or more>",
        );
      parsed = { of: current, map };
    }
    const url = cardUrl.replace(/\/+$/, "");
    return parsed.map.get(url) ?? (URL.canParse(url) ? parsed.map.get(new URL(url).origin) : undefined);
  };
}

/** An outbound IFP message as an A2A Message (role user); its messageId is the IFP message_id. */
function toA2a(message: IfpMessage): Record<string, unknown> {
  const body = message.body as { text?: unknown; parts?: unknown[]; ciphertext?: unknown };
  if (body.ciphertext !== undefined || message.security?.encryption)
    throw new Error("the message is encrypted end to end; an A2A agent cannot read it (spec.encryption)");
  const parts: Record<string, unknown>[] = [];
  if (typeof body.text === "string" && body.text) parts.push({ text: body.text });
  for (const p of (body.parts ?? []) as {
    content_type: string;
    name?: string;
    content?: unknown;
    encoding?: string;
  }[]) {
    const common = { mediaType: p.content_type, ...(p.name ? { filename: p.name } : {}) };
    if (p.encoding === "base64" && typeof p.content === "string") parts.push({ raw: p.content, ...common });
    else if (p.content_type.startsWith("text/uri-list") && typeof p.content === "string")
      parts.push({ url: p.content.trim(), ...common });
    else if (typeof p.content === "string" && !p.content_type.includes("json"))
      parts.push({ text: p.content, ...common });
    else parts.push({ data: p.content ?? null, ...common });
  }
  if (!parts.length) throw new Error("the message has no text and no parts: an A2A message needs at least one part");
  const ext = (message.headers.extensions?.a2a ?? {}) as { context_id?: unknown; task_id?: unknown };
  return {
    messageId: message.headers.message_id,
    role: "ROLE_USER",
    parts,
    ...(typeof ext.context_id === "string" && ext.context_id ? { contextId: ext.context_id } : {}),
    ...(typeof ext.task_id === "string" && ext.task_id ? { taskId: ext.task_id } : {}),
    metadata: {
      ifp: {
        message_id: message.headers.message_id,
        from: message.headers.from.agent,
        conversation_id: message.headers.conversation_id,
      },
    },
  };
}

/** An A2A part as an IFP body part (as the A2A face maps a caller's parts). */
function toIfpPart(p: z.infer<typeof A2aPart>, name = p.filename): Record<string, unknown> {
  const named = name ? { name } : {};
  if (p.text !== undefined) return { content_type: p.mediaType || "text/plain", ...named, content: p.text };
  if (p.data !== undefined) return { content_type: p.mediaType || "application/json", ...named, content: p.data };
  if (p.url !== undefined) return { content_type: p.mediaType || "text/uri-list", ...named, content: p.url };
  return {
    content_type: p.mediaType || "application/octet-stream",
    ...named,
    encoding: "base64",
    content: p.raw ?? "",
  };
}

function asOutcome(err: unknown, via: string): PeerOutcome {
  if (!(err instanceof PeerError)) return { kind: "retry", via, error: errorMessage(err) };
  const status = err.status !== undefined ? { status: err.status } : {};
  if (err.final) return { kind: "failed", via, error: err.message, ...status };
  const later = err.status !== undefined && [408, 425, 429].includes(err.status);
  return {
    kind: "retry",
    via,
    error: err.message,
    ...status,
    ...(err.retryAfterMs !== undefined
      ? later
        ? { afterMs: err.retryAfterMs }
        : { notBeforeMs: err.retryAfterMs }
      : {}),
  };
}

function causeOf(err: unknown): string {
  const cause = (err as Error)?.cause;
  return errorMessage(cause instanceof Error ? cause : err);
}

/** A short description of an error body (JSON-RPC, google.rpc.Status or IFP), or nothing. */
function errorText(body: string): string {
  try {
    const e = JSON.parse(body) as { error?: { message?: unknown; status?: unknown }; message?: unknown };
    const m = e?.error?.message ?? e?.message;
    if (typeof m === "string") return m.slice(0, 300);
  } catch {
    // not JSON
  }
  return "";
}
