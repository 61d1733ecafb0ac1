// TestInbox: the HTTPS inbox of `ifp check` on loopback, with virtual agents, relays and webhook
// endpoints, which records every request it gets and answers each as its scenario says.
import { createServer as httpServer, type IncomingHttpHeaders, type Server as HttpServer } from "node:http";
import { createServer as httpsServer, type Server as HttpsServer } from "node:https";
import type { TLSSocket } from "node:tls";
import { parseJson } from "./common.ts";

/** The most the kit's inbox reads of one request. */
const MAX_BODY = 4 * 1024 * 1024;
/** The most requests it keeps: a target that floods it is not recorded further. */
const MAX_KEPT = 1000;

/** One request the kit's inbox received. */
export interface Delivery {
  at: number;
  method: string;
  /** The path and query as received. */
  path: string;
  /** The absolute URL the request was sent to, under the kit's own name for itself. */
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  json: unknown;
  /** The mailbox it was routed to ("" when none), and what it was answered. */
  mailbox: string;
  status: number;
  /** The TLS version the sender negotiated (undefined on the plain-HTTP listener). */
  tls?: string;
}

export interface Answer {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/** What a mailbox answers to the nth delivery (1-based) of one message_id. */
export type Behaviour = (nth: number, d: Delivery) => Answer;

export const accept: Behaviour = (_n, d) => ({ status: 202, body: { status: "accepted", message_id: messageIdOf(d) } });
export const refuse: Behaviour = () => ({
  status: 400,
  body: {
    status: "error",
    code: "invalid_format",
    message: "ifp check: refused on purpose; a sender must not retry a 4xx",
  },
});
/** 500 for the first `failures` deliveries of a message, then 202. */
export const failThenAccept =
  (failures: number): Behaviour =>
  (n, d) =>
    n <= failures
      ? {
          status: 500,
          body: {
            status: "error",
            code: "internal_error",
            message: "ifp check: failing on purpose; a sender should retry",
          },
        }
      : accept(n, d);

/** 429 with `Retry-After: <seconds>` for the first delivery of a message, then 202. */
export const limitThenAccept =
  (retryAfterS: number): Behaviour =>
  (n, d) =>
    n === 1
      ? {
          status: 429,
          headers: { "retry-after": String(retryAfterS) },
          body: {
            status: "error",
            code: "rate_limited",
            message: `ifp check: limited on purpose; a sender should wait the ${retryAfterS} s of Retry-After`,
          },
        }
      : accept(n, d);

export function messageIdOf(d: Pick<Delivery, "json">): string | undefined {
  const id = (d.json as { headers?: { message_id?: unknown } } | undefined)?.headers?.message_id;
  return typeof id === "string" ? id : undefined;
}

interface VirtualAgent {
  identity: (agentId: string) => unknown;
  capabilities?: unknown;
  inbox: Behaviour;
  /** Relays under `<agent>/r/<name>`, each with its answer to a publish. */
  relays?: Record<string, Behaviour>;
}

/**
 * The kit's own HTTPS inbox, on loopback: virtual agents under `/s/<name>` (identity document,
 * inbox, and relays under `/s/<name>/r/<relay>`), the agent of `--key` at the root (its
 * replies are sorted into mailboxes by the message they answer), webhook endpoints under
 * `/hook/<name>`, and a plain-HTTP listener that only records what reaches it (nothing should).
 * Every request is recorded, read to a bound; nothing it receives is executed or followed.
 */
export class TestInbox {
  readonly deliveries: Delivery[] = [];
  readonly plain: Delivery[] = [];
  private readonly agents = new Map<string, VirtualAgent>();
  private readonly replies = new Map<string, { mailbox: string; behaviour: Behaviour }>();
  private root?: { agentId: string; identity: unknown };
  private readonly hooks = new Set<string>();
  private readonly waiters = new Set<() => void>();

  private readonly server: HttpsServer;
  private readonly plainServer: HttpServer;
  /** The kit's https base URL, under the name its certificate carries. */
  readonly base: string;
  /** The plain-HTTP listener's base URL, offered as a peer's inbox to see that nothing uses it. */
  readonly plainBase: string;

  private constructor(server: HttpsServer, plainServer: HttpServer, base: string, plainBase: string) {
    this.server = server;
    this.plainServer = plainServer;
    this.base = base;
    this.plainBase = plainBase;
  }

  /** Listen on 127.0.0.1 (`port`, 0 for any) with the certificate the target trusts; `host` is the name in URLs (the certificate's). */
  static async start(opts: { cert: string; key: string; port?: number; host?: string }): Promise<TestInbox> {
    const host = opts.host ?? "localhost";
    let inbox: TestInbox | undefined;
    const server = httpsServer({ cert: opts.cert, key: opts.key, minVersion: "TLSv1.2" }, (req, res) =>
      inbox!.handle(req, res, false),
    );
    const plainServer = httpServer((req, res) => inbox!.handle(req, res, true));
    server.headersTimeout = plainServer.headersTimeout = 10_000;
    server.requestTimeout = plainServer.requestTimeout = 30_000;
    await new Promise<void>((resolve, reject) =>
      server.once("error", reject).listen(opts.port ?? 0, "127.0.0.1", resolve),
    );
    await new Promise<void>((resolve, reject) => plainServer.once("error", reject).listen(0, "127.0.0.1", resolve));
    const port = (server.address() as { port: number }).port;
    const plainPort = (plainServer.address() as { port: number }).port;
    inbox = new TestInbox(server, plainServer, `https://${host}:${port}`, `http://127.0.0.1:${plainPort}`);
    return inbox;
  }

  /** A virtual agent at `<base>/s/<name>`; its agent id is that URL. */
  agent(name: string, spec: VirtualAgent): string {
    this.agents.set(name, spec);
    return `${this.base}/s/${name}`;
  }

  /** The `--key` agent at the root, whose identity document names its key. */
  setRoot(agentId: string, identity: unknown): void {
    this.root = { agentId, identity };
  }

  /** Replies (at the root) to `messageId` — by thread.in_reply_to or its conversation — go to `mailbox`. */
  routeReplies(messageId: string, conversationId: string, mailbox: string, behaviour: Behaviour): void {
    this.replies.set(messageId, { mailbox, behaviour });
    this.replies.set(conversationId, { mailbox, behaviour });
  }

  /** A webhook URL whose POSTs land in mailbox `hook:<name>`, answered 200. */
  hook(name: string): string {
    this.hooks.add(name);
    return `${this.base}/hook/${name}`;
  }

  mailbox(name: string): Delivery[] {
    return this.deliveries.filter((d) => d.mailbox === name);
  }

  /** Resolves once `done()` holds or at `deadline` (ms since the epoch). */
  async until(done: () => boolean, deadline: number): Promise<boolean> {
    while (!done()) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(finish, Math.min(left, 1000));
        function finish() {
          clearTimeout(timer);
          resolve();
        }
        this.waiters.add(finish);
      });
    }
    return true;
  }

  private handle(
    req: import("node:http").IncomingMessage,
    res: import("node:http").ServerResponse,
    plain: boolean,
  ): void {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) req.destroy();
      else chunks.push(c);
    });
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const path = req.url ?? "/";
      const d: Delivery = {
        at: Date.now(),
        method: req.method ?? "GET",
        path,
        url: `${plain ? this.plainBase : this.base}${path}`,
        headers: req.headers,
        body,
        json: parseJson(body.toString("utf8")),
        mailbox: "",
        status: 404,
        tls: plain ? undefined : ((req.socket as TLSSocket).getProtocol?.() ?? undefined),
      };
      const answer = plain
        ? { status: 404, body: { status: "error", code: "not_found", message: "plain HTTP is not IFP" } }
        : this.route(d);
      d.status = answer.status;
      const list = plain ? this.plain : this.deliveries;
      if (list.length < MAX_KEPT) list.push(d);
      const text = answer.body === undefined ? "" : JSON.stringify(answer.body);
      res
        .writeHead(answer.status, { ...(text ? { "content-type": "application/json" } : {}), ...answer.headers })
        .end(text);
      for (const w of [...this.waiters]) {
        this.waiters.delete(w);
        w();
      }
    });
  }

  private route(d: Delivery): Answer {
    const path = d.path.split("?")[0]!;
    const hook = /^\/hook\/([^/]+)$/.exec(path);
    if (hook && d.method === "POST" && this.hooks.has(hook[1]!)) {
      d.mailbox = `hook:${hook[1]}`;
      return { status: 200 };
    }
    const virtual = /^\/s\/([^/]+)(\/.*)$/.exec(path);
    if (virtual) {
      const agent = this.agents.get(virtual[1]!);
      if (!agent) return notFound;
      const agentId = `${this.base}/s/${virtual[1]}`;
      return this.serveAgent(d, virtual[1]!, agentId, agent, virtual[2]!);
    }
    if (this.root) return this.serveRoot(d, path);
    return notFound;
  }

  private serveAgent(d: Delivery, name: string, agentId: string, agent: VirtualAgent, rest: string): Answer {
    if (d.method === "GET" && rest === "/.well-known/agent/identity")
      return { status: 200, body: agent.identity(agentId) };
    if (d.method === "GET" && rest === "/.well-known/agent/capabilities")
      return { status: 200, body: agent.capabilities ?? capabilityDocument(agentId) };
    if (d.method === "POST" && rest === "/.well-known/agent/inbox") {
      d.mailbox = name;
      return agent.inbox(this.nth(d), d);
    }
    const relay = /^\/r\/([^/]+)\/relay\/publish$/.exec(rest);
    if (d.method === "POST" && relay && agent.relays?.[relay[1]!]) {
      d.mailbox = `${name}/r/${relay[1]}`;
      return agent.relays[relay[1]!]!(this.nth(d), d);
    }
    return notFound;
  }

  private serveRoot(d: Delivery, path: string): Answer {
    const root = this.root!;
    if (d.method === "GET" && path === "/.well-known/agent/identity") return { status: 200, body: root.identity };
    if (d.method === "GET" && path === "/.well-known/agent/capabilities")
      return { status: 200, body: capabilityDocument(root.agentId) };
    if (d.method !== "POST" || path !== "/.well-known/agent/inbox") return notFound;
    const h = (d.json as { headers?: { thread?: { in_reply_to?: unknown }; conversation_id?: unknown } } | undefined)
      ?.headers;
    const key = [h?.thread?.in_reply_to, h?.conversation_id].find(
      (k): k is string => typeof k === "string" && this.replies.has(k),
    );
    const route = key ? this.replies.get(key)! : { mailbox: "root", behaviour: accept };
    d.mailbox = route.mailbox;
    return route.behaviour(this.nth(d), d);
  }

  /** 1 + how many deliveries of this message the mailbox already had. */
  private nth(d: Delivery): number {
    const id = messageIdOf(d);
    return 1 + this.deliveries.filter((x) => x.mailbox === d.mailbox && messageIdOf(x) === id).length;
  }

  async close(): Promise<void> {
    for (const w of [...this.waiters]) w();
    this.server.closeAllConnections();
    this.plainServer.closeAllConnections();
    await Promise.all([new Promise((r) => this.server.close(r)), new Promise((r) => this.plainServer.close(r))]);
  }
}

const notFound: Answer = { status: 404, body: { status: "error", code: "not_found", message: "no such endpoint" } };

function capabilityDocument(agentId: string) {
  return {
    ifp: 7,
    agent_id: agentId,
    capabilities: [{ name: "message.receive", description: "The conformance kit's inbox" }],
    ifp_support: [3, 4, 5, 6, 7, 8],
    updated: "2026-01-01T00:00:00Z",
  };
}
