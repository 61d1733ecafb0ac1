// status.summary: traffic at a glance for `kubectl get`, read from NATS JetStream about once a
// minute by the leading operator. A changed summary queues its resource, whose reconcile writes
// it with the rest of the status; an unchanged one writes nothing.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import { RequestError } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { agentNames } from "../../../../runtime/src/contract/agent-names.ts";
import { relayNames } from "../../../../runtime/src/contract/relay-stream.ts";
import { isNotFound } from "../../../../runtime/src/contract/nats.ts";
import { sharedAgentNames } from "../../../../runtime/src/contract/shared-layout.ts";
import {
  agentLastError,
  parseLastError,
  relayLastError,
  type LastErrorLocation,
} from "../../../../runtime/src/contract/summary.ts";
import type { Relay } from "../../../../runtime/src/resources/relay.ts";
import type { Summary as SummarySchema } from "../../crd/status.ts";
import type { z } from "zod";
import type { Caches } from "../../kube/caches.ts";
import { errorMessage } from "../../kube/client.ts";
import { agentKeyOf } from "../../reconcile/finalizers.ts";
import { printable } from "../../../../runtime/src/util/printable.ts";

export type Summary = z.infer<typeof SummarySchema>;
export type SummaryKind = "Agent" | "Relay";

/** What one read of NATS found for a resource. */
export interface Reading {
  /** The stream's last sequence: the count of messages it ever stored. */
  lastSeq: number;
  backlog: number;
  lastError?: { at: string; reason: string };
}

/**
 * The samples kept of a resource, oldest first, as one array of numbers: each sample's time and
 * the stream's last sequence then, in turn (at, seq, at, seq, …), held by V8 as unboxed doubles
 * (the first element a time, never a small integer). An object per sample held 4.4 KB per Agent
 * once an hour's 61 samples were kept; this holds about 1 KB.
 */
export type Samples = readonly number[];

const NONE: Samples = [];

export const SUMMARY_WINDOW_MS = 3600_000;

/**
 * Pure: the summary from the samples kept so far and a new reading; returns the samples to keep.
 * The count is the growth of the stream's last sequence since the newest sample at least a window
 * old (or the oldest kept), so it covers the last hour once the operator has watched that long; a
 * stream that went back (recreated) starts the samples again.
 */
export function summarize(
  samples: Samples,
  reading: Reading,
  now: number,
  windowMs = SUMMARY_WINDOW_MS,
): { summary: Summary; samples: Samples } {
  const kept = samples.length && samples[samples.length - 1]! > reading.lastSeq ? NONE : samples;
  // Keep one sample at or beyond the window's start as the base, and everything after it.
  let from = 0;
  while (kept.length - from > 2 && kept[from + 2]! <= now - windowMs) from += 2;
  // Made at its length and filled in order: no spare room, and doubles from the first element on.
  const next: number[] = new Array(kept.length - from + 2);
  for (let i = from; i < kept.length; i++) next[i - from] = kept[i]!;
  next[next.length - 2] = now;
  next[next.length - 1] = reading.lastSeq;
  const summary: Summary = {
    acceptedLastHour: Math.max(0, reading.lastSeq - next[1]!),
    backlog: reading.backlog,
    ...(reading.lastError
      ? { lastError: printable(reading.lastError.reason), lastErrorTime: reading.lastError.at }
      : {}),
  };
  return { summary, samples: next };
}

const orUndefined = <T>(p: Promise<T>): Promise<T | undefined> =>
  p.catch((err: unknown) => {
    if (isNotFound(err)) return undefined;
    throw err;
  });

async function readLastError(jsm: JetStreamManager, where: LastErrorLocation) {
  // A direct get from a bucket not made yet has nobody to answer it.
  const m = await orUndefined(
    jsm.direct.getMessage(`KV_${where.bucket}`, { last_by_subj: `$KV.${where.bucket}.${where.key}` }),
  ).catch((err: unknown) => {
    if (err instanceof RequestError && err.isNoResponders()) return undefined;
    throw err;
  });
  return parseLastError(m?.data);
}

/** An Agent's reading: its inbox stream, handler consumer and outbox; undefined before its runtime made them. */
export async function readAgent(jsm: JetStreamManager, key: string): Promise<Reading | undefined> {
  const n = agentNames(key);
  const inbox = await orUndefined(jsm.streams.info(n.inboxStream));
  if (!inbox) return undefined;
  const [outbox, handler, lastError] = await Promise.all([
    orUndefined(jsm.streams.info(n.outboxStream)),
    orUndefined(jsm.consumers.info(n.inboxStream, n.handlerConsumer)),
    readLastError(jsm, agentLastError(key)),
  ]);
  const backlog = (outbox?.state.messages ?? 0) + (handler ? handler.num_pending + handler.num_ack_pending : 0);
  return { lastSeq: inbox.state.last_seq, backlog, ...(lastError ? { lastError } : {}) };
}

/**
 * An Agent's reading on the isolated layout, from its consumers in its tenant's data account (the
 * streams are every Agent's of the namespace): what its handler consumer has taken and has still
 * to take (a message handed out again counts again), the backlog of both its consumers, and the
 * last error it keeps under its account key in the tenant's `ifp_agents` bucket. Undefined
 * before the operator made its consumers.
 */
export async function readSharedAgent(
  jsm: JetStreamManager,
  runtimeAccount: string,
  key: string,
): Promise<Reading | undefined> {
  const n = sharedAgentNames(runtimeAccount);
  const [handler, sender, lastError] = await Promise.all([
    orUndefined(jsm.consumers.info(n.inboxStream, n.handlerConsumer)),
    orUndefined(jsm.consumers.info(n.outboxStream, n.senderConsumer)),
    readLastError(jsm, { bucket: n.kvBucket, key: `${runtimeAccount}.${agentLastError(key).key}` }),
  ]);
  if (!handler) return undefined;
  const pending = (c: typeof handler | undefined) => (c ? c.num_pending + c.num_ack_pending : 0);
  return {
    lastSeq: handler.delivered.consumer_seq + handler.num_pending,
    backlog: pending(handler) + pending(sender),
    ...(lastError ? { lastError } : {}),
  };
}

/** A Relay's reading: the copies its stream ever stored and holds now (mailboxes and dead letters). */
export async function readRelay(
  jsm: JetStreamManager,
  relay: Pick<Relay, "metadata" | "spec">,
): Promise<Reading | undefined> {
  const stream = await orUndefined(jsm.streams.info(relayNames(relay).stream));
  if (!stream) return undefined;
  const lastError = await readLastError(jsm, relayLastError(relay));
  return { lastSeq: stream.state.last_seq, backlog: stream.state.messages, ...(lastError ? { lastError } : {}) };
}

/**
 * What the collector uses of the operator's own NATS connection: whether it is up, and its
 * JetStream manager, read at each use (a new connection brings a new one).
 */
export interface SamplingConnection {
  readonly isConnected: boolean;
  readonly jsm: JetStreamManager;
}

/** Runs a read with the JetStream manager of the account holding a resource's data. */
export type InAccount = <T>(obj: KubernetesObject, read: (jsm: JetStreamManager) => Promise<T>) => Promise<T>;

/**
 * Samples every Agent and Relay in the caches each `intervalMs` while started, and keeps their
 * summaries for the reconciles (`get`). Only the leader runs it; a new leader starts its window
 * afresh and keeps what status already holds until its first sample.
 */
export class SummaryCollector {
  private readonly samples = new Map<string, Samples>();
  private readonly current = new Map<string, Summary>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly nats: SamplingConnection;
  private readonly caches: Caches;
  private readonly enqueue: (kind: SummaryKind, obj: KubernetesObject) => void;
  private readonly log: Logger;
  private readonly intervalMs: number;
  private readonly inAccount: InAccount;
  private readonly agentReading: (obj: KubernetesObject) => Promise<Reading | undefined>;

  /**
   * `inAccount` runs a read in the NATS account of a resource's runtime (one account per
   * runtime); without it every read goes through `nats`. `readAgent` reads an Agent elsewhere
   * than in its runtime's account (the isolated layout: its tenant's data account).
   */
  constructor(opts: {
    nats: SamplingConnection;
    caches: Caches;
    enqueue: (kind: SummaryKind, obj: KubernetesObject) => void;
    log: Logger;
    intervalMs?: number;
    inAccount?: InAccount;
    readAgent?: (obj: KubernetesObject) => Promise<Reading | undefined>;
  }) {
    this.nats = opts.nats;
    this.inAccount = opts.inAccount ?? ((_obj, read) => read(this.nats.jsm));
    this.agentReading = opts.readAgent ?? ((obj) => this.inAccount(obj, (jsm) => readAgent(jsm, agentKeyOf(obj))));
    this.caches = opts.caches;
    this.enqueue = opts.enqueue;
    this.log = opts.log;
    this.intervalMs = opts.intervalMs ?? 60_000;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
    void this.tick();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** The summary for a resource, once sampled. */
  get(kind: SummaryKind, namespace: string, name: string): Summary | undefined {
    return this.current.get(`${kind}/${namespace}/${name}`);
  }

  /** One pass over every resource (one at a time: a few NATS requests each), a namespace's together. */
  tick(now = Date.now()): Promise<void> {
    this.running ??= this.pass(now).finally(() => (this.running = undefined));
    return this.running;
  }

  private async pass(now: number): Promise<void> {
    if (!this.nats.isConnected) return;
    const seen = new Set<string>();
    for (const kind of ["Agent", "Relay"] as const) {
      for (const obj of this.caches.listByNamespace<KubernetesObject & { spec?: Record<string, unknown> }>(kind)) {
        const { namespace, name } = obj.metadata ?? {};
        if (!namespace || !name || obj.metadata?.deletionTimestamp) continue;
        const key = `${kind}/${namespace}/${name}`;
        seen.add(key);
        let reading: Reading | undefined;
        try {
          reading =
            kind === "Agent"
              ? typeof obj.spec?.agentId === "string"
                ? await this.agentReading(obj)
                : undefined
              : typeof obj.spec?.url === "string"
                ? await this.inAccount(obj, (jsm) => readRelay(jsm, obj as unknown as Relay))
                : undefined;
        } catch (err) {
          this.log.debug({ resource: key, err: errorMessage(err) }, "could not read the traffic summary");
          continue;
        }
        if (!reading) continue;
        const { summary, samples } = summarize(this.samples.get(key) ?? NONE, reading, now);
        this.samples.set(key, samples);
        const before = this.current.get(key);
        this.current.set(key, summary);
        if (JSON.stringify(before) !== JSON.stringify(summary)) this.enqueue(kind, obj);
      }
    }
    for (const key of this.samples.keys()) {
      if (seen.has(key)) continue;
      this.samples.delete(key);
      this.current.delete(key);
    }
  }
}
