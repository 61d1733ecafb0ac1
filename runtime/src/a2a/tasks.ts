// The A2A tasks of one agent, kept in a NATS KV bucket of its own (file storage, the agent's
// replicas; contract/agent-names.ts a2aTasksBucket) and shared by its runtime replicas.
//
// Keys, every token made safe for a subject:
//   t.<caller>.<task id>        the task (A2A JSON) with its caller
//   m.<caller>.<message hash>   the claim of a caller's messageId: which task and hand-off it made
// <caller> is a hash of the caller's identity, so a task is found only under the caller that
// made it: another caller's task id is simply not there.
import { createHash, randomUUID } from "node:crypto";
import type { KV, KvWatchEntry } from "@nats-io/kv";
import type { Nats } from "../nats/connection.ts";
import { TASK_INDEX } from "../contract/key-indexes.ts";
import { A2aError, type Task } from "./wire.ts";

export interface StoredTask {
  task: Task;
  /** The caller's identity (agent id, or the bearer token's name). */
  owner: string;
  /** When the task last changed (ISO). */
  updated: string;
}

export interface Claim {
  taskId: string;
  /** The message_id of the IFP message handed to the application for this A2A message. */
  ifpId: string;
  /** The date of that IFP message: a repeat hands the same message again. */
  date: string;
  /** The message continues an existing task (Message.taskId). */
  followUp: boolean;
}

const hash = (text: string, n = 32) => createHash("sha256").update(text).digest("hex").slice(0, n);
/** Task ids this agent makes are UUIDs; a caller's other ids are not keys and find nothing. */
const TASK_ID = /^[A-Za-z0-9-]{1,64}$/;

export const isTaskId = (id: string): boolean => TASK_ID.test(id);

/** The key token of a caller (or of any other text): a hash, safe in a subject. */
export const keyToken = (text: string): string => hash(text);

/** The IFP message_id of the hand-off of a caller's A2A message in a task. */
export function handoffId(taskId: string, owner: string, messageId: string): string {
  return `a2a-${taskId}-${hash(`${owner}\n${messageId}`, 16)}`;
}

/** The task id an IFP message_id made by handoffId() belongs to. */
export function taskOfHandoff(messageId: string): string | undefined {
  const m = /^a2a-([A-Za-z0-9-]{1,64})-[0-9a-f]{16}$/.exec(messageId);
  return m?.[1];
}

export class TaskStore {
  private readonly nats: Pick<Nats, "bucket" | "isConnected" | "nc">;
  private readonly bucket: string;
  private kv: KV | undefined;

  constructor(nats: Pick<Nats, "bucket" | "isConnected" | "nc">, bucket: string) {
    this.nats = nats;
    this.bucket = bucket;
  }

  async ensure(): Promise<void> {
    this.kv = await this.nats.bucket(this.bucket, { history: 5 }, TASK_INDEX);
  }

  private store(): KV {
    if (!this.kv || !this.nats.isConnected)
      throw new A2aError("Unavailable", "the task store (NATS JetStream) is not reachable", { "retry-after": "5" });
    return this.kv;
  }

  /** The bucket itself, for the entries kept beside the tasks (push notification configs); 503 when unreachable. */
  entries(): KV {
    return this.store();
  }

  /** A task NATS cannot carry (its max_payload, less room for headers) is refused: 413, not a retry for ever. */
  private fits(data: string): string {
    const max = this.nats.nc?.info?.max_payload;
    if (max && Buffer.byteLength(data) + 8 * 1024 > max)
      throw new A2aError(
        "TooLarge",
        `the task would grow to ${Buffer.byteLength(data)} bytes, more than the task store takes (NATS max_payload ${max} bytes)`,
      );
    return data;
  }

  static key(owner: string, taskId: string): string {
    return `t.${hash(owner)}.${taskId}`;
  }

  /**
   * Claim a caller's messageId for `proposed`, or find the claim made before: a repeated
   * messageId of the same caller is the same message (deduplicated), never a second hand-off.
   */
  async claim(
    owner: string,
    messageId: string,
    proposed: Omit<Claim, "ifpId">,
  ): Promise<{ claim: Claim; repeat: boolean }> {
    const kv = this.store();
    const key = `m.${hash(owner)}.${hash(messageId)}`;
    const claim: Claim = { ...proposed, ifpId: handoffId(proposed.taskId, owner, messageId) };
    try {
      await kv.create(key, JSON.stringify(claim));
      return { claim, repeat: false };
    } catch (err) {
      if (!(err instanceof A2aError) && /exists|wrong last sequence/i.test((err as Error).message)) {
        const e = await kv.get(key);
        if (e?.value.length) return { claim: e.json<Claim>(), repeat: true };
      }
      throw asUnavailable(err);
    }
  }

  async get(owner: string, taskId: string): Promise<{ stored: StoredTask; revision: number } | undefined> {
    if (!isTaskId(taskId)) return undefined;
    const e = await this.store().get(TaskStore.key(owner, taskId));
    return e?.value.length && e.operation === "PUT"
      ? { stored: e.json<StoredTask>(), revision: e.revision }
      : undefined;
  }

  /** Write a new task; false when it exists already (a repeat after a crash). */
  async create(stored: StoredTask): Promise<boolean> {
    try {
      await this.store().create(TaskStore.key(stored.owner, stored.task.id), this.fits(JSON.stringify(stored)));
      return true;
    } catch (err) {
      if (!(err instanceof A2aError) && /exists|wrong last sequence/i.test((err as Error).message)) return false;
      throw asUnavailable(err);
    }
  }

  /**
   * Change a task (compare-and-set on its revision, again on a concurrent change). `change`
   * returns the new task, or undefined to leave it. Undefined when there is no such task.
   */
  async mutate(
    owner: string,
    taskId: string,
    change: (s: StoredTask) => StoredTask | undefined,
  ): Promise<StoredTask | undefined> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const found = await this.get(owner, taskId);
      if (!found) return undefined;
      const next = change(structuredClone(found.stored));
      if (!next) return found.stored;
      try {
        await this.store().update(TaskStore.key(owner, taskId), this.fits(JSON.stringify(next)), found.revision);
        return next;
      } catch (err) {
        if (err instanceof A2aError || !/wrong last sequence/i.test((err as Error).message)) throw asUnavailable(err);
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
      }
    }
    throw new A2aError("Unavailable", `task ${taskId} is changing too often; try again`, { "retry-after": "1" });
  }

  /** A caller's tasks (at most `max`). */
  async list(owner: string, max = 10_000): Promise<StoredTask[]> {
    const kv = this.store();
    const keys: string[] = [];
    for await (const k of await kv.keys(`t.${hash(owner)}.*`)) {
      keys.push(k);
      if (keys.length >= max) break;
    }
    const out: StoredTask[] = [];
    for (const k of keys) {
      const e = await kv.get(k);
      if (e?.value.length && e.operation === "PUT") out.push(e.json<StoredTask>());
    }
    return out;
  }

  /** The task with this id whoever made it (the application's side: the local API). */
  async find(taskId: string): Promise<StoredTask | undefined> {
    if (!isTaskId(taskId)) return undefined;
    const kv = this.store();
    for await (const k of await kv.keys(`t.*.${taskId}`)) {
      const e = await kv.get(k);
      if (e?.value.length && e.operation === "PUT") return e.json<StoredTask>();
    }
    return undefined;
  }

  /** Every change of one task from now on (and its current value first). */
  async watch(owner: string, taskId: string): Promise<AsyncIterable<KvWatchEntry> & { stop(): void }> {
    return (await this.store().watch({
      key: TaskStore.key(owner, taskId),
    })) as unknown as AsyncIterable<KvWatchEntry> & {
      stop(): void;
    };
  }
}

export const newTaskId = (): string => randomUUID();

export function asUnavailable(err: unknown): Error {
  if (err instanceof A2aError) return err;
  return new A2aError("Unavailable", `the task store failed: ${(err as Error).message}`, { "retry-after": "5" });
}
