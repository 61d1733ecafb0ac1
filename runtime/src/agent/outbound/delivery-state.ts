// The delivery state of outbound messages: the pure rules of a recipient's next state after an
// attempt (retry, backoff, deadline, redrive), and DeliveryStates, the records and dead-letter
// index in a NATS KV bucket that the outbound worker and the outbox routes read and write.
import { randomUUID } from "node:crypto";
import type { KV } from "@nats-io/kv";
import type { Nats } from "../../nats/connection.ts";
import { DEAD_LETTER_INDEX } from "../../contract/key-indexes.ts";
import { encodeToken } from "../../contract/nats.ts";
import type { DeliveryRecord, RecipientState, RecipientStatus } from "../../protocol/local-api.ts";

export type { DeliveryRecord, RecipientState, RecipientStatus };

const PENDING: RecipientStatus[] = ["queued", "retrying"];
export const isPending = (r: RecipientState) => PENDING.includes(r.state);

/** How one attempt to one recipient ended. */
export type Outcome =
  | {
      kind: "delivered";
      via: string;
      status: number;
      /** What followed the delivery (an A2A task's end). */
      decision?: string;
      /** An A2A recipient's interface and task. */
      a2a?: RecipientState["a2a"];
      /** The relay not marked trusted that took the message in the clear. */
      plaintextRelay?: string;
    }
  | {
      kind: "retry";
      via?: string;
      status?: number;
      error: string;
      /** The pause the recipient asked for (Retry-After on 408/425/429), instead of the schedule. */
      afterMs?: number;
      /** The schedule's pause, but never shorter than this (Retry-After on a 5xx). */
      notBeforeMs?: number;
      decision?: string;
      /** Relays that refused the message for good during this attempt. */
      refused?: string[];
      /** No attempt was made: every destination was held back by its resiliency until then (agent/outbound/breakers.ts). */
      deferredUntil?: number;
    }
  | {
      kind: "failed";
      via?: string;
      status?: number;
      error: string;
      refused?: string[];
      a2a?: RecipientState["a2a"];
    };

/** When retrying a recipient stops, and why then: the retry window's end or the message's ttl. */
export interface Deadline {
  at: number;
  reason: string;
  /** Once passed, no attempt at all, not even the first: the message's ttl_seconds ran out. */
  expires?: boolean;
}

/** A recipient whose message expired before its next attempt: given up without a request. */
export function expiredRecipientState(r: RecipientState, deadline: Deadline): RecipientState {
  return {
    ...r,
    state: "undeliverable",
    last_error: r.last_error ? `${r.last_error}; ${deadline.reason}` : deadline.reason,
    next_attempt_at: undefined,
    decision: deadline.reason,
  };
}

/**
 * A recipient none of whose destinations could be tried (their resiliency held them back,
 * agent/outbound/breakers.ts): no attempt is counted and its last error stays that of its last attempt;
 * it waits until `deferredUntil` (never past the deadline), and at the deadline it is given up
 * as it would have been after an attempt.
 */
export function heldBackRecipientState(
  r: RecipientState,
  outcome: Extract<Outcome, { kind: "retry" }> & { deferredUntil: number },
  now: number,
  deadline: Deadline,
): RecipientState {
  const refused = [...(r.refused_relays ?? []), ...(outcome.refused ?? [])];
  const kept = { ...r, ...(refused.length ? { refused_relays: [...new Set(refused)] } : {}) };
  if (now >= deadline.at)
    return expiredRecipientState({ ...kept, last_error: r.last_error ?? outcome.error }, deadline);
  return {
    ...kept,
    decision: `held back, no attempt made: ${outcome.error}`,
    next_attempt_at: new Date(Math.min(outcome.deferredUntil, deadline.at)).toISOString(),
  };
}

/** The pause before attempt n+1 after n failed attempts, with ±10% jitter. */
export function backoffDelay(schedule: number[], attempts: number, random = Math.random): number {
  const base = schedule[Math.min(Math.max(attempts, 1), schedule.length) - 1]!;
  return Math.round(base * (0.9 + random() * 0.2));
}

/** Whether a pending recipient's next attempt is due (within a second) at `now`. */
export function isDue(r: RecipientState, now: number): boolean {
  return isPending(r) && (!r.next_attempt_at || Date.parse(r.next_attempt_at) <= now + 1000);
}

/**
 * The recipient's state after one more attempt ended in `outcome` at `now`: delivered;
 * failed (a final answer, never retried); undeliverable (still failing at the deadline); or
 * retrying at the recipient's Retry-After or the backoff schedule, the last attempt falling on
 * the deadline rather than after it. Pure: the delivery loop does the I/O around it.
 */
export function nextRecipientState(
  r: RecipientState,
  outcome: Outcome,
  now: number,
  deadline: Deadline,
  backoff: { schedule: number[]; random?: () => number },
): RecipientState {
  const refused = outcome.kind === "delivered" ? [] : (outcome.refused ?? []);
  const next: RecipientState = {
    ...r,
    attempts: r.attempts + 1,
    via: outcome.via ?? r.via,
    last_status: "status" in outcome ? outcome.status : undefined,
    ...(refused.length ? { refused_relays: [...new Set([...(r.refused_relays ?? []), ...refused])] } : {}),
  };
  if (outcome.kind === "delivered") {
    return {
      ...next,
      state: "delivered",
      delivered_at: new Date(now).toISOString(),
      last_error: undefined,
      next_attempt_at: undefined,
      ...(outcome.decision ? { decision: outcome.decision } : {}),
      ...(outcome.a2a ? { a2a: outcome.a2a } : {}),
      ...(outcome.plaintextRelay ? { plaintext_relay: outcome.plaintextRelay } : {}),
    };
  }
  if (outcome.kind === "failed") {
    return {
      ...next,
      state: "failed",
      last_error: outcome.error,
      next_attempt_at: undefined,
      decision: "not retried",
      ...(outcome.a2a ? { a2a: outcome.a2a } : {}),
    };
  }
  if (now >= deadline.at) {
    return {
      ...next,
      state: "undeliverable",
      last_error: `${outcome.error}; ${deadline.reason}`,
      next_attempt_at: undefined,
      decision: deadline.reason,
    };
  }
  const asked =
    outcome.afterMs ??
    Math.max(backoffDelay(backoff.schedule, next.attempts, backoff.random), outcome.notBeforeMs ?? 0);
  const wait = Math.max(0, Math.min(asked, deadline.at - now));
  return {
    ...next,
    state: "retrying",
    last_error: outcome.error,
    decision: outcome.decision ?? `retry in ${Math.round(wait / 1000)} s (attempt ${next.attempts} failed)`,
    next_attempt_at: new Date(now + wait).toISOString(),
  };
}

/** The state of the whole message from its recipients' states. */
export function overallState(recipients: RecipientState[]): RecipientStatus {
  if (recipients.every((r) => r.state === "delivered")) return "delivered";
  if (recipients.some(isPending)) return recipients.some((r) => r.attempts > 0) ? "retrying" : "queued";
  if (recipients.some((r) => r.state === "undeliverable")) return "undeliverable";
  return "failed";
}

const DEAD: RecipientStatus[] = ["failed", "undeliverable"];

/** How a redrive of one dead letter ended. */
export type Redrive =
  | { outcome: "redriven"; record: DeliveryRecord }
  | { outcome: "not_found" }
  /** Not a dead letter (still pending, redriven already, or delivered meanwhile), or its message is no longer kept. */
  | { outcome: "not_redrivable"; reason: string; record?: DeliveryRecord };

/**
 * The record of a dead letter sent again: its failed and undeliverable recipients queued with
 * no attempts (what they were refused or told is forgotten), delivered ones kept as they are.
 */
export function redrivenRecord(record: DeliveryRecord, now: number): DeliveryRecord {
  const at = new Date(now).toISOString();
  return {
    ...record,
    state: "queued",
    updated_at: at,
    recipients: record.recipients.map((r) =>
      DEAD.includes(r.state) ? { agent: r.agent, state: "queued", attempts: 0 } : r,
    ),
    redrive: { at, id: randomUUID(), count: (record.redrive?.count ?? 0) + 1 },
  };
}

/**
 * Delivery records of outbound messages in a NATS KV bucket (`msg.<id>`), plus the dead-letter
 * index (`dead.<id>`) of those that ended failed or undeliverable, and the signed message of
 * each dead letter (`body.<id>`) for a redrive. Shared by replicas, kept across restarts,
 * expiring after a week.
 */
export class DeliveryStates {
  private kv: KV | undefined;
  private readonly nats: Nats;
  private readonly bucket: string;

  constructor(nats: Nats, bucket: string) {
    this.nats = nats;
    this.bucket = bucket;
  }

  async ensure(): Promise<void> {
    this.kv = await this.nats.bucket(this.bucket, { history: 1, ttl: 7 * 24 * 3600_000 }, DEAD_LETTER_INDEX);
  }

  private store(): KV {
    if (!this.kv) throw new Error("delivery state store is not ready");
    return this.kv;
  }

  async get(messageId: string): Promise<DeliveryRecord | undefined> {
    const e = await this.store().get(`msg.${encodeToken(messageId)}`);
    return e?.value.length ? (e.json() as DeliveryRecord) : undefined;
  }

  /**
   * The first record of a message, written only when there is none: the sender may already have
   * taken the message from the outbox and written its outcome, which a "queued" must not undo.
   */
  async begin(record: DeliveryRecord): Promise<void> {
    try {
      await this.store().create(`msg.${encodeToken(record.message_id)}`, JSON.stringify(record));
    } catch (err) {
      if (await this.get(record.message_id)) return;
      throw err;
    }
  }

  /**
   * Write a record; one that ended failed or undeliverable is a dead letter too, and `message`
   * (the signed message as queued) is kept with it, before it, for a redrive.
   */
  async put(record: DeliveryRecord, message?: string): Promise<void> {
    record.state = overallState(record.recipients);
    const key = encodeToken(record.message_id);
    await this.store().put(`msg.${key}`, JSON.stringify(record));
    if (DEAD.includes(record.state)) {
      if (message !== undefined) await this.store().put(`body.${key}`, message);
      await this.store().put(`dead.${key}`, JSON.stringify(record));
    }
  }

  /**
   * Send a dead letter again: its record is reset (redrivenRecord) by compare-and-set, so of
   * redrives racing for one dead letter a single one resets it; the message goes back to the
   * outbox (`requeue`) under the redrive's own id, which the outbox's duplicate window holds
   * to one copy whoever puts it there; then the dead letter is removed, unless it was written
   * again meanwhile. A dead letter whose redrive was cut short before its removal is queued again
   * under that same id. One that was delivered meanwhile is removed and not sent.
   */
  async redrive(
    messageId: string,
    requeue: (message: string, dedupId: string) => Promise<void>,
    now = Date.now(),
  ): Promise<Redrive> {
    const kv = this.store();
    const key = encodeToken(messageId);
    for (let tries = 0; ; tries++) {
      const [dead, entry, body] = await Promise.all([
        kv.get(`dead.${key}`),
        kv.get(`msg.${key}`),
        kv.get(`body.${key}`),
      ]);
      const record = entry?.value.length ? (entry.json() as DeliveryRecord) : undefined;
      if (!dead?.value.length) {
        return record
          ? { outcome: "not_redrivable", reason: `message ${messageId} is not a dead letter (${record.state})`, record }
          : { outcome: "not_found" };
      }
      const current = record ?? (dead.json() as DeliveryRecord);
      const removeDead = () => kv.delete(`dead.${key}`, { previousSeq: dead.revision }).catch(() => undefined);
      if (current.state === "delivered") {
        await removeDead();
        return { outcome: "not_redrivable", reason: `message ${messageId} was delivered meanwhile`, record: current };
      }
      if (!body?.value.length) {
        return { outcome: "not_redrivable", reason: `the message ${messageId} is no longer kept`, record: current };
      }
      let redriven = current;
      if (DEAD.includes(current.state)) {
        redriven = redrivenRecord(current, now);
        try {
          if (entry) await kv.update(`msg.${key}`, JSON.stringify(redriven), entry.revision);
          else await kv.create(`msg.${key}`, JSON.stringify(redriven));
        } catch (err) {
          // Another redrive (or the sender) wrote the record first: decide again on what it wrote.
          if (tries < 5) continue;
          throw err;
        }
      } else if (!current.redrive) {
        return { outcome: "not_redrivable", reason: `message ${messageId} is ${current.state}`, record: current };
      }
      await requeue(body.string(), `${messageId}#redrive-${redriven.redrive!.id}`);
      await removeDead();
      return { outcome: "redriven", record: redriven };
    }
  }

  async deadLetters(limit = 100): Promise<DeliveryRecord[]> {
    const out: DeliveryRecord[] = [];
    const keys = await this.store().keys("dead.>");
    for await (const k of keys) {
      const e = await this.store().get(k);
      if (e?.value.length) out.push(e.json() as DeliveryRecord);
      if (out.length >= limit) break;
    }
    return out.sort((a, b) => a.updated_at.localeCompare(b.updated_at));
  }
}
