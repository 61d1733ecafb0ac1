// Subscriptions: a relay's topic subscriptions and webhook registrations, kept in its KV bucket
// and watched into memory, so that publish and push ask NATS nothing.
import type { KV, KvWatchEntry } from "@nats-io/kv";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import { encodeToken } from "../contract/nats.ts";
import { unavailable } from "../protocol/errors.ts";
import type { SubscriptionState } from "../protocol/relay-api.ts";
import { retry } from "../server/lifecycle.ts";
import type { RelayNames } from "../contract/relay-stream.ts";

export interface PushRegistration {
  agent: string;
  webhook: string;
  since: string;
}

interface TopicRecord {
  agent: string;
  topic: string;
  since: string;
}

/** KV keys: `topic.<topic>.<agent>` and `push.<agent>`, both tokens encoded. */
export const subscriptionKeys = {
  topic: (topic: string, agent: string) => `topic.${encodeToken(topic)}.${encodeToken(agent)}`,
  push: (agent: string) => `push.${encodeToken(agent)}`,
};

/**
 * Topic subscriptions and webhook registrations of a relay, stored in its KV bucket so that
 * they survive restarts and are shared by every replica. A KV watch keeps an in-memory copy
 * current, so the publish and push paths ask NATS nothing; this replica's own changes apply
 * at once.
 */
export class Subscriptions {
  private kv: KV | undefined;
  private readonly nats: Nats;
  private readonly names: RelayNames;
  private readonly log: Logger | undefined;
  /** topic → subscribing agents */
  private readonly topics = new Map<string, Set<string>>();
  private readonly pushes = new Map<string, PushRegistration>();
  /** KV key → what it holds, to apply deletions. */
  private readonly byKey = new Map<
    string,
    { kind: "topic"; topic: string; agent: string } | { kind: "push"; agent: string }
  >();
  private readonly pushListeners: ((agent: string, reg: PushRegistration | undefined) => void)[] = [];
  private watch: { stop(): void } | undefined;
  private readonly closed = new AbortController();
  private readonly stopped = this.closed.signal;
  private revision = 0;

  constructor(nats: Nats, names: RelayNames, log?: Logger) {
    this.nats = nats;
    this.names = names;
    this.log = log;
  }

  /** Create the bucket if needed and load its content; resolves once the state is loaded. */
  async ensure(): Promise<void> {
    this.kv = await this.nats.bucket(this.names.kvBucket, { history: 1 });
    await this.startWatch();
  }

  private async startWatch(): Promise<void> {
    const kv = this.kv!;
    const initial = (await kv.status()).values;
    const watch = await kv.watch(this.revision ? { resumeFromRevision: this.revision + 1 } : {});
    this.watch = watch;
    let loaded: () => void = () => {};
    const done = new Promise<void>((r) => (loaded = r));
    if (initial === 0 || this.revision) loaded();
    void (async () => {
      for await (const e of watch) {
        this.apply(e);
        if (e.delta === 0) loaded();
      }
      if (this.stopped.aborted) return;
      // The watch ended (NATS went away for long): resume from the last revision seen.
      this.log?.warn("subscription watch ended; resuming");
      await sleep(500, undefined, { signal: this.stopped });
      await retry(() => this.startWatch(), {
        signal: this.stopped,
        initialMs: 1_000,
        onError: (err, retryInMs) =>
          this.log?.warn({ err: err.message, retryInMs }, "subscription watch not resumed yet"),
      });
    })().catch((err) => {
      if (!this.stopped.aborted) this.log?.error({ err }, "subscription watch failed");
    });
    const slow = setTimeout(() => {
      this.log?.warn("subscriptions still loading after 10 s; serving what is loaded");
      loaded();
    }, 10_000);
    await done;
    clearTimeout(slow);
  }

  private apply(e: KvWatchEntry): void {
    this.revision = Math.max(this.revision, e.revision);
    if (e.operation === "PUT" && e.value.length) {
      let v: Partial<TopicRecord & PushRegistration>;
      try {
        v = e.json();
      } catch {
        return;
      }
      if (e.key.startsWith("topic.") && v.topic && v.agent) this.addTopic(e.key, v.topic, v.agent);
      else if (e.key.startsWith("push.") && v.agent && v.webhook)
        this.setPushLocal(e.key, { agent: v.agent, webhook: v.webhook, since: v.since ?? "" });
    } else {
      this.forget(e.key);
    }
  }

  private addTopic(key: string, topic: string, agent: string): void {
    let set = this.topics.get(topic);
    if (!set) this.topics.set(topic, (set = new Set()));
    set.add(agent);
    this.byKey.set(key, { kind: "topic", topic, agent });
  }

  private setPushLocal(key: string, reg: PushRegistration): void {
    const before = this.pushes.get(reg.agent);
    this.pushes.set(reg.agent, reg);
    this.byKey.set(key, { kind: "push", agent: reg.agent });
    if (before?.webhook !== reg.webhook) for (const l of this.pushListeners) l(reg.agent, reg);
  }

  private forget(key: string): void {
    const was = this.byKey.get(key);
    if (!was) return;
    this.byKey.delete(key);
    if (was.kind === "topic") {
      const set = this.topics.get(was.topic);
      set?.delete(was.agent);
      if (set && !set.size) this.topics.delete(was.topic);
    } else if (this.pushes.delete(was.agent)) {
      for (const l of this.pushListeners) l(was.agent, undefined);
    }
  }

  close(): void {
    this.closed.abort();
    this.watch?.stop();
  }

  /** Called for each webhook registration that appears, changes or goes (reg undefined). */
  onPushChange(listener: (agent: string, reg: PushRegistration | undefined) => void): void {
    this.pushListeners.push(listener);
  }

  private async write(what: string, op: (kv: KV) => Promise<unknown>): Promise<void> {
    if (!this.kv || !this.nats.isConnected)
      throw unavailable(`the relay cannot ${what} now: NATS JetStream is not reachable`);
    try {
      await op(this.kv);
    } catch (err) {
      throw unavailable(`the relay cannot ${what} now: ${(err as Error).message}`);
    }
  }

  async subscribe(agent: string, topics: string[]): Promise<void> {
    const since = new Date().toISOString();
    for (const topic of topics) {
      if (this.topics.get(topic)?.has(agent)) continue;
      const key = subscriptionKeys.topic(topic, agent);
      await this.write("subscribe", (kv) => kv.put(key, JSON.stringify({ agent, topic, since } satisfies TopicRecord)));
      this.addTopic(key, topic, agent);
    }
  }

  async unsubscribe(agent: string, topics: string[]): Promise<void> {
    for (const topic of topics) {
      if (!this.topics.get(topic)?.has(agent)) continue;
      const key = subscriptionKeys.topic(topic, agent);
      await this.write("unsubscribe", (kv) => kv.delete(key));
      this.forget(key);
    }
  }

  async setPush(agent: string, webhook: string | null): Promise<void> {
    const key = subscriptionKeys.push(agent);
    if (webhook === null) {
      if (!this.pushes.has(agent)) return;
      await this.write("remove the webhook", (kv) => kv.delete(key));
      this.forget(key);
    } else {
      const reg: PushRegistration = { agent, webhook, since: new Date().toISOString() };
      await this.write("register the webhook", (kv) => kv.put(key, JSON.stringify(reg)));
      this.setPushLocal(key, reg);
    }
  }

  subscribers(topic: string): Iterable<string> {
    return this.topics.get(topic) ?? [];
  }

  push(agent: string): PushRegistration | undefined {
    return this.pushes.get(agent);
  }

  registrations(): PushRegistration[] {
    return [...this.pushes.values()];
  }

  state(agent: string): SubscriptionState {
    const topics = [...this.topics]
      .filter(([, set]) => set.has(agent))
      .map(([t]) => t)
      .sort();
    const reg = this.pushes.get(agent);
    return { agent, topics, push: reg ? { webhook: reg.webhook, since: reg.since } : null };
  }
}
