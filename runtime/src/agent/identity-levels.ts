import { Kvm, type KV } from "@nats-io/kv";
import type { Nats } from "../nats/connection.ts";
import { encodeToken } from "../contract/nats.ts";
import { insufficientAuthLevel, unavailable } from "../protocol/errors.ts";

/** A conversation is over once it has been quiet this long; its level is forgotten then. */
export const CONVERSATION_IDLE_MS = 7 * 24 * 3600_000;
/** An entry is written again after this long even at the same level, to keep it alive. */
const RENEW_MS = 24 * 3600_000;

interface Entry {
  level: number;
  at: number;
}

/**
 * No downgrade within a conversation (IFP-5 section 2): the highest authentication level seen per
 * (sender, conversation_id), in a NATS KV bucket shared by the replicas, whose entries expire once
 * the conversation has been quiet for CONVERSATION_IDLE_MS. A message below the recorded level is
 * refused with 401 insufficient_auth_level. Updates are compare-and-set, so two replicas taking
 * messages of one conversation at once never lower the record.
 */
export class ConversationLevels {
  private kv: KV | undefined;
  private readonly nats: Pick<Nats, "js" | "isConnected">;
  readonly bucket: string;
  private readonly now: () => number;

  constructor(nats: Pick<Nats, "js" | "isConnected">, agentId: string, now: () => number = Date.now) {
    this.nats = nats;
    this.bucket = `ifp_auth_${encodeToken(agentId)}`;
    this.now = now;
  }

  async ensure(): Promise<void> {
    this.kv = await new Kvm(this.nats.js).create(this.bucket, { history: 1, ttl: CONVERSATION_IDLE_MS });
  }

  static key(sender: string, conversationId: string): string {
    return `${encodeToken(sender)}.${encodeToken(conversationId)}`;
  }

  /** Refuse a level below the conversation's record; raise the record otherwise. */
  async check(sender: string, conversationId: string, level: number): Promise<void> {
    const kv = this.kv;
    if (!kv || !this.nats.isConnected) throw unavailable("the conversation records (NATS KV) are not reachable");
    const key = ConversationLevels.key(sender, conversationId);
    for (let attempt = 0; attempt < 3; attempt++) {
      let current;
      try {
        current = await kv.get(key);
      } catch (err) {
        throw unavailable(`the conversation records cannot be read: ${(err as Error).message}`);
      }
      const entry = current?.value.length ? (current.json() as Entry) : undefined;
      if (entry && level < entry.level) {
        throw insufficientAuthLevel(
          `conversation ${conversationId} has been authenticated at level ${entry.level}; a message at level ${level} is refused ` +
            "(IFP-5 section 2: no downgrade within a conversation). Sign as before, or start a new conversation.",
        );
      }
      if (entry && level === entry.level && this.now() - entry.at < RENEW_MS) return;
      const value = JSON.stringify({ level: Math.max(level, entry?.level ?? level), at: this.now() } satisfies Entry);
      try {
        if (current && current.operation === "PUT") await kv.update(key, value, current.revision);
        else await kv.create(key, value);
        return;
      } catch {
        // Another replica wrote in between: read again and decide on its record.
      }
    }
    throw unavailable("the conversation record is changing too fast; try again");
  }
}
