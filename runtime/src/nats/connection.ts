import { readFile } from "node:fs/promises";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { Logger } from "pino";

export interface NatsOptions {
  /** One or more server URLs, comma separated. */
  url: string;
  name: string;
  /** A NATS credentials file (JWT + NKey seed). */
  credsFile?: string;
  user?: string;
  pass?: string;
  token?: string;
}

/**
 * The NATS connection of a runtime process. It connects in the background, reconnects for
 * ever, and tells the HTTP layer whether a publish can succeed right now, so that a request
 * is answered 503 at once while NATS is away instead of waiting for a timeout.
 */
export class Nats {
  nc: NatsConnection | undefined;
  js!: JetStreamClient;
  jsm!: JetStreamManager;
  private connected = false;
  private closed = false;
  private readonly opts: NatsOptions;
  private readonly log: Logger;

  constructor(opts: NatsOptions, log: Logger) {
    this.opts = opts;
    this.log = log;
  }

  get isConnected(): boolean {
    return this.connected && !!this.nc && !this.nc.isClosed();
  }

  /** Connect, retrying with backoff until it works or close() is called. */
  async start(signal?: AbortSignal): Promise<void> {
    let delay = 250;
    for (;;) {
      if (this.closed || signal?.aborted) throw new Error("closed before NATS was reached");
      try {
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
          authenticator: this.opts.credsFile ? credsAuthenticator(await readFile(this.opts.credsFile)) : undefined,
        });
        this.nc = nc;
        this.js = jetstream(nc, { timeout: 5_000 });
        this.jsm = await jetstreamManager(nc, { timeout: 5_000 });
        this.connected = true;
        this.watch(nc);
        this.log.info({ server: nc.getServer() }, "connected to NATS");
        return;
      } catch (err) {
        this.log.warn({ err: (err as Error).message, retryInMs: delay }, "NATS not reachable yet");
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5_000);
      }
    }
  }

  private watch(nc: NatsConnection): void {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") {
          this.connected = false;
          this.log.warn("disconnected from NATS");
        } else if (s.type === "reconnect") {
          this.connected = true;
          this.log.info("reconnected to NATS");
        }
      }
    })().catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
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
