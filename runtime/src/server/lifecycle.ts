// Lifecycle: what a runtime process has started, stopped in reverse order on close — listeners
// before the work behind them, NATS last — with its background start-up under one AbortSignal.
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";

export { retry, type RetryOptions } from "../util/retry.ts";

/**
 * What a runtime process has started, to stop it in reverse order: each part registers how it
 * stops as soon as it exists, background start-up runs under one AbortSignal, and close()
 * aborts that signal, then stops everything last-started first — listeners before the work
 * behind them, the NATS connection after everything that uses it.
 */
export class Lifecycle {
  private readonly abort = new AbortController();
  private readonly stops: { name: string; stop: () => unknown }[] = [];
  private readonly log: Logger;
  private closing: Promise<void> | undefined;

  constructor(log: Logger) {
    this.log = log;
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Register how to stop what was just started. */
  defer(name: string, stop: () => unknown): void {
    this.stops.push({ name, stop });
  }

  /**
   * Run `task` in the background (start-up that waits for NATS, say); close() aborts its
   * signal and waits for it to end. A failure that is not the abort is logged.
   */
  background(name: string, task: (signal: AbortSignal) => Promise<void>): void {
    const running = task(this.signal).catch((err) => {
      if (!this.signal.aborted) this.log.error({ err }, `${name} failed`);
    });
    this.defer(name, () => running);
  }

  /** Listen (and close the server on the way out); resolves to the URL it serves. */
  async listen(
    app: FastifyInstance,
    opts: { name: string; scheme: "https" | "http"; port: number; host: string; reusePort?: boolean },
  ): Promise<string> {
    // reusePort (SO_REUSEPORT): other event loops of the process listen on the same port (agent/workers.ts).
    await app.listen({ port: opts.port, host: opts.host, ...(opts.reusePort ? { reusePort: true } : {}) } as {
      port: number;
    });
    this.defer(opts.name, () => app.close());
    const address = app.server.address();
    const port = typeof address === "object" && address ? address.port : opts.port;
    const host = opts.host === "0.0.0.0" || opts.host === "::" ? "localhost" : opts.host;
    return `${opts.scheme}://${host}:${port}`;
  }

  /**
   * Abort the background work, then stop everything in reverse order of start. A part that
   * fails to stop is logged and the others still stop. Calling it again waits for the first.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.abort.abort();
      for (const { name, stop } of [...this.stops].reverse()) {
        try {
          await stop();
        } catch (err) {
          this.log.warn({ err: (err as Error).message }, `stopping ${name} failed`);
        }
      }
    })();
    return this.closing;
  }
}
