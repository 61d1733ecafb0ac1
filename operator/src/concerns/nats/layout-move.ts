// Moving an Agent from the per-agent NATS layout to the isolated one (docs/scale.md, "Moving an
// install to the isolated layout"). An install switched to `--nats-layout isolated` finds each
// Agent's data where the per-agent layout left it: six streams in the runtime's own account. The
// operator moves it while no runtime of the Agent runs (the move part holds the workload at zero
// replicas and waits until the account has no client), so nothing is taken in or handed on
// meanwhile: every message answered 202 before is in the old streams, every one sent during the
// move finds no runtime and is retried by its sender, and every one after is stored in the new
// place by the runtime rendered for it.
//
// What moves, into the namespace's data account (data-accounts.ts), under the Agent's
// account key: every inbox message (a repeat stays a repeat, a reply still finds its original),
// the Agent's consumer there made to have handed on exactly those the old consumer had; the
// inbox's dead letters; every outbox entry not yet delivered, its delivery record (attempts,
// next attempt, recipients done) with it; and every KV record (delivery records and outbound
// dead letters, peers, conversations, A2A tasks, the Agent's keys of `ifp_agents`), with the index keys the
// isolated layout lists them by. Each copy is on a subject that takes one message, so a move
// cut short and run again copies nothing twice. Then the per-agent streams are deleted, and the
// account is pushed with the isolated layout's JWT (JetStream off), which is what marks it moved.
// Relays keep their own accounts on both layouts: their mailboxes stay where they are.
import {
  jetstream,
  type ConsumerInfo,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import { agentNames } from "../../../../runtime/src/contract/agent-names.ts";
import { encodeToken, isNotFound, nanos } from "../../../../runtime/src/contract/nats.ts";
import { OPERATOR_INBOX_PREFIX, type NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import {
  isSubjectTaken,
  JS_API_INFO,
  SHARED_BUCKETS,
  SHARED_STREAMS,
  sharedAgentNames,
} from "../../../../runtime/src/contract/shared-layout.ts";
import {
  DEAD_LETTER_INDEX,
  type KeyIndex,
  MAX_INDEXED_KEYS,
  PEERS_OF_CONVERSATION,
  TASK_INDEX,
} from "../../../../runtime/src/contract/key-indexes.ts";
import { deleteAgentJetStream } from "../../reconcile/finalizers.ts";
import type { NatsAccounts } from "./accounts.ts";
import { decodeVerified } from "./key-pair.ts";

/** The layout an account JWT is of: the isolated layout's imports `$JS.API.INFO` from the data account. */
export function layoutOfAccountJwt(jwt: string): "per-agent" | "isolated" {
  const claims = decodeVerified<{ imports?: { local_subject?: string; subject?: string }[] }>(jwt);
  const imports = claims.nats?.imports ?? [];
  return imports.some((i) => (i.local_subject ?? i.subject) === JS_API_INFO) ? "isolated" : "per-agent";
}

/** The operator's user for a move, in the runtime's account and in the data account: their JetStream, the subjects it copies to. */
const MOVER: NatsPermissions = {
  pub: ["$JS.API.>", "$JS.ACK.>", "$KV.>", "ifp.>"],
  sub: [`${OPERATOR_INBOX_PREFIX}.>`],
};

/** How long reading which inbox messages the old consumer had not handed on may take. */
const READ_PENDING_MS = 60_000;

export interface MoveOutcome {
  /** Inbox messages copied that the Agent had handed on (kept for repeats and replies), and those it had not. */
  handedOn: number;
  waiting: number;
  inboxDead: number;
  outbox: number;
  keys: number;
  /** What was deleted of the per-agent layout. */
  deleted: string[];
}

/** The per-agent streams an Agent (by its agentStoreKey) has in its runtime's account. */
export async function perAgentStreams(accounts: NatsAccounts, account: string, storeKey: string): Promise<string[]> {
  const n = agentNames(storeKey);
  const wanted = new Set([
    n.inboxStream,
    n.outboxStream,
    ...[n.outboxStateBucket, n.peersBucket, n.conversationsBucket, n.a2aTasksBucket].map((b) => `KV_${b}`),
  ]);
  return accounts.asUser(account, MOVER, async (_nc, jsm) => {
    const found: string[] = [];
    for await (const s of jsm.streams.names()) if (wanted.has(s)) found.push(s);
    return found;
  });
}

/**
 * Move one Agent's data from its runtime's account (per-agent layout) into its tenant's data
 * account (`dataAccount`, where its consumers are made already), then delete the per-agent
 * streams. Run only while no runtime of the Agent is connected. `appConsumer`: the name of the
 * consumer the per-agent runtime handed its inbox on with (`handler`, or `application` without
 * spec.handler).
 */
export async function moveToIsolated(
  accounts: NatsAccounts,
  opts: { account: string; dataAccount: string; storeKey: string; appConsumer: string },
): Promise<MoveOutcome> {
  const old = agentNames(opts.storeKey);
  const now = { ...sharedAgentNames(opts.account), kvKey: old.kvKey };
  return accounts.asUser(opts.account, MOVER, (rc, rjsm) =>
    accounts.asUser(opts.dataAccount, MOVER, async (dc, djsm) => {
      const djs = jetstream(dc, { timeout: 10_000 });
      const out: MoveOutcome = { handedOn: 0, waiting: 0, inboxDead: 0, outbox: 0, keys: 0, deleted: [] };
      const copy = async (subject: string, data: Uint8Array, h?: MsgHdrs) => {
        try {
          await djs.publish(subject, data, { headers: ifpHeaders(h) });
        } catch (err) {
          if (!isSubjectTaken(err)) throw err;
        }
      };

      // The inbox: which messages the old consumer had not handed on, then every message copied,
      // those handed on first and taken off the new consumer, then the others.
      if (await exists(rjsm, old.inboxStream)) {
        const waiting = await notHandedOn(rc, rjsm, old.inboxStream, old.inboxMessages, opts.appConsumer);
        const msgPrefix = `ifp.inbox.${encodeToken(opts.storeKey)}.msg.`;
        const handed = new Set<string>();
        const pass = async (handedOn: boolean) => {
          for await (const m of storedMessages(rjsm, old.inboxStream, old.inboxSubjects)) {
            if (m.subject === old.dead) {
              if (handedOn) continue;
              await copy(
                `${now.dead}.${encodeToken(`per-agent ${m.header?.get("Nats-Msg-Id") || m.seq}`)}`,
                m.data,
                m.header,
              );
              out.inboxDead++;
              continue;
            }
            if (!m.subject.startsWith(msgPrefix)) continue;
            if (waiting.has(m.seq) === handedOn) continue;
            const idToken = m.subject.slice(msgPrefix.length);
            const copyId = m.header?.get("Nats-Msg-Id") || String(m.seq);
            const subject = `${now.inboxSubjects.slice(0, -1)}msg.${idToken}.${encodeToken(copyId)}`;
            await copy(subject, m.data, m.header);
            // The first copy stored of a message_id, as the isolated layout records it for a short-form reply.
            await copy(`${now.inboxSubjects.slice(0, -1)}first.${idToken}`, new TextEncoder().encode(copyId));
            if (handedOn) handed.add(subject);
            handedOn ? out.handedOn++ : out.waiting++;
          }
        };
        await pass(true);
        await takeOff(djs, djsm, opts.account, handed);
        await pass(false);
      }

      // The outbox: a work queue, so every message it holds is not yet delivered.
      if (await exists(rjsm, old.outboxStream)) {
        for await (const m of storedMessages(rjsm, old.outboxStream, old.outboxSubjects)) {
          const id = m.header?.get("Nats-Msg-Id") || m.header?.get("Ifp-Message-Id") || String(m.seq);
          await copy(`${now.outbox}.${encodeToken(id)}`, m.data, m.header);
          out.outbox++;
        }
      }

      // KV records, each under the Agent's account key, with the index keys that list them there.
      const rjs = jetstream(rc, { timeout: 10_000 });
      const buckets: [string, string, KeyIndex | undefined, string?][] = [
        [old.outboxStateBucket, SHARED_BUCKETS.outboxState, DEAD_LETTER_INDEX],
        [old.peersBucket, SHARED_BUCKETS.peers, undefined],
        [old.conversationsBucket, SHARED_BUCKETS.conversations, PEERS_OF_CONVERSATION],
        [old.a2aTasksBucket, SHARED_BUCKETS.a2aTasks, TASK_INDEX],
        [old.kvBucket, SHARED_BUCKETS.agents, undefined, `${old.kvKey}.>`],
      ];
      for (const [from, to, index, filter] of buckets) {
        if (!(await exists(rjsm, `KV_${from}`))) continue;
        out.keys += await copyKeys(rjs, djs, from, `$KV.${to}.${opts.account}.`, index, filter);
      }

      out.deleted = await deleteAgentJetStream(rjsm, opts.storeKey);
      // The account is the Agent's own: its `ifp_agents` holds none but its keys, copied above.
      try {
        await rjsm.streams.delete(`KV_${old.kvBucket}`);
        out.deleted.push(`KV_${old.kvBucket}`);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return out;
    }),
  );
}

/** Our own headers of a stored message, without JetStream's (a copied Nats-Msg-Id would be stream-wide in the shared stream). */
function ifpHeaders(h: MsgHdrs | undefined): MsgHdrs | undefined {
  if (!h) return undefined;
  const out = headers();
  let any = false;
  for (const [k, values] of h) {
    if (/^nats-/i.test(k)) continue;
    for (const v of values) out.append(k, v);
    any = true;
  }
  return any ? out : undefined;
}

async function exists(jsm: JetStreamManager, stream: string): Promise<boolean> {
  return jsm.streams.info(stream).then(
    () => true,
    (err: unknown) => {
      if (isNotFound(err)) return false;
      throw err;
    },
  );
}

/** Every message of `stream` on `subjects`, oldest first. */
async function* storedMessages(jsm: JetStreamManager, stream: string, subjects: string) {
  let seq = 1;
  for (;;) {
    const m = await jsm.streams.getMessage(stream, { seq, next_by_subj: subjects } as unknown as { seq: number });
    if (!m) return;
    yield m;
    seq = m.seq + 1;
  }
}

/**
 * The stream sequences of the inbox messages `consumer` has not handed on: those it still has
 * to deliver and those delivered and never acknowledged. Read by pulling them all (each put back
 * for later at once), its ack wait shortened meanwhile so that those the stopped runtime held
 * come back, and its settings restored after. Without the consumer, none was handed on.
 */
async function notHandedOn(
  nc: NatsConnection,
  jsm: JetStreamManager,
  stream: string,
  messages: string,
  consumer: string,
): Promise<Set<number>> {
  const waiting = new Set<number>();
  const before = await jsm.consumers.info(stream, consumer).catch((err: unknown) => {
    if (isNotFound(err)) return undefined;
    throw err;
  });
  if (!before) {
    for await (const m of storedMessages(jsm, stream, messages)) waiting.add(m.seq);
    return waiting;
  }
  // Room for every message it has to deliver and holds unacknowledged, each held here until the end.
  const room = before.num_pending + before.num_ack_pending + 1_000;
  return withRoom(jsm, stream, before, { room, ackWait: nanos(1_000) }, async () => {
    const c = await jetstream(nc).consumers.get(stream, consumer);
    const until = Date.now() + READ_PENDING_MS;
    for (;;) {
      const info = await jsm.consumers.info(stream, consumer);
      if (info.num_pending === 0 && info.num_ack_pending === waiting.size) return waiting;
      if (Date.now() > until)
        throw new Error(
          `the inbox's messages not yet handed on could not all be read from its consumer ${consumer} (${info.num_pending} to deliver, ${info.num_ack_pending} unacknowledged, ${waiting.size} read)`,
        );
      for await (const m of await c.fetch({ max_messages: 256, expires: 1_500 })) {
        waiting.add(m.seq);
        m.nak(10 * 60_000);
      }
    }
  });
}

/**
 * Take the copies of messages handed on off the Agent's consumer in the data account: each is
 * delivered here and acknowledged. Any other message the consumer delivers meanwhile is one it
 * still has to hand on: a copy of a message not handed on (a move run again), or one a runtime of
 * the isolated layout took in before the install went back to a release without it and came
 * forward again (those come first, before every copy). Each is held unacknowledged until the end
 * and given back then, the consumer's room for unacknowledged messages raised meanwhile so that
 * holding them never stops the deliveries.
 */
async function takeOff(
  js: JetStreamClient,
  jsm: JetStreamManager,
  consumer: string,
  handed: Set<string>,
): Promise<void> {
  if (!handed.size) return;
  const before = await jsm.consumers.info(SHARED_STREAMS.inbox, consumer);
  const room = before.num_pending + before.num_ack_pending + handed.size + 1_000;
  await withRoom(jsm, SHARED_STREAMS.inbox, before, { room }, async () => {
    const c = await js.consumers.get(SHARED_STREAMS.inbox, consumer);
    const left = new Set(handed);
    const held: JsMsg[] = [];
    try {
      while (left.size) {
        const m = await c.next({ expires: 2_000 });
        if (!m) return;
        if (left.delete(m.subject)) await m.ackAck();
        else held.push(m);
      }
    } finally {
      for (const m of held) m.nak();
    }
  });
}

/**
 * `fn` while the consumer has room for `room` unacknowledged messages (its limit raised where it
 * is lower) and, where given, the ack wait `ackWait`; what was changed is restored after.
 */
async function withRoom<T>(
  jsm: JetStreamManager,
  stream: string,
  consumer: ConsumerInfo,
  want: { room: number; ackWait?: number },
  fn: () => Promise<T>,
): Promise<T> {
  const limit = consumer.config.max_ack_pending ?? -1;
  const raise = limit !== -1 && want.room > limit;
  const rewait = want.ackWait !== undefined;
  if (!raise && !rewait) return fn();
  await jsm.consumers.update(stream, consumer.name, {
    ...(raise ? { max_ack_pending: want.room } : {}),
    ...(rewait ? { ack_wait: want.ackWait } : {}),
  });
  try {
    return await fn();
  } finally {
    await jsm.consumers.update(stream, consumer.name, {
      ...(raise ? { max_ack_pending: limit } : {}),
      ...(rewait ? { ack_wait: consumer.config.ack_wait } : {}),
    });
  }
}

/** Every live key of bucket `from` (matching `filter`) written to `prefix<key>`, then the index keys `index` lists them by. */
async function copyKeys(
  from: JetStreamClient,
  to: JetStreamClient,
  bucket: string,
  prefix: string,
  index: KeyIndex | undefined,
  filter = ">",
): Promise<number> {
  const kv = await new Kvm(from).open(bucket);
  const listed = new Map<string, string[]>();
  let n = 0;
  for await (const key of await kv.keys(filter)) {
    const e = await kv.get(key);
    if (e?.operation !== "PUT") continue;
    await to.publish(`${prefix}${key}`, e.value);
    n++;
    // As the layout's own writes list it (AccountKeys.relist): last, in place of any it replaces.
    for (const name of index?.of(key) ?? []) {
      const keys = (listed.get(name) ?? []).filter((x) => !index?.replaces?.(name, key, x));
      listed.set(name, [...keys, key]);
    }
  }
  for (const [name, keys] of listed)
    await to.publish(`${prefix}_i.${name}`, JSON.stringify(keys.slice(-MAX_INDEXED_KEYS)));
  return n;
}
