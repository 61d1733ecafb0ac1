// LastError: the runtime's newest error, kept in NATS KV for the operator to show in the
// resource's status summary; recording it never throws and never waits.
import type { KV } from "@nats-io/kv";
import type { Logger } from "pino";
import { LAST_ERROR_MAX, type LastErrorEntry, type LastErrorLocation } from "../contract/summary.ts";
import type { Nats } from "./connection.ts";
import { printable } from "../util/printable.ts";

/**
 * The runtime's last error (an undeliverable message, a dead letter), kept in NATS KV where the
 * operator reads it into the resource's status summary. Shared by the replicas: the newest wins.
 * Recording never throws and never waits: while one write is under way, only the newest of the
 * errors that come meanwhile is written after it.
 */
export class LastError {
  private kv: Promise<KV> | undefined;
  private writing = false;
  private next: LastErrorEntry | undefined;
  private readonly nats: Nats;
  private readonly where: LastErrorLocation;
  private readonly log: Logger;

  constructor(nats: Nats, where: LastErrorLocation, log: Logger) {
    this.nats = nats;
    this.where = where;
    this.log = log;
  }

  record(reason: string, at = new Date()): void {
    this.next = { at: at.toISOString(), reason: printable(reason).slice(0, LAST_ERROR_MAX) };
    if (!this.writing) void this.flush();
  }

  /** Resolves once nothing is left to write (for tests and shutdown). */
  async flush(): Promise<void> {
    if (this.writing) return;
    this.writing = true;
    try {
      while (this.next) {
        const entry = this.next;
        this.next = undefined;
        if (!this.nats.isConnected) continue; // the error is in the log and the Event; the summary misses it
        try {
          this.kv ??= this.nats.bucket(this.where.bucket, { history: 1 });
          await (await this.kv).put(this.where.key, JSON.stringify(entry));
        } catch (err) {
          this.kv = undefined;
          this.log.debug({ err: (err as Error).message }, "could not record the last error for the status summary");
        }
      }
    } finally {
      this.writing = false;
    }
  }
}
