import { Kvm, type KV } from "@nats-io/kv";
import type { Nats } from "../nats/connection.ts";
import { encodeToken } from "../nats/subjects.ts";

export type RecipientStatus = "queued" | "retrying" | "delivered" | "failed" | "undeliverable";

export interface RecipientState {
  agent: string;
  state: RecipientStatus;
  attempts: number;
  /** The inbox URL, or "relay:<relay url>", of the last attempt. */
  via?: string;
  last_status?: number;
  last_error?: string;
  /** Why the next step was chosen, e.g. "429: retry after Retry-After 30 s". */
  decision?: string;
  next_attempt_at?: string;
  delivered_at?: string;
}

export interface DeliveryRecord {
  message_id: string;
  state: RecipientStatus;
  queued_at: string;
  updated_at: string;
  recipients: RecipientState[];
}

const PENDING: RecipientStatus[] = ["queued", "retrying"];
export const isPending = (r: RecipientState) => PENDING.includes(r.state);

/** The state of the whole message from its recipients' states. */
export function overallState(recipients: RecipientState[]): RecipientStatus {
  if (recipients.every((r) => r.state === "delivered")) return "delivered";
  if (recipients.some(isPending)) return recipients.some((r) => r.attempts > 0) ? "retrying" : "queued";
  if (recipients.some((r) => r.state === "undeliverable")) return "undeliverable";
  return "failed";
}

/**
 * Delivery records of outbound messages in a NATS KV bucket (`msg.<id>`), plus the dead-letter
 * index (`dead.<id>`) of those that ended failed or undeliverable. Shared by replicas, kept
 * across restarts, expiring after a week.
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
    this.kv = await new Kvm(this.nats.js).create(this.bucket, { history: 1, ttl: 7 * 24 * 3600_000 });
  }

  private store(): KV {
    if (!this.kv) throw new Error("delivery state store is not ready");
    return this.kv;
  }

  async get(messageId: string): Promise<DeliveryRecord | undefined> {
    const e = await this.store().get(`msg.${encodeToken(messageId)}`);
    return e && e.value.length ? (e.json() as DeliveryRecord) : undefined;
  }

  async put(record: DeliveryRecord): Promise<void> {
    record.state = overallState(record.recipients);
    await this.store().put(`msg.${encodeToken(record.message_id)}`, JSON.stringify(record));
    if (record.state === "failed" || record.state === "undeliverable") {
      await this.store().put(`dead.${encodeToken(record.message_id)}`, JSON.stringify(record));
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
