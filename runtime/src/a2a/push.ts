// A2A push notifications (docs/a2a.md#push-notifications): the configs a caller registers for
// one of its tasks (CreateTaskPushNotificationConfig, or inline with SendMessage), kept beside
// the task in the agent's KV bucket, and their delivery: each change of the task (the events its
// stream sends) is POSTed to the config's URL as a StreamResponse, with its token and Bearer
// credentials, retried with backoff for a bounded time.
//
// Keys, beside the tasks (tasks.ts):
//   p.<caller>.<task id>.<hash of the config id>   the config and how far its deliveries got
//
// Delivery is a replay of the task's own KV entries, so a restart loses no update: the config
// record holds the task's revision delivered last and the task as it was then (without its
// history). Every runtime replica watches the tasks and the configs; a change of a task with
// configs, or a config seen for the first time (at start-up: all of them), makes the replica
// read the task's revisions after the one delivered and POST the events between each and the
// one before. Progress, retries (attempt count, first failure, next try) and a short lease, so
// that one replica at a time pushes a config, are written to the record with compare-and-set.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { type KV, type KvWatchEntry, KvWatchInclude } from "@nats-io/kv";
import type { Logger } from "pino";
import { classifyAnswer } from "../net/answer.ts";
import type { HttpClient } from "../net/http-client.ts";
import { pushUrlRefusal, type TargetPolicy, targetRefusedMessage } from "../net/targets.ts";
import { exponentialDelay } from "../util/backoff.ts";
import { errorMessage } from "../util/errors.ts";
import type { Caller } from "./callers.ts";
import { changes, type InlinePush } from "./service.ts";
import { asUnavailable, isTaskId, keyToken, type StoredTask, TaskStore } from "./tasks.ts";
import {
  A2aError,
  issues,
  type PushConfigRequest,
  type SendMessageRequest,
  type Task,
  TaskPushNotificationConfig,
} from "./wire.ts";

/** At most this many configs per task. */
export const MAX_CONFIGS_PER_TASK = 10;
/** An event is retried for this long after its first failure, then given up. */
export const GIVE_UP_AFTER_MS = 3_600_000;
/** The waits between attempts: from 1 s, doubling, at most 5 minutes (±20 %). */
const RETRY = { initialMs: 1000, maxMs: 300_000, jitter: 0.2 };
/** How long one replica holds a config's deliveries before another may take them over. */
const LEASE_MS = 60_000;
/** One POST's timeout. */
const POST_TIMEOUT_MS = 10_000;
export const NOTIFICATION_TOKEN_HEADER = "x-a2a-notification-token";

/** A config as A2A shows it (TaskPushNotificationConfig). */
export interface PushConfig {
  id: string;
  taskId: string;
  url: string;
  token?: string;
  authentication?: { scheme: string; credentials: string };
}

interface PushRecord {
  config: PushConfig;
  owner: string;
  /** The task's KV revision whose events were delivered last (0: none yet). */
  rev: number;
  /** The task as it stood at `rev`, without its history. */
  snapshot: Task;
  /** The event being retried: of the task's revision `rev`, its `index`-th event. */
  retry?: { rev: number; index: number; attempts: number; first: number; due: number };
  lease?: { holder: string; until: number };
}

const configKey = (owner: string, taskId: string, id: string) => `p.${keyToken(owner)}.${taskId}.${keyToken(id)}`;
/** The task's key (tasks.ts TaskStore.key) for a config key. */
const taskKeyOf = (key: string) => `t.${key.split(".").slice(1, 3).join(".")}`;
const withoutHistory = (t: Task): Task => {
  const { history: _, ...rest } = t;
  return rest;
};
const shown = (c: PushConfig): PushConfig => ({
  id: c.id,
  taskId: c.taskId,
  url: c.url,
  ...(c.token ? { token: c.token } : {}),
  ...(c.authentication ? { authentication: c.authentication } : {}),
});

export interface PushDeps {
  tasks: TaskStore;
  /** The agent's outbound HTTP client, with its target policy (spec.network.allowPrivateTargets). */
  http: Pick<HttpClient, "request">;
  targets: TargetPolicy;
  log: Logger;
  now?: () => number;
}

export class A2aPush implements InlinePush {
  private readonly deps: PushDeps;
  private readonly now: () => number;
  private readonly holder = randomUUID();
  /** The configs of each task (by task key), as the watch of the bucket sees them. */
  private readonly configs = new Map<string, Set<string>>();
  private readonly running = new Map<string, { again: boolean }>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private started = false;
  private readonly stop = new AbortController();

  constructor(deps: PushDeps) {
    this.deps = deps;
    this.now = deps.now ?? Date.now;
  }

  // --- the methods -------------------------------------------------------------------------

  /** The config as given, its URL checked (https, an address the agent may reach now). */
  private async check(raw: unknown): Promise<PushConfigRequest> {
    const r = TaskPushNotificationConfig.safeParse(raw);
    if (!r.success) throw new A2aError("InvalidParams", `invalid push notification config: ${issues(r.error)}`);
    const why = await pushUrlRefusal(this.deps.targets, r.data.url);
    if (why) throw new A2aError("InvalidParams", `push notification URL ${why}`);
    return r.data;
  }

  async create(caller: Caller, raw: unknown, taskIdFromPath?: string): Promise<PushConfig> {
    const given = await this.check(raw);
    const taskId = taskIdFromPath ?? given.taskId;
    if (!taskId) throw new A2aError("InvalidParams", "invalid push notification config: taskId is required");
    if (taskIdFromPath && given.taskId && given.taskId !== taskIdFromPath)
      throw new A2aError("InvalidParams", `the config names task ${given.taskId}, the path task ${taskIdFromPath}`);
    const found = await this.deps.tasks.get(caller.id, taskId);
    if (!found) throw new A2aError("TaskNotFound", `no task ${taskId}`);
    return this.put(caller, given, found.stored.task, found.revision);
  }

  async prepare(req: SendMessageRequest): Promise<unknown> {
    const raw = req.configuration?.taskPushNotificationConfig ?? req.configuration?.pushNotificationConfig;
    if (raw === undefined || raw === null) return undefined;
    return this.check(raw);
  }

  /**
   * The inline config of a message, once its task is stored: every change after the task as the
   * message left it is pushed. That is the task's revision holding `stored` (a follow-up's task,
   * or a repeat's, has revisions before it), else, when the bucket no longer keeps it, the
   * task's latest.
   */
  async attach(caller: Caller, stored: StoredTask, prepared: unknown): Promise<void> {
    const given = prepared as PushConfigRequest;
    try {
      const kv = this.deps.tasks.entries();
      const revisions = await this.revisions(kv, TaskStore.key(caller.id, stored.task.id), 0);
      const text = JSON.stringify(stored.task);
      const at = revisions.findLast((r) => JSON.stringify(r.task) === text) ?? revisions.at(-1);
      await this.put(caller, given, at?.task ?? stored.task, at?.rev ?? 0);
    } catch (err) {
      throw asUnavailable(err);
    }
  }

  /** Write a config (a new one, or one of the same id replaced: its deliveries go on where they were). */
  private async put(caller: Caller, given: PushConfigRequest, task: Task, rev: number): Promise<PushConfig> {
    const config: PushConfig = {
      // Without an id the config is the task's own (the SDKs' default): a repeat replaces it.
      id: given.id ?? task.id,
      taskId: task.id,
      url: given.url,
      ...(given.token ? { token: given.token } : {}),
      ...(given.authentication ? { authentication: given.authentication } : {}),
    };
    const kv = this.deps.tasks.entries();
    const key = configKey(caller.id, task.id, config.id);
    try {
      for (let attempt = 0; attempt < 20; attempt++) {
        const existing = await kv.get(key);
        if (existing?.value.length && existing.operation === "PUT") {
          const record = existing.json<PushRecord>();
          try {
            await kv.update(key, JSON.stringify({ ...record, config }), existing.revision);
            return shown(config);
          } catch (err) {
            if (!/wrong last sequence/i.test((err as Error).message)) throw err;
            continue;
          }
        }
        const count = (await this.keys(kv, caller.id, task.id)).length;
        if (count >= MAX_CONFIGS_PER_TASK)
          throw new A2aError(
            "InvalidParams",
            `task ${task.id} has ${count} push notification configs, the most it may have; delete one first`,
          );
        const record: PushRecord = { config, owner: caller.id, rev, snapshot: withoutHistory(task) };
        try {
          // A key deleted before is written again by create (listed again where keys are listed).
          await kv.create(key, JSON.stringify(record));
          return shown(config);
        } catch (err) {
          if (!/wrong last sequence|exists/i.test((err as Error).message)) throw err;
        }
      }
    } catch (err) {
      throw asUnavailable(err);
    }
    throw new A2aError("Unavailable", "the push notification config is changing too often; try again", {
      "retry-after": "1",
    });
  }

  private async keys(kv: KV, owner: string, taskId: string): Promise<string[]> {
    const out: string[] = [];
    for await (const k of await kv.keys(`p.${keyToken(owner)}.${taskId}.*`)) out.push(k);
    return out;
  }

  private async task(caller: Caller, taskId: string): Promise<void> {
    if (!isTaskId(taskId) || !(await this.deps.tasks.get(caller.id, taskId)))
      throw new A2aError("TaskNotFound", `no task ${taskId}`);
  }

  async get(caller: Caller, taskId: string, id: string): Promise<PushConfig> {
    await this.task(caller, taskId);
    const e = await this.deps.tasks
      .entries()
      .get(configKey(caller.id, taskId, id))
      .catch((err) => {
        throw asUnavailable(err);
      });
    if (!e?.value.length || e.operation !== "PUT")
      throw new A2aError("TaskNotFound", `task ${taskId} has no push notification config ${id}`);
    return shown(e.json<PushRecord>().config);
  }

  async list(caller: Caller, taskId: string, pageSize = 50, pageToken?: string) {
    await this.task(caller, taskId);
    const kv = this.deps.tasks.entries();
    const configs: PushConfig[] = [];
    try {
      for (const k of await this.keys(kv, caller.id, taskId)) {
        const e = await kv.get(k);
        if (e?.value.length && e.operation === "PUT") configs.push(shown(e.json<PushRecord>().config));
      }
    } catch (err) {
      throw asUnavailable(err);
    }
    configs.sort((a, b) => a.id.localeCompare(b.id));
    const offset = pageToken ? Number(Buffer.from(pageToken, "base64url").toString()) : 0;
    if (!Number.isInteger(offset) || offset < 0)
      throw new A2aError("InvalidParams", "pageToken is not one this agent gave");
    const next = offset + pageSize < configs.length ? Buffer.from(String(offset + pageSize)).toString("base64url") : "";
    return { configs: configs.slice(offset, offset + pageSize), nextPageToken: next };
  }

  /** Delete a config; deleting one that is not there is no error (the task must be the caller's). */
  async delete(caller: Caller, taskId: string, id: string): Promise<void> {
    await this.task(caller, taskId);
    await this.deps.tasks
      .entries()
      .delete(configKey(caller.id, taskId, id))
      .catch((err) => {
        throw asUnavailable(err);
      });
  }

  // --- delivery ----------------------------------------------------------------------------

  /** Watch the bucket and push (at start-up, once the bucket exists; again is no error). */
  start(): void {
    if (this.started) return;
    this.started = true;
    // Each (re)start of the configs' watch sees every config again, and kicks every task that has
    // one: the task changes a broken watch missed are caught up.
    void this.follow(
      "p.>",
      (e) => this.configSeen(e),
      false,
      () => this.configs.clear(),
    );
    void this.follow(
      "t.>",
      (e) => {
        if (this.configs.has(e.key)) this.kick(e.key);
      },
      true,
    );
  }

  close(): void {
    this.stop.abort();
    for (const t of this.timers.values()) clearTimeout(t.timer);
    this.timers.clear();
  }

  /** Follow the keys under `filter` for as long as the face runs, watching again after a failure. */
  private async follow(
    filter: string,
    seen: (e: KvWatchEntry) => void,
    updatesOnly = false,
    started?: () => void,
  ): Promise<void> {
    let failures = 0;
    while (!this.stop.signal.aborted) {
      try {
        const watch = await this.deps.tasks
          .entries()
          // The tasks' changes are only a signal: their keys, not their values.
          .watch({ key: filter, ...(updatesOnly ? { include: KvWatchInclude.UpdatesOnly, headers_only: true } : {}) });
        const end = () => watch.stop();
        this.stop.signal.addEventListener("abort", end, { once: true });
        started?.();
        failures = 0;
        for await (const e of watch) seen(e);
        this.stop.signal.removeEventListener("abort", end);
      } catch (err) {
        if (!this.stop.signal.aborted)
          this.deps.log.debug({ err: errorMessage(err), filter }, "A2A push watch failed; watching again");
      }
      // A watch that ended (NATS gone for a while) starts again; the configs' initial values kick every task again.
      await sleep(exponentialDelay(++failures, { initialMs: 500, maxMs: 10_000 }), undefined, {
        signal: this.stop.signal,
      }).catch(() => {});
    }
  }

  private configSeen(e: KvWatchEntry): void {
    const task = taskKeyOf(e.key);
    const set = this.configs.get(task);
    if (e.operation !== "PUT") {
      set?.delete(e.key);
      if (set && !set.size) this.configs.delete(task);
      return;
    }
    if (set?.has(e.key)) return;
    if (set) set.add(e.key);
    else this.configs.set(task, new Set([e.key]));
    this.kick(task);
  }

  /** Push what is due for a task's configs; one run per task at a time, another after it when asked meanwhile. */
  private kick(task: string): void {
    if (this.stop.signal.aborted) return;
    const run = this.running.get(task);
    if (run) {
      run.again = true;
      return;
    }
    const state = { again: true };
    this.running.set(task, state);
    void (async () => {
      try {
        while (state.again && !this.stop.signal.aborted) {
          state.again = false;
          for (const key of [...(this.configs.get(task) ?? [])]) {
            try {
              await this.deliver(key, task);
            } catch (err) {
              // NATS unreachable, most likely: the same work is looked at again.
              this.deps.log.warn({ err: errorMessage(err), task }, "A2A push notifications paused; trying again");
              this.later(task, this.now() + 5_000);
            }
          }
        }
      } finally {
        this.running.delete(task);
      }
    })();
  }

  /** Kick the task again at `at` (the earliest of the times asked). */
  private later(task: string, at: number): void {
    const t = this.timers.get(task);
    if (t && t.at <= at) return;
    if (t) clearTimeout(t.timer);
    const timer = setTimeout(
      () => {
        this.timers.delete(task);
        this.kick(task);
      },
      Math.max(0, at - this.now()),
    );
    timer.unref();
    this.timers.set(task, { at, timer });
  }

  /** Deliver the events of one config that are due, from where it got to. */
  private async deliver(key: string, task: string): Promise<void> {
    const kv = this.deps.tasks.entries();
    const e = await kv.get(key);
    if (!e?.value.length || e.operation !== "PUT") return;
    let record = e.json<PushRecord>();
    let revision = e.revision;
    const now = this.now();
    if (record.retry && record.retry.due > now) return this.later(task, record.retry.due);
    if (record.lease && record.lease.holder !== this.holder && record.lease.until > now)
      return this.later(task, record.lease.until + 100);
    const entries = await this.revisions(kv, task, record.rev);
    if (!entries.length) return;
    /** Write the record (compare-and-set); false when it changed meanwhile (replaced, deleted, taken). */
    const save = async (next: PushRecord): Promise<boolean> => {
      try {
        revision = await kv.update(key, JSON.stringify(next), revision);
        record = next;
        return true;
      } catch (err) {
        if (/wrong last sequence/i.test((err as Error).message)) {
          this.kick(task);
          return false;
        }
        throw err;
      }
    };
    if (!(await save({ ...record, lease: { holder: this.holder, until: this.now() + LEASE_MS } }))) return;
    let before = record.snapshot;
    for (const entry of entries) {
      const after = entry.task;
      const events = changes(before, after);
      const from = record.retry?.rev === entry.rev ? record.retry.index : 0;
      for (let i = from; i < events.length; i++) {
        const outcome = await this.post(record.config, events[i]!);
        if (outcome.kind === "delivered") continue;
        const r = record.retry?.rev === entry.rev && record.retry.index === i ? record.retry : undefined;
        const attempts = (r?.attempts ?? 0) + 1;
        const first = r?.first ?? this.now();
        const given = outcome.kind === "final" || this.now() - first >= GIVE_UP_AFTER_MS;
        const log = { taskId: record.config.taskId, config: record.config.id, attempts, reason: outcome.reason };
        if (given) {
          this.deps.log.warn(log, "A2A push notification given up");
          continue;
        }
        const wait = Math.max(exponentialDelay(attempts, RETRY), outcome.retryAfterMs ?? 0);
        const due = this.now() + wait;
        this.deps.log.info({ ...log, retryInMs: Math.round(wait) }, "A2A push notification failed; retrying");
        if (await save({ ...record, retry: { rev: entry.rev, index: i, attempts, first, due }, lease: undefined }))
          this.later(task, due);
        return;
      }
      const { retry: _, ...rest } = record;
      const next = {
        ...rest,
        rev: entry.rev,
        snapshot: withoutHistory(after),
        lease: { holder: this.holder, until: this.now() + LEASE_MS },
      };
      if (!(await save(next))) return;
      before = next.snapshot;
    }
    await save({ ...record, lease: undefined });
  }

  /** The task's stored revisions after `rev`, oldest first (those the bucket still keeps). */
  private async revisions(kv: KV, task: string, rev: number): Promise<{ rev: number; task: Task }[]> {
    const out: { rev: number; task: Task }[] = [];
    const history = await kv.history({ key: task });
    for await (const e of history) {
      if (e.revision > rev && e.operation === "PUT" && e.value.length)
        out.push({ rev: e.revision, task: e.json<StoredTask>().task });
    }
    history.stop();
    return out.sort((a, b) => a.rev - b.rev);
  }

  /** POST one event (a StreamResponse) to the config's URL, checked on the address connected to. */
  private async post(
    config: PushConfig,
    event: unknown,
  ): Promise<{ kind: "delivered" } | { kind: "retry" | "final"; reason: string; retryAfterMs?: number }> {
    try {
      const res = await this.deps.http.request(config.url, {
        method: "POST",
        headers: {
          "content-type": "application/a2a+json",
          ...(config.token ? { [NOTIFICATION_TOKEN_HEADER]: config.token } : {}),
          ...(config.authentication
            ? { authorization: `${config.authentication.scheme} ${config.authentication.credentials}` }
            : {}),
        },
        body: JSON.stringify(event),
        timeoutMs: POST_TIMEOUT_MS,
        maxBytes: 64 * 1024,
      });
      const answer = classifyAnswer(res.status, res.headers.get("retry-after"), this.now());
      if (answer.kind === "delivered") return answer;
      if (answer.kind === "final")
        return {
          kind: "final",
          reason: answer.redirect
            ? `the receiver answered ${res.status} (redirects are not followed)`
            : `the receiver refused it with ${res.status}`,
        };
      return { kind: "retry", reason: `the receiver answered ${res.status}`, retryAfterMs: answer.retryAfterMs };
    } catch (err) {
      const refused = targetRefusedMessage(err);
      if (refused) return { kind: "final", reason: `the push notification URL is refused as a target: ${refused}` };
      return { kind: "retry", reason: `the receiver is unreachable: ${errorMessage(err)}` };
    }
  }
}
