// Kubernetes Events, as the operator and the runtime record them on their resources: one
// recorder for both, that aggregates and rate-limits as client-go's EventCorrelator does, so
// that a burst of the same warning is one Event with a count, not a flood of objects.
import { accessSync } from "node:fs";
import { hostname } from "node:os";
import type { CoreV1Api, CoreV1Event, KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { errorMessage } from "../util/errors.ts";
import { printable } from "../util/printable.ts";

export type EventType = "Normal" | "Warning";

/** The object an Event is about: a Kubernetes object, or one of our resources as a manifest gives it. */
export interface InvolvedObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; uid?: string };
}

/** Who records: `ifp-operator` or `ifp-runtime`; reported as `ifp.dev/<component>`. */
export interface EventSource {
  component: string;
  host: string;
}

/**
 * The core/v1 Event about `obj`: a name unique per call (`<object>.<ms hex><random>`), the
 * message cut at 1 KiB, first and last seen now, count 1.
 */
export function buildEvent(
  obj: InvolvedObject,
  type: EventType,
  reason: string,
  message: string,
  source: EventSource,
  now: Date,
  random = Math.random,
): CoreV1Event {
  const meta = obj.metadata ?? {};
  return {
    metadata: {
      name: `${meta.name}.${now.getTime().toString(16)}${Math.floor(random() * 0xffff)
        .toString(16)
        .padStart(4, "0")}`,
      namespace: meta.namespace,
    },
    involvedObject: {
      apiVersion: obj.apiVersion,
      kind: obj.kind,
      name: meta.name,
      namespace: meta.namespace,
      uid: meta.uid,
    },
    type,
    reason: printable(reason),
    message: printable(message).slice(0, 1024),
    source: { component: source.component, host: source.host },
    reportingComponent: `ifp.dev/${source.component}`,
    reportingInstance: source.host,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}

/** The prefix client-go gives a message that stands for several similar ones. */
export const COMBINED_PREFIX = "(combined from similar events): ";

export interface EventLimits {
  /** How long an Event is counted on rather than made anew, and similar messages are remembered (client-go: 10 minutes). */
  windowMs: number;
  /** Distinct messages of one object, type and reason within the window before the next ones are combined into one Event (client-go: 10). */
  maxSimilar: number;
  /** Writes (creates and count updates) one object's Events may make at once (client-go: 25). */
  burst: number;
  /** One more write per this many ms (client-go: one per 5 minutes). */
  refillMs: number;
  /** Repeats of an Event are written as one count update at most this often. */
  flushMs: number;
  /** Events remembered for counting (client-go: 4096); the least recently seen is forgotten first. */
  maxTracked: number;
}

export const DEFAULT_EVENT_LIMITS: EventLimits = {
  windowMs: 10 * 60_000,
  maxSimilar: 10,
  burst: 25,
  refillMs: 5 * 60_000,
  flushMs: 1_000,
  maxTracked: 4096,
};

/** What the recorder does with one call, decided without I/O (see EventCorrelator). */
export type Correlation =
  | { action: "create"; key: string; message: string }
  | { action: "count"; key: string; message: string }
  | { action: "drop"; key: string };

interface Tracked {
  name?: string;
  namespace: string;
  event: CoreV1Event;
  /** Occurrences seen, and how many of them the API server holds. */
  count: number;
  written: number;
  last: number;
  objectKey: string;
}

/**
 * The pure core: which calls make a new Event, which only add to the count of one already
 * made, and which are dropped by the per-object token bucket. Like client-go: the spam filter
 * per object, then aggregation of similar messages, then counting of identical ones.
 */
export class EventCorrelator {
  private readonly limits: EventLimits;
  readonly now: () => number;
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly similar = new Map<string, { messages: Set<string>; since: number }>();
  readonly tracked = new Map<string, Tracked>();

  constructor(limits: Partial<EventLimits> = {}, now: () => number = Date.now) {
    this.limits = { ...DEFAULT_EVENT_LIMITS, ...limits };
    this.now = now;
  }

  get config(): EventLimits {
    return this.limits;
  }

  static objectKey(obj: InvolvedObject): string {
    const m = obj.metadata ?? {};
    return JSON.stringify([obj.kind ?? "", m.namespace ?? "", m.name ?? "", m.uid ?? ""]);
  }

  /** The object's bucket as of now: refilled by one token per refillMs, up to burst. */
  private level(objectKey: string): { tokens: number; at: number } {
    const now = this.now();
    const b = this.buckets.get(objectKey);
    const tokens = b ? Math.min(this.limits.burst, b.tokens + (now - b.at) / this.limits.refillMs) : this.limits.burst;
    return { tokens, at: now };
  }

  /** Take one write token of the object's bucket; false when it is empty. */
  take(objectKey: string): boolean {
    const b = this.level(objectKey);
    const ok = b.tokens >= 1;
    if (ok) b.tokens -= 1;
    // Most recently used last; buckets that are full again behave like new ones and are forgotten first.
    this.buckets.delete(objectKey);
    this.buckets.set(objectKey, b);
    if (this.buckets.size > this.limits.maxTracked) this.buckets.delete(this.buckets.keys().next().value!);
    return ok;
  }

  /** Ms until the object's bucket has a token again (0 when it has one). */
  waitMs(objectKey: string): number {
    const b = this.level(objectKey);
    return b.tokens >= 1 ? 0 : Math.ceil((1 - b.tokens) * this.limits.refillMs);
  }

  correlate(obj: InvolvedObject, type: EventType, reason: string, message: string): Correlation {
    const now = this.now();
    const objectKey = EventCorrelator.objectKey(obj);
    const similarKey = JSON.stringify([objectKey, type, reason]);
    let group = this.similar.get(similarKey);
    if (!group || now - group.since > this.limits.windowMs) {
      group = { messages: new Set(), since: now };
      this.similar.set(similarKey, group);
      if (this.similar.size > this.limits.maxTracked) this.similar.delete(this.similar.keys().next().value!);
    }
    let key = JSON.stringify([similarKey, message]);
    if (!group.messages.has(message)) {
      if (group.messages.size >= this.limits.maxSimilar) {
        key = JSON.stringify([similarKey, COMBINED_PREFIX]);
        message = `${COMBINED_PREFIX}${message}`;
      } else group.messages.add(message);
    }
    const seen = this.tracked.get(key);
    if (seen && now - seen.last <= this.limits.windowMs) return { action: "count", key, message };
    if (seen) this.tracked.delete(key);
    return this.take(objectKey) ? { action: "create", key, message } : { action: "drop", key };
  }
}

/**
 * Records Events through the API server. Failing to record one is logged, never thrown. A repeat
 * within the window adds to the count of the Event already made (written at most every
 * `flushMs`, and only while the object's token bucket allows; a count waiting for a token is
 * kept, never lost); a new Event needs a token, and is dropped (logged at debug) without one.
 *
 * The Kubernetes client (about 80 MiB of resident memory once loaded) is loaded with the first
 * Event, not at start: a runtime that records none never carries it.
 */
export class EventRecorder {
  private readonly kc: KubeConfig | (() => Promise<KubeConfig>);
  private api: Promise<CoreV1Api> | undefined;
  private readonly source: EventSource;
  private readonly log: Logger;
  readonly correlator: EventCorrelator;
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly inFlight = new Set<Promise<void>>();
  /** Calls dropped by the rate limit since start, and writes made (creates and count updates). */
  dropped = 0;
  writes = 0;

  constructor(
    kc: KubeConfig | (() => Promise<KubeConfig>),
    component: string,
    log: Logger,
    limits: Partial<EventLimits> = {},
    now: () => number = Date.now,
  ) {
    this.kc = kc;
    this.source = { component, host: hostname() };
    this.log = log;
    this.correlator = new EventCorrelator(limits, now);
  }

  /**
   * With an explicit kubeconfig (which must be readable now), or in a pod (its service
   * account); elsewhere undefined: no Events.
   */
  static fromEnvironment(component: string, log: Logger, kubeconfig?: string): EventRecorder | undefined {
    if (kubeconfig) accessSync(kubeconfig);
    else if (!process.env.KUBERNETES_SERVICE_HOST) return undefined;
    const load = async () => {
      const { KubeConfig } = await import("@kubernetes/client-node");
      const kc = new KubeConfig();
      if (kubeconfig) kc.loadFromFile(kubeconfig);
      else kc.loadFromCluster();
      return kc;
    };
    return new EventRecorder(load, component, log);
  }

  private client(): Promise<CoreV1Api> {
    this.api ??= (async () => {
      const { CoreV1Api } = await import("@kubernetes/client-node");
      const kc = typeof this.kc === "function" ? await this.kc() : this.kc;
      return kc.makeApiClient(CoreV1Api);
    })();
    return this.api;
  }

  async record(obj: InvolvedObject, type: EventType, reason: string, message: string): Promise<void> {
    const namespace = obj.metadata?.namespace;
    if (!obj.metadata?.name || !namespace) return; // a manifest run outside the cluster: nothing to attach it to
    const c = this.correlator.correlate(obj, type, reason, message.slice(0, 1024));
    if (c.action === "drop") {
      this.dropped++;
      this.log.debug({ reason, object: `${namespace}/${obj.metadata.name}` }, "event dropped by the rate limit");
      return;
    }
    const now = new Date(this.correlator.now());
    if (c.action === "count") {
      const t = this.correlator.tracked.get(c.key)!;
      t.count++;
      t.last = now.getTime();
      t.event = { ...t.event, message: c.message.slice(0, 1024), lastTimestamp: now };
      this.correlator.tracked.delete(c.key);
      this.correlator.tracked.set(c.key, t);
      this.schedule(c.key, this.correlator.config.flushMs);
      return;
    }
    const event = buildEvent(obj, type, reason, c.message, this.source, now);
    const t: Tracked = {
      namespace,
      event,
      count: 1,
      written: 0,
      last: now.getTime(),
      objectKey: EventCorrelator.objectKey(obj),
    };
    this.correlator.tracked.set(c.key, t);
    const max = this.correlator.config.maxTracked;
    while (this.correlator.tracked.size > max) {
      const oldest = this.correlator.tracked.keys().next().value!;
      this.correlator.tracked.delete(oldest);
      clearTimeout(this.timers.get(oldest));
      this.timers.delete(oldest);
    }
    await this.track(this.create(c.key, t));
  }

  private track(p: Promise<void>): Promise<void> {
    this.inFlight.add(p);
    return p.finally(() => this.inFlight.delete(p));
  }

  private async create(key: string, t: Tracked): Promise<void> {
    const count = t.count;
    this.writes++;
    try {
      const api = await this.client();
      const made = await api.createNamespacedEvent({ namespace: t.namespace, body: { ...t.event, count } });
      t.name = made.metadata?.name;
      t.written = Math.max(t.written, count);
      // Repeats that came while it was being made.
      if (t.count > t.written) this.schedule(key, this.correlator.config.flushMs);
    } catch (err) {
      this.log.warn({ err: errorMessage(err), reason: t.event.reason }, "could not record an event");
    }
  }

  private schedule(key: string, delayMs: number): void {
    if (this.timers.has(key)) return;
    const timer = setTimeout(() => {
      this.timers.delete(key);
      void this.track(this.writeCount(key));
    }, delayMs);
    timer.unref();
    this.timers.set(key, timer);
  }

  /** Bring the API server's count up to what was seen: one patch, when the object's bucket has a token. */
  private async writeCount(key: string): Promise<void> {
    const t = this.correlator.tracked.get(key);
    if (!t || t.count <= t.written || !t.name) return;
    if (!this.correlator.take(t.objectKey)) {
      this.schedule(key, Math.max(this.correlator.config.flushMs, this.correlator.waitMs(t.objectKey)));
      return;
    }
    const count = t.count;
    this.writes++;
    try {
      const api = await this.client();
      const { PatchStrategy, setHeaderOptions } = await import("@kubernetes/client-node");
      await api.patchNamespacedEvent(
        {
          name: t.name,
          namespace: t.namespace,
          body: { count, lastTimestamp: t.event.lastTimestamp, message: t.event.message },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
      t.written = Math.max(t.written, count);
    } catch (err) {
      // The Event may have expired (the API server keeps Events an hour): make it again with the count.
      if ((err as { code?: number }).code === 404) {
        t.event = { ...t.event, metadata: { ...t.event.metadata, name: `${t.event.metadata.name}x` } };
        t.written = 0;
        return this.create(key, t);
      }
      this.log.warn({ err: errorMessage(err), reason: t.event.reason }, "could not update an event's count");
    }
  }

  /** Write every count still waiting (as far as the rate limit allows now), e.g. before the process exits or in a test. */
  async flush(): Promise<void> {
    for (let round = 0; round < 3 && (this.timers.size || this.inFlight.size); round++) {
      await Promise.all([...this.inFlight]);
      for (const [key, timer] of [...this.timers]) {
        clearTimeout(timer);
        this.timers.delete(key);
        await this.track(this.writeCount(key));
      }
    }
  }
}
