import { Kvm, type KV } from "@nats-io/kv";
import type { Nats } from "../nats/connection.ts";
import { encodeToken } from "../nats/subjects.ts";
import type { RelayNames } from "./stream.ts";

export interface PushRegistration {
  agent: string;
  webhook: string;
  since: string;
}

/** Topic subscriptions and push registrations of a relay, in its KV bucket; they survive restarts. */
export class Subscriptions {
  private kv: KV | undefined;
  private readonly nats: Nats;
  private readonly names: RelayNames;

  constructor(nats: Nats, names: RelayNames) {
    this.nats = nats;
    this.names = names;
  }

  /** Push registrations, kept current by a KV watch so that the push path asks NATS nothing. */
  private readonly pushes = new Map<string, PushRegistration>();
  private watching: { stop(): void } | undefined;

  async ensure(): Promise<void> {
    this.kv = await new Kvm(this.nats.js).create(this.names.kvBucket, { history: 1 });
    const watch = await this.kv.watch({ key: "push.>" });
    this.watching = watch;
    let ready: () => void = () => {};
    const initialized = new Promise<void>((r) => (ready = r));
    void (async () => {
      for await (const e of watch) {
        const agent = e.key.slice("push.".length);
        if (e.operation === "PUT" && e.value.length) this.pushes.set(agent, e.json() as PushRegistration);
        else this.pushes.delete(agent);
        if (e.delta === 0) ready();
      }
    })().catch(() => {});
    // An empty bucket yields no entries at all; do not wait for them.
    await Promise.race([initialized, new Promise((r) => setTimeout(r, 500))]);
  }

  close(): void {
    this.watching?.stop();
  }

  private store(): KV {
    if (!this.kv) throw new Error("subscriptions are not ready");
    return this.kv;
  }

  async subscribe(agent: string, topics: string[]): Promise<void> {
    const since = new Date().toISOString();
    for (const topic of topics) {
      await this.store().put(`topic.${encodeToken(topic)}.${encodeToken(agent)}`, JSON.stringify({ agent, topic, since }));
    }
  }

  async unsubscribe(agent: string, topics: string[]): Promise<void> {
    for (const topic of topics) await this.store().delete(`topic.${encodeToken(topic)}.${encodeToken(agent)}`);
  }

  async subscribers(topic: string): Promise<string[]> {
    const agents: string[] = [];
    for await (const k of await this.store().keys(`topic.${encodeToken(topic)}.>`)) {
      const e = await this.store().get(k);
      if (e?.value.length) agents.push((e.json() as { agent: string }).agent);
    }
    return agents.sort();
  }

  async topicsOf(agent: string): Promise<string[]> {
    const out: string[] = [];
    const suffix = `.${encodeToken(agent)}`;
    for await (const k of await this.store().keys("topic.>")) {
      if (!k.endsWith(suffix)) continue;
      const e = await this.store().get(k);
      if (e?.value.length) out.push((e.json() as { topic: string }).topic);
    }
    return out.sort();
  }

  async setPush(agent: string, webhook: string | null): Promise<void> {
    const key = `push.${encodeToken(agent)}`;
    if (webhook === null) {
      await this.store().delete(key);
      this.pushes.delete(encodeToken(agent));
    }
    else {
      const reg: PushRegistration = { agent, webhook, since: new Date().toISOString() };
      await this.store().put(key, JSON.stringify(reg));
      this.pushes.set(encodeToken(agent), reg);
    }
  }

  async push(agent: string): Promise<PushRegistration | undefined> {
    return this.pushes.get(encodeToken(agent));
  }
}
