// The A2A operations of an IFP agent, whichever binding carries them (docs/a2a.md): a message
// is answered once its task is recorded (submitted) and its IFP form stored in the agent's
// inbox stream for the hand-off, deduplicated by (caller, messageId); the application's
// answers (a reply to the hand-off through the local API's outbox, or a task update) become the
// task's status, messages and artifacts; streams follow the task in its KV bucket.
import type { Logger } from "pino";
import { ProtocolError } from "../protocol/errors.ts";
import type { Agent } from "../resources/agent.ts";
import type { Caller } from "./callers.ts";
import { type Claim, isTaskId, newTaskId, type StoredTask, type TaskStore, taskOfHandoff } from "./tasks.ts";
import {
  A2aError,
  type Artifact,
  INTERRUPTED,
  type ListTasksRequest,
  type Message,
  type SendMessageRequest,
  type Task,
  type TaskState,
  TaskStateSchema,
  TERMINAL,
} from "./wire.ts";

/** What the hand-off needs to know of a message besides the message. */
export interface HandOffMeta {
  messageId: string;
  sender: string;
  authLevel: number;
  source: string;
  conversationId: string;
}

export interface A2aServiceDeps {
  agent: Agent;
  tasks: TaskStore;
  /** Store the IFP form of a message for the application (the agent's inbox stream); resolves after the ack. */
  handOff(message: Record<string, unknown>, meta: HandOffMeta): Promise<void>;
  /** How long a blocking send waits for a terminal or interrupted state. */
  waitForMs: number;
  log: Logger;
  now?: () => number;
  /** Push notification configs given inline with a message (configuration.taskPushNotificationConfig). */
  push?: InlinePush;
}

/** The inline push notification config of SendMessage: checked before the message is accepted, kept once its task is. */
export interface InlinePush {
  prepare(req: SendMessageRequest): Promise<unknown>;
  attach(caller: Caller, stored: StoredTask, prepared: unknown): Promise<void>;
}

/** One event of a task's stream, as StreamResponse's payload. */
export type StreamEvent =
  | { task: Task }
  | { statusUpdate: { taskId: string; contextId: string; status: Task["status"] } }
  | {
      artifactUpdate: { taskId: string; contextId: string; artifact: Artifact; append?: boolean; lastChunk?: boolean };
    };

/** What the application may say of a task (local API POST /a2a/tasks/{id}, or a reply's extension). */
export interface TaskUpdate {
  state?: TaskState;
  message?: Message;
  artifact?: Artifact & { append?: boolean; lastChunk?: boolean };
}

export class A2aService {
  private readonly deps: A2aServiceDeps;
  private readonly now: () => number;

  constructor(deps: A2aServiceDeps) {
    this.deps = deps;
    this.now = deps.now ?? Date.now;
  }

  private iso(): string {
    return new Date(this.now()).toISOString();
  }

  /** SendMessage: the task once it is durable (and, when blocking, once the application got it to rest or waitFor passed). */
  async send(caller: Caller, req: SendMessageRequest): Promise<Task> {
    const stored = await this.accept(caller, req);
    const blocking = req.configuration?.returnImmediately !== true;
    const task = blocking ? await this.settled(caller, stored) : stored.task;
    return withHistory(task, req.configuration?.historyLength);
  }

  /** Record the message durably and hand it on; the task as it then stands. */
  async accept(caller: Caller, req: SendMessageRequest): Promise<StoredTask> {
    const msg = req.message;
    if (msg.role !== "ROLE_USER") throw new A2aError("InvalidParams", "a client's message must have role ROLE_USER");
    const push = await this.deps.push?.prepare(req);
    const followUp = msg.taskId !== undefined;
    if (followUp) {
      const existing = await this.deps.tasks.get(caller.id, msg.taskId!);
      if (!existing) throw new A2aError("TaskNotFound", `no task ${msg.taskId}`);
      if (msg.contextId !== undefined && msg.contextId !== existing.stored.task.contextId)
        throw new A2aError(
          "InvalidParams",
          `the task ${msg.taskId} belongs to context ${existing.stored.task.contextId}`,
        );
    }
    const { claim, repeat } = await this.deps.tasks.claim(caller.id, msg.messageId, {
      taskId: msg.taskId ?? newTaskId(),
      date: this.iso(),
      followUp,
    });
    const stored = await this.record(caller, claim, msg, repeat);
    await this.handOff(caller, claim, stored, msg);
    if (push !== undefined) await this.deps.push!.attach(caller, stored, push);
    return stored;
  }

  /** The task with the message in its history, made or changed now (or found so, for a repeat). */
  private async record(caller: Caller, claim: Claim, msg: Message, repeat: boolean): Promise<StoredTask> {
    const at = this.iso();
    if (claim.followUp) {
      const changed = await this.deps.tasks.mutate(caller.id, claim.taskId, (s) => {
        if (s.task.history?.some((m) => m.messageId === msg.messageId)) return undefined;
        if (TERMINAL.has(s.task.status.state)) return undefined;
        s.task.history = [...(s.task.history ?? []), { ...msg, taskId: s.task.id, contextId: s.task.contextId }];
        s.task.status = { state: "TASK_STATE_SUBMITTED", timestamp: at };
        s.updated = at;
        return s;
      });
      if (!changed) throw new A2aError("TaskNotFound", `no task ${claim.taskId}`);
      if (!changed.task.history?.some((m) => m.messageId === msg.messageId))
        throw new A2aError(
          "UnsupportedOperation",
          `task ${claim.taskId} is ${changed.task.status.state} and takes no more messages`,
        );
      return changed;
    }
    const contextId = msg.contextId ?? newTaskId();
    const stored: StoredTask = {
      owner: caller.id,
      updated: at,
      task: {
        id: claim.taskId,
        contextId,
        status: { state: "TASK_STATE_SUBMITTED", timestamp: claim.date },
        history: [{ ...msg, taskId: claim.taskId, contextId }],
      },
    };
    if (await this.deps.tasks.create(stored)) return stored;
    // Made before: a repeat of the message (or a crash after its claim).
    const found = await this.deps.tasks.get(caller.id, claim.taskId);
    if (!found) throw new A2aError("Unavailable", "the task could not be recorded; try again", { "retry-after": "1" });
    if (!repeat) this.deps.log.debug({ taskId: claim.taskId }, "A2A task existed before its claim");
    return found.stored;
  }

  /** The message's IFP form into the inbox stream: the same id and date for a repeat, so it is absorbed there. */
  private async handOff(caller: Caller, claim: Claim, stored: StoredTask, msg: Message): Promise<void> {
    const task = stored.task;
    const text = msg.parts
      .filter((p) => p.text !== undefined)
      .map((p) => p.text)
      .join("\n");
    const parts = msg.parts
      .filter((p) => p.text === undefined)
      .map((p) =>
        p.data !== undefined
          ? {
              content_type: p.mediaType || "application/json",
              ...(p.filename ? { name: p.filename } : {}),
              content: p.data,
            }
          : p.url !== undefined
            ? {
                content_type: p.mediaType || "text/uri-list",
                ...(p.filename ? { name: p.filename } : {}),
                content: p.url,
              }
            : {
                content_type: p.mediaType || "application/octet-stream",
                ...(p.filename ? { name: p.filename } : {}),
                encoding: "base64",
                content: p.raw,
              },
      );
    const message = {
      ifp: 4,
      headers: {
        message_id: claim.ifpId,
        date: claim.date,
        from: { agent: caller.id },
        to: [{ agent: this.deps.agent.spec.agentId }],
        conversation_id: task.contextId,
        sequence: Math.max(0, (task.history?.findIndex((m) => m.messageId === msg.messageId) ?? 0) + 1),
        phase: "request",
        extensions: {
          a2a: {
            origin: "a2a",
            task_id: task.id,
            context_id: task.contextId,
            message_id: msg.messageId,
            caller: caller.id,
            auth_level: caller.level,
            ...(msg.metadata ? { metadata: msg.metadata } : {}),
          },
        },
      },
      body: { ...(text ? { text } : {}), ...(parts.length ? { parts } : {}) },
    };
    try {
      await this.deps.handOff(message, {
        messageId: claim.ifpId,
        sender: caller.id,
        authLevel: caller.level,
        source: caller.source,
        conversationId: task.contextId,
      });
    } catch (err) {
      if (err instanceof ProtocolError) {
        if (err.statusCode === 413) throw new A2aError("TooLarge", err.message);
        throw new A2aError("Unavailable", err.message, { "retry-after": err.headers["retry-after"] ?? "5" });
      }
      throw err;
    }
  }

  /** The task once terminal or interrupted, or as it stands after waitFor. */
  private async settled(caller: Caller, stored: StoredTask): Promise<Task> {
    if (atRest(stored.task)) return stored.task;
    let last = stored.task;
    const watch = await this.deps.tasks.watch(caller.id, stored.task.id);
    const timer = setTimeout(() => watch.stop(), this.deps.waitForMs);
    try {
      for await (const e of watch) {
        if (e.operation !== "PUT" || !e.value.length) continue;
        last = e.json<StoredTask>().task;
        if (atRest(last)) break;
      }
    } finally {
      clearTimeout(timer);
      watch.stop();
    }
    return last;
  }

  async get(caller: Caller, id: string, historyLength?: number): Promise<Task> {
    const found = await this.deps.tasks.get(caller.id, id);
    if (!found) throw new A2aError("TaskNotFound", `no task ${id}`);
    return withHistory(found.stored.task, historyLength);
  }

  async list(caller: Caller, req: ListTasksRequest) {
    let all = await this.deps.tasks.list(caller.id);
    if (req.contextId) all = all.filter((s) => s.task.contextId === req.contextId);
    if (req.status && req.status !== "TASK_STATE_UNSPECIFIED")
      all = all.filter((s) => s.task.status.state === req.status);
    if (req.statusTimestampAfter) {
      const after = Date.parse(req.statusTimestampAfter);
      all = all.filter((s) => Date.parse(s.task.status.timestamp) >= after);
    }
    // Last updated first, then by id: a stable order for the page tokens (offsets).
    all.sort((a, b) => b.updated.localeCompare(a.updated) || a.task.id.localeCompare(b.task.id));
    const pageSize = req.pageSize ?? 50;
    const offset = req.pageToken ? Number(Buffer.from(req.pageToken, "base64url").toString()) : 0;
    if (!Number.isInteger(offset) || offset < 0)
      throw new A2aError("InvalidParams", "pageToken is not one this agent gave");
    const page = all.slice(offset, offset + pageSize);
    const next = offset + pageSize < all.length ? Buffer.from(String(offset + pageSize)).toString("base64url") : "";
    return {
      tasks: page.map((s) => {
        const t = withHistory(s.task, req.historyLength);
        if (!req.includeArtifacts) delete t.artifacts;
        return t;
      }),
      nextPageToken: next,
      pageSize,
      totalSize: all.length,
    };
  }

  async cancel(caller: Caller, id: string): Promise<Task> {
    let refused: string | undefined;
    const changed = await this.deps.tasks.mutate(caller.id, id, (s) => {
      if (TERMINAL.has(s.task.status.state)) {
        refused = s.task.status.state;
        return undefined;
      }
      const at = this.iso();
      s.task.status = { state: "TASK_STATE_CANCELED", timestamp: at };
      s.updated = at;
      return s;
    });
    if (!changed) throw new A2aError("TaskNotFound", `no task ${id}`);
    if (refused) throw new A2aError("TaskNotCancelable", `task ${id} is ${refused} already`);
    return changed.task;
  }

  /**
   * The task's events: the task first, then each change of its status and artifacts, until it
   * is terminal or interrupted (or `signal` aborts). `from`: the task as the caller has it.
   */
  async *follow(caller: Caller, id: string, signal: AbortSignal, from?: Task): AsyncGenerator<StreamEvent> {
    const found = await this.deps.tasks.get(caller.id, id);
    if (!found) throw new A2aError("TaskNotFound", `no task ${id}`);
    const watch = await this.deps.tasks.watch(caller.id, id);
    const stop = () => watch.stop();
    signal.addEventListener("abort", stop, { once: true });
    if (signal.aborted) stop();
    try {
      let last = from ?? found.stored.task;
      yield { task: last };
      if (atRest(last)) return;
      for await (const e of watch) {
        if (e.operation !== "PUT" || !e.value.length) continue;
        const next = e.json<StoredTask>().task;
        for (const ev of changes(last, next)) yield ev;
        last = next;
        if (atRest(last)) return;
      }
    } finally {
      signal.removeEventListener("abort", stop);
      watch.stop();
    }
  }

  /** SubscribeToTask: refused for a task that is terminal already. */
  async subscribable(caller: Caller, id: string): Promise<void> {
    const found = await this.deps.tasks.get(caller.id, id);
    if (!found) throw new A2aError("TaskNotFound", `no task ${id}`);
    if (TERMINAL.has(found.stored.task.status.state))
      throw new A2aError("UnsupportedOperation", `task ${id} is ${found.stored.task.status.state}; nothing follows`);
  }

  /** The application's word on a task (the local API). Undefined: no such task. */
  async update(taskId: string, update: TaskUpdate): Promise<Task | undefined> {
    const found = await this.deps.tasks.find(taskId);
    if (!found) return undefined;
    let refused: string | undefined;
    const changed = await this.deps.tasks.mutate(found.owner, taskId, (s) => {
      if (TERMINAL.has(s.task.status.state)) {
        refused = s.task.status.state;
        return undefined;
      }
      const at = this.iso();
      const message = update.message
        ? { ...update.message, role: "ROLE_AGENT" as const, taskId, contextId: s.task.contextId }
        : undefined;
      if (message && !s.task.history?.some((m) => m.messageId === message.messageId))
        s.task.history = [...(s.task.history ?? []), message];
      if (update.artifact) {
        const { append, lastChunk: _, ...artifact } = update.artifact;
        const artifacts = s.task.artifacts ?? [];
        const i = artifacts.findIndex((a) => a.artifactId === artifact.artifactId);
        if (i < 0) artifacts.push(artifact);
        else {
          const before = artifacts[i]!;
          artifacts[i] = append ? { ...before, parts: [...before.parts, ...artifact.parts] } : artifact;
        }
        s.task.artifacts = artifacts;
      }
      if (update.state || message)
        s.task.status = {
          state: update.state ?? s.task.status.state,
          ...(message ? { message } : {}),
          timestamp: at,
        };
      s.updated = at;
      return s;
    });
    if (refused) throw new A2aError("UnsupportedOperation", `task ${taskId} is ${refused} and cannot change`);
    return changed?.task;
  }

  /** The task a hand-off's IFP message_id belongs to, when it is one of this face's. */
  static taskOf(ifpMessageId: string | undefined): string | undefined {
    return ifpMessageId ? taskOfHandoff(ifpMessageId) : undefined;
  }
}

const atRest = (t: Task) => TERMINAL.has(t.status.state) || INTERRUPTED.has(t.status.state);

/** The task with at most `n` of its latest messages (all when unset; none for 0). */
function withHistory(task: Task, n: number | undefined): Task {
  const t = structuredClone(task);
  if (n === undefined) return t;
  if (n === 0) delete t.history;
  else if (t.history) t.history = t.history.slice(-n);
  return t;
}

/** The events between two states of a task: new or changed artifacts, then a new status. */
export function changes(before: Task, after: Task): StreamEvent[] {
  const out: StreamEvent[] = [];
  const old = new Map((before.artifacts ?? []).map((a) => [a.artifactId, JSON.stringify(a)]));
  for (const a of after.artifacts ?? []) {
    if (old.get(a.artifactId) !== JSON.stringify(a))
      out.push({ artifactUpdate: { taskId: after.id, contextId: after.contextId, artifact: a } });
  }
  if (JSON.stringify(before.status) !== JSON.stringify(after.status))
    out.push({ statusUpdate: { taskId: after.id, contextId: after.contextId, status: after.status } });
  return out;
}

export { isTaskId };

/** What the outbox offers: enqueue a signed IFP message. */
export interface Enqueue<M, R> {
  enqueue(message: M): Promise<R>;
}

export type OutboundMessage = {
  headers: {
    message_id: string;
    to: { agent: string }[];
    thread?: { in_reply_to?: string };
    extensions?: Record<string, unknown>;
  };
  body:
    | { text?: string; parts?: { content_type: string; name?: string; content?: unknown }[] }
    | Record<string, unknown>;
};

/**
 * The outbox as the local API sees it, with the A2A tasks in front: a reply to the hand-off of
 * an A2A message (thread.in_reply_to is its IFP message_id) is not sent anywhere but becomes the
 * task's agent message and status: TASK_STATE_COMPLETED, or the state the reply names in
 * headers.extensions.a2a.state. Every other message goes to the outbox unchanged.
 */
export function a2aReplies<M extends OutboundMessage, R extends { duplicate: boolean }>(
  service: A2aService,
  outbox: Enqueue<M, R>,
  /** Told of each reply that became a task update (its message_id). */
  answered?: (messageId: string) => void,
): Enqueue<M, R> {
  return {
    enqueue: async (message) => {
      const taskId = A2aService.taskOf(message.headers.thread?.in_reply_to);
      if (!taskId || message.headers.to.length !== 1) return outbox.enqueue(message);
      const ext = (message.headers.extensions?.a2a ?? {}) as { state?: unknown };
      const state = TaskStateSchema.safeParse(ext.state);
      const body = message.body as {
        text?: string;
        parts?: { content_type: string; name?: string; content?: unknown }[];
      };
      const parts: Message["parts"] = [
        ...(typeof body.text === "string" && body.text ? [{ text: body.text }] : []),
        ...(body.parts ?? []).map((p) =>
          typeof p.content === "string" && p.content_type.startsWith("text/")
            ? { text: p.content, mediaType: p.content_type, ...(p.name ? { filename: p.name } : {}) }
            : { data: p.content, mediaType: p.content_type, ...(p.name ? { filename: p.name } : {}) },
        ),
      ];
      let task: Task | undefined;
      try {
        task = await service.update(taskId, {
          state: state.success ? state.data : "TASK_STATE_COMPLETED",
          ...(parts.length ? { message: { messageId: message.headers.message_id, role: "ROLE_AGENT", parts } } : {}),
        });
      } catch (err) {
        if (err instanceof A2aError && err.kind === "UnsupportedOperation")
          throw new ProtocolError(409, "invalid_format", err.message);
        if (err instanceof A2aError && err.kind === "TooLarge")
          throw new ProtocolError(413, "payload_too_large", err.message);
        if (err instanceof A2aError) throw new ProtocolError(503, "unavailable", err.message, err.headers);
        throw err;
      }
      if (!task) return outbox.enqueue(message);
      answered?.(message.headers.message_id);
      return { duplicate: false } as R;
    },
  };
}
