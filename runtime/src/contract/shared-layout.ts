// The isolated shared JetStream layout (docs/scale.md, "The isolated shared layout"): a tenant's Agents keep their
// messages and KV records in a few streams of one data account of the operator's, instead of six
// streams in each runtime's own account. Each runtime keeps an account of its own, with JetStream
// off, and reaches the data account only through service imports of subjects that carry its own
// account key at a fixed token: the data account exports each subject family once, with
// `account_token_position` on that token, and nats-server grants an import only when the
// importing account's key is there. So one export serves every runtime, and no import, however
// it is written, reaches another runtime's subjects.
//
// In the data account a subject or consumer belongs to the runtime whose account key is at its
// third token (`ifp.inbox.<key>.…`, `$KV.<bucket>.<key>.…`) or is its name (the consumer `<key>`
// on each stream). The runtime cannot create consumers or streams there, nor read a message by
// sequence, list subjects or ask for stream info (each would take a filter or a sequence from
// the request's body, which no permission can check): the operator makes each Agent's consumers.
// It hears its new inbox messages through one stream export, of the inbox's republish.
// The agent runtime runs on it with `--nats-layout isolated` (runtime/src/nats/layout.ts); the
// bench (runtime/bench/scale.ts) and the tests (operator/test/nats/nats-shared-layout*.test.ts) build
// the operator's side of it from here.
import { AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { ConsumerConfig, StreamConfig } from "@nats-io/jetstream";
import type { AgentSpec } from "../resources/agent.ts";
import { errorMessage } from "../util/errors.ts";
import type { AgentNames } from "./agent-names.ts";
import { agentNames } from "./agent-names.ts";
import { nanos } from "./nats.ts";
import { type NatsPermissions, operatorAccountPermissions } from "./nats-permissions.ts";

/** The streams of a tenant's data account. */
export const SHARED_STREAMS = { inbox: "IFP_INBOX", outbox: "IFP_OUTBOX" } as const;
/** The KV buckets of a tenant's data account, one of each kind for all its Agents. */
export const SHARED_BUCKETS = {
  outboxState: "ifp_outbox",
  peers: "ifp_peers",
  conversations: "ifp_conv",
  a2aTasks: "ifp_a2a",
  agents: "ifp_agents",
} as const;

/**
 * What of an Agent's spec the isolated layout does not serve: an Agent that sets one of these
 * (`uses`) does not run on it (the runtime refuses to start, naming `field` and `why`; the
 * operator refuses the Agent with Ready False `NotOnNatsLayout`). Empty today: everything an
 * Agent's spec asks for runs on the layout. The mechanism stays for what a later field may need.
 */
export const ISOLATED_LAYOUT_UNSUPPORTED: readonly UnsupportedFeature[] = [];

/** A field of the spec that a layout does not serve. */
export interface UnsupportedFeature {
  field: string;
  why: string;
  uses: (spec: AgentSpec) => boolean;
}

/** An account's public key: what the subjects of one runtime carry. */
const ACCOUNT_KEY = /^A[A-Z2-7]{55}$/;

/** An export of the data account or an import of a runtime account, as the account JWT carries it. */
export interface ServiceExport {
  name: string;
  subject: string;
  type: "service";
  account_token_position: number;
  response_type?: "Stream";
}
export interface ServiceImport {
  name: string;
  subject: string;
  account: string;
  type: "service";
  /** The subject in the importing account, when it is not `subject`. */
  local_subject?: string;
}
/** A stream export of the data account: the messages published on its subjects, heard in the importing account. */
export interface StreamExport {
  name: string;
  subject: string;
  type: "stream";
  account_token_position: number;
}
export interface StreamImport {
  name: string;
  subject: string;
  account: string;
  type: "stream";
}
export type DataAccountExport = ServiceExport | StreamExport;
export type RuntimeAccountImport = ServiceImport | StreamImport;

/**
 * Where the inbox stream publishes again each message it stored on an Agent's message subjects
 * (its republish), and where that Agent's account hears them through the stream import: outside
 * `ifp.`, which no runtime's service import reaches.
 */
export const WATCH_PREFIX = "ifp-watch";
/**
 * The buckets whose changes of an Agent's keys are published again where only its account hears
 * them (a stream's republish, as the inbox's): those whose keys the runtime follows (a watch).
 */
export const WATCHED_BUCKETS: readonly string[] = [SHARED_BUCKETS.a2aTasks];
/** The subject a runtime of this account subscribes to for the changes of its keys `key` of a watched bucket. */
export function sharedKeyWatchSubject(bucket: string, runtimeAccount: string, key = ">"): string {
  if (!ACCOUNT_KEY.test(runtimeAccount)) throw new Error("not an account public key (A…, 56 characters)");
  if (!WATCHED_BUCKETS.includes(bucket)) throw new Error(`bucket ${bucket} publishes no changes of its keys`);
  return `${WATCH_PREFIX}.kv.${bucket}.${runtimeAccount}.${key}`;
}
/** The subject a runtime of this account subscribes to for its new inbox messages. */
export function sharedInboxWatchSubject(runtimeAccount: string): string {
  if (!ACCOUNT_KEY.test(runtimeAccount)) throw new Error("not an account public key (A…, 56 characters)");
  return `${WATCH_PREFIX}.inbox.${runtimeAccount}.msg.>`;
}

/**
 * The exports of a data account: the subject families a runtime uses, each with `*` where the
 * importing account's key goes. Publishes into its inbox and outbox subjects (`ifp.inbox.<key>.…`,
 * `ifp.outbox.<key>.…`) and its KV keys (`$KV.<bucket>.<key>.…`), each answered by a PubAck; a
 * direct get of the last message on one of those subjects (the API subject names it, and
 * nats-server refuses a body asking for anything else on that endpoint); the next messages of
 * its own consumers, which answer with a stream of messages; their info; their acks. And one
 * stream export: the inbox's republish of the messages stored on its message subjects, which its
 * runtime hears with a core subscription (the inbox watch). A message that reaches the data
 * account through a service import is never passed on to a stream import (nats-server), so the
 * export is of what the stream itself publishes: only what it stored, with its sequence and time.
 * The same for the changes of its keys of each watched bucket (WATCHED_BUCKETS).
 */
export function dataAccountExports(): DataAccountExport[] {
  return [
    { name: "agent subjects", subject: "ifp.*.*.>", type: "service", account_token_position: 3 },
    { name: "agent KV keys", subject: "$KV.*.*.>", type: "service", account_token_position: 3 },
    {
      name: "agent KV reads",
      subject: "$JS.API.DIRECT.GET.*.$KV.*.*.>",
      type: "service",
      account_token_position: 8,
    },
    {
      name: "agent message reads",
      subject: "$JS.API.DIRECT.GET.*.ifp.*.*.>",
      type: "service",
      account_token_position: 8,
    },
    {
      name: "agent consumers' messages",
      subject: "$JS.API.CONSUMER.MSG.NEXT.*.*",
      type: "service",
      account_token_position: 7,
      response_type: "Stream",
    },
    { name: "agent consumers' info", subject: "$JS.API.CONSUMER.INFO.*.*", type: "service", account_token_position: 6 },
    { name: "agent consumers' acks", subject: "$JS.ACK.*.*.>", type: "service", account_token_position: 4 },
    {
      name: "agent inbox messages heard",
      subject: `${WATCH_PREFIX}.inbox.*.msg.>`,
      type: "stream",
      account_token_position: 3,
    },
    ...WATCHED_BUCKETS.map((b) => ({
      name: `agent ${b} keys heard`,
      subject: `${WATCH_PREFIX}.kv.${b}.*.>`,
      type: "stream" as const,
      account_token_position: 4,
    })),
  ];
}

/**
 * A runtime account's imports from its tenant's data account: each export, with its own key at
 * the token. And one more, which keeps the server's own JetStream API out of the account:
 * nats-server gives an account without JetStream an import of all of `$JS.API.>` (answering
 * "JetStream not enabled", and shadowing every narrower import of the API) unless an import
 * already covers `$JS.API.INFO`. That import is of a subject of the runtime's own in the data
 * account, on which nothing answers: the account's info asked there has no responder.
 */
export function runtimeAccountImports(
  dataAccount: string,
  runtimeAccount: string,
  exports: DataAccountExport[] = dataAccountExports(),
): RuntimeAccountImport[] {
  if (!ACCOUNT_KEY.test(dataAccount)) throw new Error("imports are between account public keys (A…, 56 characters)");
  return [
    ...ownSubjects(runtimeAccount, exports).map((i) => ({ ...i, account: dataAccount, type: "service" as const })),
    ...ownSubjects(runtimeAccount, exports, "stream").map((i) => ({
      ...i,
      account: dataAccount,
      type: "stream" as const,
    })),
    {
      name: "no JetStream API of the server's",
      subject: `ifp.api.${runtimeAccount}.info`,
      local_subject: JS_API_INFO,
      account: dataAccount,
      type: "service",
    },
  ];
}

/** The JetStream API subject whose import decides whether nats-server adds its own `$JS.API.>` to an account. */
export const JS_API_INFO = "$JS.API.INFO";

/** Each export's subject (of one type) with this runtime account's key at its token. */
function ownSubjects(
  runtimeAccount: string,
  exports: DataAccountExport[] = dataAccountExports(),
  type: DataAccountExport["type"] = "service",
): { name: string; subject: string }[] {
  if (!ACCOUNT_KEY.test(runtimeAccount)) throw new Error("not an account public key (A…, 56 characters)");
  return exports
    .filter((e) => (e.type ?? "service") === type)
    .map((e) => {
      const tokens = e.subject.split(".");
      if (e.account_token_position) tokens[e.account_token_position - 1] = runtimeAccount;
      return { name: e.name, subject: tokens.join(".") };
    });
}

/**
 * The JetStream names of one Agent in the shared layout: its subjects under its runtime
 * account's key, the tenant's shared streams and buckets, its consumers named by that key.
 */
export function sharedAgentNames(runtimeAccount: string): AgentNames {
  if (!ACCOUNT_KEY.test(runtimeAccount)) throw new Error("an Agent's shared names are made from its account key");
  const n = agentNames(runtimeAccount);
  return {
    ...n,
    inboxStream: SHARED_STREAMS.inbox,
    inboxSubjects: `ifp.inbox.${runtimeAccount}.>`,
    handlerConsumer: runtimeAccount,
    appConsumer: runtimeAccount,
    outboxStream: SHARED_STREAMS.outbox,
    outboxSubjects: `ifp.outbox.${runtimeAccount}.>`,
    senderConsumer: runtimeAccount,
    outboxStateBucket: SHARED_BUCKETS.outboxState,
    peersBucket: SHARED_BUCKETS.peers,
    conversationsBucket: SHARED_BUCKETS.conversations,
    a2aTasksBucket: SHARED_BUCKETS.a2aTasks,
    kvBucket: SHARED_BUCKETS.agents,
    kvKey: runtimeAccount,
  };
}

const DAY_MS = 24 * 3600_000;

/**
 * JetStream's refusal of a second message on a subject that holds one (`discard_new_per_subject`,
 * the inbox's and outbox's one message per subject of sharedStreamConfigs): a copy already kept.
 */
export function isSubjectTaken(err: unknown): boolean {
  return /maximum messages per subject exceeded/i.test(errorMessage(err));
}

/**
 * The streams of a tenant's data account, as the operator applies them. None may roll up
 * (`Nats-Rollup: all` on a runtime's own subject would purge every Agent's messages), none runs
 * message schedules or counters (a scheduled message names its target subject in a header); the
 * inbox republishes what it stores on the Agents' message subjects, each under its own key. Each
 * message of an inbox or outbox has a subject of its own that takes one message: a repeated
 * publish is refused for as long as the first is kept, which is the duplicate check scoped to
 * the Agent's own subjects (a `Nats-Msg-Id` is stream-wide, so one Agent could pre-empt
 * another's). No stream reserves storage (`max_bytes` unset): the data account's JetStream
 * limit bounds the tenant.
 */
export function sharedStreamConfigs(
  opts: { inboxMaxAgeMs?: number; outboxMaxAgeMs?: number; conversationIdleMs?: number } = {},
): (Partial<StreamConfig> & { name: string })[] {
  const closed = {
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.New,
    allow_rollup_hdrs: false,
    deny_delete: true,
    deny_purge: true,
    allow_direct: true,
    duplicate_window: nanos(60_000),
  };
  const oneMessageEach = { ...closed, max_msgs_per_subject: 1, discard_new_per_subject: true };
  const bucket = (name: string, maxAgeMs = 0) => ({
    ...closed,
    name: `KV_${name}`,
    subjects: [`$KV.${name}.>`],
    max_msgs_per_subject: 1,
    max_age: nanos(maxAgeMs),
  });
  return [
    {
      ...oneMessageEach,
      name: SHARED_STREAMS.inbox,
      subjects: ["ifp.inbox.*.>"],
      max_age: nanos(opts.inboxMaxAgeMs ?? 7 * DAY_MS),
      // Each message stored on an Agent's message subjects, published again (with its sequence
      // and time) where only that Agent's account hears it: the inbox watch, without a consumer.
      republish: { src: "ifp.inbox.*.msg.>", dest: `${WATCH_PREFIX}.inbox.{{wildcard(1)}}.msg.>` },
    },
    {
      ...oneMessageEach,
      name: SHARED_STREAMS.outbox,
      subjects: ["ifp.outbox.*.>"],
      max_age: nanos(opts.outboxMaxAgeMs ?? 7 * DAY_MS),
    },
    bucket(SHARED_BUCKETS.outboxState, 7 * DAY_MS),
    bucket(SHARED_BUCKETS.peers),
    bucket(SHARED_BUCKETS.conversations, opts.conversationIdleMs ?? 30 * DAY_MS),
    bucket(SHARED_BUCKETS.agents),
    // A2A tasks: five revisions of each key, as the per-agent bucket keeps (the push notifications'
    // replay reads those it heard), each change published again under the Agent's own key (a watch,
    // without a consumer).
    {
      ...bucket(SHARED_BUCKETS.a2aTasks),
      max_msgs_per_subject: 5,
      republish: {
        src: `$KV.${SHARED_BUCKETS.a2aTasks}.*.>`,
        dest: `${WATCH_PREFIX}.kv.${SHARED_BUCKETS.a2aTasks}.{{wildcard(1)}}.>`,
      },
    },
  ];
}

/**
 * One Agent's consumers, which the operator makes in the data account: the handler's on the
 * inbox and the sender's on the outbox, with the fields the runtime gives its own today, one
 * replica each (an R1 consumer is no Raft group: on three servers nats-server runs none for it).
 */
export function sharedAgentConsumers(
  runtimeAccount: string,
  opts: { handlerTimeoutMs: number; senderAckWaitMs: number },
): { stream: string; config: Partial<ConsumerConfig> & { durable_name: string } }[] {
  const n = sharedAgentNames(runtimeAccount);
  const common = {
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    max_deliver: -1,
    num_replicas: 1,
  };
  return [
    {
      stream: n.inboxStream,
      config: {
        ...common,
        durable_name: n.handlerConsumer,
        filter_subject: `ifp.inbox.${runtimeAccount}.msg.>`,
        ack_wait: nanos(opts.handlerTimeoutMs + 30_000),
        max_ack_pending: 1000,
      },
    },
    {
      stream: n.outboxStream,
      config: {
        ...common,
        durable_name: n.senderConsumer,
        filter_subject: `ifp.outbox.${runtimeAccount}.msg.>`,
        ack_wait: nanos(opts.senderAckWaitMs),
        max_ack_pending: 10_000,
      },
    },
  ];
}

/** The subject of one inbound message of the Agent in the shared layout: one per (message_id, sender), kept once. */
export function sharedInboxSubject(names: AgentNames, messageId: string, senderToken: string): string {
  return `${names.inbox(messageId)}.${senderToken}`;
}

/**
 * A runtime user's allow-lists in the shared layout: publishing on its service imports (nothing
 * else in its account leads anywhere), replies under its agent id's inbox prefix and its inbox
 * messages where its stream import delivers them. The account's imports are the boundary; these
 * keep the runtime off its own account's other subjects as today.
 */
export function sharedAgentPermissions(agentInbox: string, runtimeAccount: string): NatsPermissions {
  return {
    pub: ownSubjects(runtimeAccount).map((i) => i.subject),
    sub: [
      `${agentInbox}.>`,
      sharedInboxWatchSubject(runtimeAccount),
      ...WATCHED_BUCKETS.map((b) => sharedKeyWatchSubject(b, runtimeAccount)),
    ],
  };
}

/**
 * The operator's user in a data account: as in a runtime's account, and the consumers of each
 * Agent, which only the operator makes, updates and deletes there.
 */
export function sharedOperatorPermissions(): NatsPermissions {
  const p = operatorAccountPermissions();
  return {
    pub: [
      ...p.pub,
      "$JS.API.CONSUMER.CREATE.>",
      "$JS.API.CONSUMER.DURABLE.CREATE.>",
      "$JS.API.CONSUMER.DELETE.*.*",
      "$JS.API.CONSUMER.INFO.*.*",
    ],
    sub: p.sub,
  };
}

/** The subjects of one Agent's KV keys in the tenant's buckets: what the operator clears when the Agent goes. */
export function sharedAgentKeySubjects(runtimeAccount: string): { stream: string; subjects: string }[] {
  if (!ACCOUNT_KEY.test(runtimeAccount)) throw new Error("an Agent's keys are under its account key");
  return Object.values(SHARED_BUCKETS).map((b) => ({ stream: `KV_${b}`, subjects: `$KV.${b}.${runtimeAccount}.>` }));
}
