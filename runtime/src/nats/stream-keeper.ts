// Who makes and watches a runtime's JetStream streams: StreamKeeper for streams of its own (made
// once, recorded in a KV ledger, never made again empty when they go missing), OperatorStreams
// where the operator makes them.
import type { StreamConfig, StreamInfo } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { Logger } from "pino";
import { errorMessage } from "../util/errors.ts";
import type { Nats } from "./connection.ts";
import {
  ensureReplicatedStream,
  isStorageRefused,
  readStreamInfo,
  type EnsuredStream,
  type Replicas,
  type ReplicasUnmet,
} from "./streams.ts";

/** Where a runtime records the streams it has made: a key of a KV bucket it owns. */
export interface LedgerLocation {
  bucket: string;
  key: string;
}

/** A stream this runtime made before and that the server no longer has. */
export class StreamMissingError extends Error {
  readonly stream: string;
  readonly since: string;
  constructor(stream: string, since: string) {
    super(
      `JetStream stream ${stream}, made by this runtime on ${since}, is missing from NATS: the server did not load it at its last start (its data may still be in the server's store directory) or it was deleted. ` +
        `It is not made again empty over that data; see docs/reliability.md#a-stream-nats-did-not-load (IFP_RECREATE_MISSING_STREAMS=true starts it over empty)`,
    );
    this.name = "StreamMissingError";
    this.stream = stream;
    this.since = since;
  }
}

/** What the keeper tells the runtime's human: the status summary's last error and an Event. */
export type TroubleReport = (
  reason: "StreamMissing" | "ReplicasNotApplied" | "InsufficientStorage",
  message: string,
) => void;

/** A stream JetStream would not make: the storage its max_bytes reserves is not free (isStorageRefused). */
export class StorageRefusedError extends Error {
  readonly stream: string;
  constructor(stream: string, message: string) {
    super(message);
    this.name = "StorageRefusedError";
    this.stream = stream;
  }
}

export interface StreamKeeperOptions {
  ledger: LedgerLocation;
  /** Make a stream the ledger names again even though it went missing (the user's explicit choice). */
  recreateMissing?: boolean;
  report?: TroubleReport;
  /** How often the streams made are checked to still be there. */
  checkEveryMs?: number;
}

interface Ledger {
  /** Stream name → when this runtime (any replica) first made or found it. */
  streams: Record<string, string>;
}

/** What the runtime's parts ask of whoever keeps its streams. */
export interface StreamKeeping {
  ensure(
    asked: Partial<StreamConfig> & { name: string },
    replicas: Replicas,
    opts?: { keepStored?: boolean },
  ): Promise<unknown>;
  missing(): string[];
  unmet(): ReplicasUnmet[];
  start(): void;
  stop(): void;
}

/**
 * The streams of a layout whose streams the operator makes (the isolated one, nats/layout.ts):
 * the runtime cannot ask for a stream's info there, so it neither makes nor checks them; a
 * stream that is not there shows as its consumer not being there (ConsumerSetUp) and as
 * publishes refused.
 */
export class OperatorStreams implements StreamKeeping {
  async ensure(): Promise<void> {}
  missing(): string[] {
    return [];
  }
  unmet(): ReplicasUnmet[] {
    return [];
  }
  start(): void {}
  stop(): void {}
}

/**
 * Keeps a runtime's own streams: makes each with the replicas the JetStream deployment can hold
 * (ensureReplicatedStream), records in a KV bucket of the runtime's that it did, and from then
 * on refuses to make it again empty when it has gone missing — the server could not load it at
 * its start, and its messages may still be on its disk. A missing stream is said loudly: the
 * runtime is not ready (missing()), an error log line, the status summary and an Event, and a
 * metric; it is found again by itself once the stream is restored.
 */
export class StreamKeeper implements StreamKeeping {
  private readonly nats: Nats;
  private readonly log: Logger;
  private readonly opts: StreamKeeperOptions;
  private readonly kept = new Map<string, { want: Partial<StreamConfig> & { name: string }; replicas: Replicas }>();
  private readonly missingSince = new Map<string, string>();
  private readonly unmetBy = new Map<string, ReplicasUnmet>();
  /** Streams JetStream refused for storage, said once each until made. */
  private readonly refused = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(nats: Nats, log: Logger, opts: StreamKeeperOptions) {
    this.nats = nats;
    this.log = log;
    this.opts = opts;
  }

  /** The streams made before and missing now: while there are any, the runtime is not ready. */
  missing(): string[] {
    return [...this.missingSince.keys()];
  }

  /** Where the replicas asked for are not those the streams have. */
  unmet(): ReplicasUnmet[] {
    return [...this.unmetBy.values()];
  }

  private bucket(): Promise<KV> {
    return this.nats.bucket(this.opts.ledger.bucket, { history: 1 });
  }

  private async readLedger(kv: KV): Promise<Ledger> {
    const e = await kv.get(this.opts.ledger.key);
    if (e?.operation !== "PUT" || e.length === 0) return { streams: {} };
    try {
      const parsed = e.json<Partial<Ledger>>();
      return { streams: typeof parsed.streams === "object" && parsed.streams ? parsed.streams : {} };
    } catch {
      return { streams: {} };
    }
  }

  /**
   * The stream as `want` says, with `replicas` resolved for the deployment. Throws
   * StreamMissingError for a stream made before and missing now (unless recreateMissing).
   */
  async ensure(
    asked: Partial<StreamConfig> & { name: string },
    replicas: Replicas,
    opts: { keepStored?: boolean } = {},
  ): Promise<EnsuredStream> {
    this.kept.set(asked.name, { want: asked, replicas });
    const kv = await this.bucket();
    const ledger = await this.readLedger(kv);
    const since = ledger.streams[asked.name];
    // Read once here and passed down: ensureReplicatedStream and ensureStream do not read it again.
    const current = await readStreamInfo(this.nats.jsm, asked.name);
    const want = opts.keepStored ? this.withinStored(asked, current) : asked;
    if (since && !this.opts.recreateMissing && !current) {
      this.markMissing(want.name, since);
      throw new StreamMissingError(want.name, since);
    }
    const r = await ensureReplicatedStream(this.nats.jsm, want, replicas, this.nats.placement, { current }).catch(
      (err: unknown) => {
        throw isStorageRefused(err) ? this.storageRefused(want, err) : err;
      },
    );
    this.refused.delete(want.name);
    this.found(want.name);
    if (since && this.opts.recreateMissing && r.action === "created")
      this.log.warn(
        { stream: want.name, since },
        "a stream that had gone missing was made again empty (IFP_RECREATE_MISSING_STREAMS)",
      );
    if (!since) {
      // Two replicas may write at once: each writes what it read plus its stream, and a stream
      // either misses is recorded at its next start.
      await kv.put(
        this.opts.ledger.key,
        JSON.stringify({ streams: { ...ledger.streams, [want.name]: new Date().toISOString() } } satisfies Ledger),
      );
    }
    this.noteUnmet(want.name, r.unmet);
    return r;
  }

  /**
   * `asked` with the stream's current max_bytes kept while it holds more than asked: JetStream
   * drops the oldest messages to meet a lowered limit, and a message answered 202 is never
   * dropped. The limit is lowered at a later start, once enough messages have aged out.
   */
  private withinStored(
    asked: Partial<StreamConfig> & { name: string },
    current: StreamInfo | undefined,
  ): Partial<StreamConfig> & { name: string } {
    const limit = asked.max_bytes;
    if (!current || limit === undefined || limit <= 0 || current.state.bytes <= limit) return asked;
    if (current.config.max_bytes === limit) return asked;
    this.log.warn(
      { stream: asked.name, stored: current.state.bytes, asked: limit, kept: current.config.max_bytes },
      `stream ${asked.name} holds ${current.state.bytes} bytes, more than the max_bytes ${limit} asked: its limit stays ${current.config.max_bytes} until a start after enough messages have aged out (stored messages are never dropped to lower it)`,
    );
    return { ...asked, max_bytes: current.config.max_bytes };
  }

  /** Said once per stream until it is made: an error line, the status summary and an Event. */
  private storageRefused(want: Partial<StreamConfig> & { name: string }, err: unknown): StorageRefusedError {
    const bytes = want.max_bytes !== undefined && want.max_bytes > 0 ? `${want.max_bytes} bytes` : "its size";
    const message =
      `JetStream cannot reserve ${bytes} for stream ${want.name} (${errorMessage(err)}): every stream's max_bytes is ` +
      "reserved on each NATS server holding a replica, against the server's JetStream store limit (max_file_store, " +
      "the chart's nats.storage.size), which the streams there have taken; raise the store limit, or lower the " +
      "stream's limit (an Agent's spec.inbox.maxBytes, a Relay's spec.retention.maxBytes)";
    if (!this.refused.has(want.name)) {
      this.refused.add(want.name);
      this.log.error({ stream: want.name, maxBytes: want.max_bytes }, message);
      this.opts.report?.("InsufficientStorage", message);
    }
    return new StorageRefusedError(want.name, message);
  }

  private async exists(name: string): Promise<boolean> {
    return (await readStreamInfo(this.nats.jsm, name)) !== undefined;
  }

  private markMissing(name: string, since: string): void {
    if (this.missingSince.has(name)) return;
    this.missingSince.set(name, since);
    const err = new StreamMissingError(name, since);
    this.log.error({ stream: name, since }, err.message);
    this.opts.report?.("StreamMissing", err.message);
  }

  private found(name: string): void {
    if (!this.missingSince.delete(name)) return;
    this.log.info({ stream: name }, "JetStream stream found again");
  }

  private noteUnmet(name: string, unmet: ReplicasUnmet | undefined): void {
    const before = this.unmetBy.get(name);
    if (!unmet) {
      this.unmetBy.delete(name);
      return;
    }
    this.unmetBy.set(name, unmet);
    if (before?.reason === unmet.reason) return;
    this.log.warn({ stream: name, asked: unmet.asked, actual: unmet.actual }, unmet.reason);
    this.opts.report?.("ReplicasNotApplied", unmet.reason);
  }

  /**
   * Check the streams made, every `checkEveryMs` (10 s by default) while connected: one gone
   * missing makes the runtime not ready until it is there again.
   */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.check(), this.opts.checkEveryMs ?? 10_000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One check of every stream kept (also for tests). */
  async check(): Promise<void> {
    if (this.checking || !this.nats.isConnected) return;
    this.checking = true;
    try {
      for (const name of this.kept.keys()) {
        try {
          if (await this.exists(name)) this.found(name);
          else if (this.opts.recreateMissing) {
            const k = this.kept.get(name)!;
            await this.ensure(k.want, k.replicas);
          } else
            this.markMissing(name, (await this.readLedger(await this.bucket()))?.streams[name] ?? "an earlier start");
        } catch (err) {
          this.log.debug({ stream: name, err: errorMessage(err) }, "stream check failed");
        }
      }
    } finally {
      this.checking = false;
    }
  }
}
