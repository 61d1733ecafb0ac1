// Requests of a NATS connection answered on one reply subscription of its own, correlated by a
// counter: what the JetStream and KV clients of the runtime send (publishes, direct gets, API
// calls) without the client library's per-request timer, Promise.race and the Error its request
// makes after every answered request. The answers, timeouts and errors are those of the library's
// request(): the reply message, TimeoutError, a RequestError caused by NoRespondersError (the
// JetStream clients map both as they do for the library's own requests).
import {
  createInbox,
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
  type Msg,
  type NatsConnection,
  type Payload,
  type RequestOptions,
  type Subscription,
} from "@nats-io/transport-node";

/** How often the requests waiting are looked at for their timeouts. */
const SWEEP_MS = 100;

interface Waiting {
  subject: string;
  deadline: number;
  resolve: (m: Msg) => void;
  reject: (err: Error) => void;
}

/**
 * `nc` with its request() answered on one reply subscription (`<inbox prefix>.<nuid>.*`, made at
 * the first request and again after the connection refused or closed it). Everything else is the
 * connection's own. A request with its own reply subject or `noMux` is the library's. The same
 * connection gets the same one each time.
 */
export function sharingReplies(nc: NatsConnection): NatsConnection {
  const shared = proxies.get(nc);
  if (shared) return shared;
  const replies = new SharedReplies(nc);
  const bound = new Map<PropertyKey, unknown>();
  const proxy = new Proxy(nc, {
    get(target, p) {
      if (p === "request") return replies.request;
      const v = Reflect.get(target, p, target);
      if (typeof v !== "function") return v;
      let b = bound.get(p);
      if (!b) bound.set(p, (b = (v as (...a: unknown[]) => unknown).bind(target)));
      return b;
    },
  });
  proxies.set(nc, proxy);
  return proxy;
}

/** One reply subscription per connection, however many clients of it share its replies. */
const proxies = new WeakMap<NatsConnection, NatsConnection>();

class SharedReplies {
  private readonly nc: NatsConnection;
  private readonly waiting = new Map<string, Waiting>();
  private sub: Subscription | undefined;
  private base = "";
  private next = 0;
  private sweeper: ReturnType<typeof setInterval> | undefined;

  constructor(nc: NatsConnection) {
    this.nc = nc;
    // A publish the server refuses for permissions fails the request waiting on that subject, as
    // the library's does, rather than its timeout.
    void (async () => {
      for await (const s of nc.status()) {
        const err = (s as { error?: unknown }).error;
        if (s.type !== "error" || !(err instanceof PermissionViolationError) || err.operation !== "publish") continue;
        for (const [token, w] of this.waiting)
          if (w.subject === err.subject) {
            this.settle(token)?.reject(err);
            break;
          }
      }
    })().catch(() => {});
  }

  readonly request = (subject: string, data?: Payload, opts: RequestOptions = { timeout: 1000 }): Promise<Msg> => {
    if (opts.noMux || opts.reply) return this.nc.request(subject, data, opts);
    const timeout = opts.timeout || 1000;
    if (timeout < 1) return this.nc.request(subject, data, opts);
    return new Promise<Msg>((resolve, reject) => {
      let token: string | undefined;
      try {
        this.subscription();
        token = (this.next++).toString(36);
        this.waiting.set(token, { subject, deadline: Date.now() + timeout, resolve, reject });
        this.sweeper ??= setInterval(() => this.sweep(), SWEEP_MS).unref();
        this.nc.publish(subject, data, { reply: `${this.base}${token}`, headers: opts.headers });
      } catch (err) {
        if (token !== undefined) this.settle(token);
        reject(err as Error);
      }
    });
  };

  private subscription(): Subscription {
    if (this.sub && !this.sub.isClosed()) return this.sub;
    this.base = `${createInbox((this.nc as unknown as { options: { inboxPrefix?: string } }).options.inboxPrefix)}.`;
    const sub = this.nc.subscribe(`${this.base}*`, {
      callback: (err, m) => {
        if (err) return this.failAll(err, sub);
        const w = this.settle(m.subject.slice(this.base.length));
        if (!w) return;
        if (m.data.length === 0 && m.headers?.code === 503) {
          const cause = new NoRespondersError(w.subject);
          w.reject(new RequestError(cause.message, { cause }));
        } else w.resolve(m);
      },
    });
    // The connection closed, or the server refused the subscription: what waits on it fails.
    const closed = (err: unknown) =>
      this.failAll(err instanceof Error ? err : new RequestError("connection closed"), sub);
    void sub.closed.then(closed, closed);
    this.sub = sub;
    return sub;
  }

  private failAll(err: Error, sub: Subscription): void {
    if (this.sub === sub) this.sub = undefined;
    const all = [...this.waiting.values()];
    this.waiting.clear();
    for (const w of all) w.reject(err);
  }

  private settle(token: string): Waiting | undefined {
    const w = this.waiting.get(token);
    if (w) this.waiting.delete(token);
    return w;
  }

  private sweep(): void {
    const now = Date.now();
    for (const [token, w] of this.waiting) if (now >= w.deadline) this.settle(token)?.reject(new TimeoutError());
    if (!this.waiting.size && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }
}
