// Nats: a process's NATS connection (the runtimes', and the operator's), connecting in the
// background, reconnecting for ever, re-reading its credentials file at each authentication, and
// telling the HTTP layer whether a publish can succeed now.
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import {
  AuthorizationError,
  connect,
  credsAuthenticator,
  UserAuthenticationExpiredError,
  type Authenticator,
  type NatsConnection,
} from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { unavailable } from "../protocol/errors.ts";
import { errorMessage } from "../util/errors.ts";
import { retry } from "../util/retry.ts";
import { FollowingBucket } from "./following-bucket.ts";
import type { NatsLink } from "./link.ts";
import { perAgentLayout, type JetStreamLayout, type KeyIndex } from "./layout.ts";
import { sharingReplies } from "./replies.ts";
import { placementOf, type JetStreamPlacement, type Replicas } from "./streams.ts";
import type { KV, KvOptions } from "@nats-io/kv";

export interface NatsOptions {
  /** One or more server URLs, comma separated. */
  url: string;
  name: string;
  /** A NATS credentials file (JWT + NKey seed). */
  credsFile?: string;
  /** NATS credentials (JWT + NKey seed) given at each authentication, instead of a file. */
  creds?: () => Uint8Array;
  user?: string;
  pass?: string;
  token?: string;
  /** Replicas of the KV buckets the runtime makes (bucket()): as its streams'. Default 1. */
  replicas?: Replicas;
  /**
   * The prefix of the subjects replies and consumer deliveries come in on (default `_INBOX`). A
   * runtime uses its own, the only one its NATS credential lets it subscribe to.
   */
  inboxPrefix?: string;
  /**
   * Verify the server's TLS certificate with these CA certificates instead of the system roots:
   * a PEM file, re-read at every (re)connect (the runtime's trust bundle, which the kubelet keeps
   * current), or a function asked at every (re)connect (the operator's install CAs). Without it a
   * server that requires TLS is verified with the system roots.
   */
  tls?: { caFile: string } | { ca: () => string };
  /** Where the runtime's JetStream objects are and what it may do with them (default: its own account's, per-agent). */
  layout?: JetStreamLayout;
  /** Told each time the connection is back after a loss (a reconnect, or a new connection after a closed one). */
  onReconnect?: () => void;
}

/**
 * The NATS connection of a runtime process. It connects in the background, reconnects for
 * ever (with a new connection when the client gives one up), and tells the HTTP layer whether
 * a publish can succeed right now, so that a request is answered 503 at once while NATS is
 * away instead of waiting for a timeout.
 */
export class Nats implements NatsLink {
  nc: NatsConnection | undefined;
  js!: JetStreamClient;
  jsm!: JetStreamManager;
  private connected = false;
  /** The calls whileConnected() is waiting on, each told when the connection is lost. */
  private readonly waiting = new Set<() => void>();
  private readonly closing = new AbortController();
  private readonly opts: NatsOptions;
  private readonly log: Logger;

  constructor(opts: NatsOptions, log: Logger) {
    this.opts = opts;
    this.log = log;
  }

  /**
   * A KV bucket of the runtime's: on the per-agent layout made with the runtime's replicas when
   * it does not exist yet; on the isolated one the tenant's bucket, seen through the runtime's keys
   * (`index`: the listings of its keys kept there). The handle follows the connection: after a new
   * connection replaced a closed one, its next call opens the bucket again on the new connection,
   * so a store keeps one handle for the life of the process.
   */
  async bucket(name: string, opts: Partial<KvOptions>, index?: KeyIndex): Promise<KV> {
    const open = (js: JetStreamClient) =>
      this.layout.bucket(js, name, opts, this.opts.replicas ?? 1, this.placement, index);
    const js = this.js;
    return new FollowingBucket(() => this.js, open, js, await open(js));
  }

  get layout(): JetStreamLayout {
    return this.opts.layout ?? perAgentLayout;
  }

  /** What the JetStream deployment behind the connection can hold (its server's INFO). */
  get placement(): JetStreamPlacement {
    return placementOf(this.nc ?? {});
  }

  get isConnected(): boolean {
    return this.connected && !!this.nc && !this.nc.isClosed();
  }

  /**
   * `call`, a NATS call already under way (a JetStream publish, a KV read or write), abandoned
   * as soon as the connection reports a disconnect: it then rejects with 503 `unavailable`
   * instead of waiting for its timeout or for NATS to come back, so that a request in flight
   * when NATS goes away is answered at once like those that arrive afterwards. The same when the
   * connection is already down. What the abandoned call does afterwards is ignored; a publish
   * abandoned this way may still be stored once the client reconnects (docs/reliability.md).
   */
  whileConnected<T>(call: Promise<T>, what = "the message store (NATS JetStream)"): Promise<T> {
    // The call's own outcome no longer matters to anyone once it is abandoned.
    call.catch(() => {});
    if (!this.isConnected) return Promise.reject(unavailable(`${what} is not reachable`));
    let lost!: () => void;
    const gone = new Promise<never>((_, reject) => {
      lost = () =>
        reject(unavailable(`${what} became unreachable while the request was being handled; it may be retried`));
    });
    this.waiting.add(lost);
    return Promise.race([call, gone]).finally(() => this.waiting.delete(lost));
  }

  /** Tell every call whileConnected() is waiting on that the connection is lost. */
  private lost(): void {
    this.connected = false;
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const lost of waiting) lost();
  }

  /** Connect, retrying with backoff until it works or close() is called. */
  async start(signal?: AbortSignal): Promise<void> {
    const stop = signal ? AbortSignal.any([this.closing.signal, signal]) : this.closing.signal;
    try {
      await retry(
        async () => {
          const nc = await connect({
            servers: this.opts.url.split(",").map((s) => s.trim()),
            name: this.opts.name,
            maxReconnectAttempts: -1,
            reconnectTimeWait: 500,
            timeout: 5_000,
            // No stack capture per request: publishes are the hot path and errors are logged with context anyway.
            noAsyncTraces: true,
            user: this.opts.user,
            pass: this.opts.pass,
            token: this.opts.token,
            inboxPrefix: this.opts.inboxPrefix,
            tls: tlsOptions(this.opts.tls),
            authenticator: this.opts.credsFile
              ? whenAsked(credsAuthenticator(rereading(this.opts.credsFile, await readFile(this.opts.credsFile))))
              : this.opts.creds
                ? whenAsked(credsAuthenticator(this.opts.creds))
                : undefined,
          });
          if (stop.aborted) {
            await nc.close().catch(() => {});
            return;
          }
          // The JetStream and KV clients' requests, answered on one reply subscription (replies.ts).
          const requests = sharingReplies(nc);
          const jsm = await jetstreamManager(requests, { timeout: 5_000, checkAPI: this.layout.checkApi }).catch(
            async (err) => {
              await nc.close().catch(() => {});
              throw err;
            },
          );
          const again = this.nc !== undefined;
          this.nc = nc;
          this.js = jetstream(requests, { timeout: 5_000 });
          this.jsm = jsm;
          this.connected = true;
          this.watch(nc);
          this.log.info({ server: nc.getServer() }, "connected to NATS");
          if (again) this.opts.onReconnect?.();
        },
        {
          signal: stop,
          initialMs: 250,
          maxMs: 5_000,
          onError: (err, retryInMs) => {
            const refused = configurationProblem(err);
            if (refused) this.log.error({ err: errorMessage(err), retryInMs }, refused);
            else this.log.warn({ err: errorMessage(err), retryInMs }, "NATS not reachable yet");
          },
        },
      );
    } catch (err) {
      if (stop.aborted) throw new Error("closed before NATS was reached");
      throw err;
    }
    if (stop.aborted) throw new Error("closed before NATS was reached");
  }

  private watch(nc: NatsConnection): void {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") {
          this.lost();
          this.log.warn("disconnected from NATS");
        } else if (s.type === "reconnect") {
          this.connected = true;
          this.log.info("reconnected to NATS");
          this.opts.onReconnect?.();
        }
      }
    })()
      .catch(() => {})
      .then(() => this.closed(nc));
  }

  /**
   * The client closes a connection for good when it gives up reconnecting (e.g. the server
   * refuses the credentials twice in a row after a reconfiguration). Unless close() was called,
   * connect anew with backoff, re-reading the credentials file; `nc`, `js` and `jsm` are then
   * replaced, so callers that read them on each use pick up the new connection (as the buckets
   * bucket() gives do).
   */
  private closed(nc: NatsConnection): void {
    if (this.closing.signal.aborted || this.nc !== nc) return;
    this.lost();
    void nc.closed().then((err) => {
      if (this.closing.signal.aborted) return;
      this.log.error({ err: err ? errorMessage(err) : undefined }, "the NATS connection was closed; connecting anew");
      this.start().catch((e) => {
        if (!this.closing.signal.aborted) this.log.error({ err: errorMessage(e) }, "reconnecting to NATS failed");
      });
    });
  }

  async close(): Promise<void> {
    this.closing.abort();
    this.connected = false;
    const nc = this.nc;
    if (!nc || nc.isClosed()) return;
    try {
      await nc.drain();
    } catch {
      await nc.close().catch(() => {});
    }
  }
}

/**
 * The credentials file, read again each time the client authenticates (every reconnect), so a
 * renewed credential (a rotated Secret) is used without a restart. While the file cannot be read
 * (e.g. in the middle of its replacement) the last content read is used.
 */
/**
 * The credential only for a server that asks for one: a server that authenticates its clients by
 * JWT or NKey sends a nonce to sign; one that authenticates no client sends none, and would only
 * read the credential's user JWT — longer than its default 4 KB CONNECT line for an agent of a
 * long id — as a line too long, and close the connection.
 */
function whenAsked(auth: Authenticator): Authenticator {
  return (nonce?: string) => (nonce ? auth(nonce) : undefined);
}

function rereading(file: string, first: Uint8Array): () => Uint8Array {
  let last = first;
  return () => {
    try {
      last = readFileSync(file);
    } catch {
      // keep the last content
    }
    return last;
  };
}

/**
 * Why connecting cannot work until someone fixes the configuration (the runtime keeps
 * retrying: a renewed credentials file or a NATS reconfiguration may fix it), or undefined
 * when NATS is merely not reachable.
 */
function configurationProblem(err: unknown): string | undefined {
  if (err instanceof AuthorizationError || err instanceof UserAuthenticationExpiredError) {
    return "NATS refused the credentials (--nats-creds, --nats-user and --nats-password, or --nats-token)";
  }
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOENT" || code === "EACCES" || code === "EISDIR")
    return "cannot read the NATS credentials file (--nats-creds)";
  if (/unable to parse credentials/i.test((err as Error).message))
    return "the NATS credentials file (--nats-creds) is not a NATS .creds file";
  return undefined;
}

/**
 * The client's TLS options: the CA is read when a connection is made (the client re-reads a
 * `caFile` itself, and reads `ca` at each connect, so a getter keeps it current).
 */
function tlsOptions(tls: NatsOptions["tls"]): { caFile: string } | { readonly ca: string } | undefined {
  if (!tls) return undefined;
  if ("caFile" in tls) return { caFile: tls.caFile };
  const ca = tls.ca;
  return {
    get ca() {
      return ca();
    },
  };
}
