// What each runtime may do on NATS: the subjects of its own streams, consumers and KV buckets,
// and nothing of any other agent's or relay's. The operator writes these permissions into the
// NATS user credential it issues per Agent and Relay; the runtime uses the inbox prefix below so
// that the replies it waits for arrive on subjects no other runtime may subscribe to. Each
// runtime has a NATS account of its own (operator/src/concerns/nats/credential-issuer.ts), which is what keeps
// runtimes apart: JetStream does not check these lists against what a stream or consumer
// configuration pulls in or pushes out (sources, mirrors, republish, deliver subjects). Within its
// own account the lists still keep a runtime to the names it uses and off the operator's inbox;
// in the one-account model (a NATS of one's own given only the shared account) they are all there is.
import { agentNames } from "./agent-names.ts";
import { encodeToken } from "./nats.ts";
import { relayNames } from "./relay-stream.ts";
import type { Relay } from "../resources/relay.ts";

/** Publish and subscribe allow-lists of one NATS user (everything else is denied). */
export interface NatsPermissions {
  pub: string[];
  sub: string[];
}

/** The KV bucket every agent keeps one key of (its capability-set hash); see agentNames().kvBucket. */
const SHARED_AGENT_BUCKET = "ifp_agents";

/** The inbox prefix of a runtime: request replies and consumer deliveries come in below it. */
export const agentInboxPrefix = (agentId: string): string => `_INBOX_A_${encodeToken(agentId)}`;
export const relayInboxPrefix = (relay: Pick<Relay, "metadata" | "spec">): string =>
  `_INBOX_R_${relayNames(relay).stream.slice("IFP_RELAY_".length)}`;
export const OPERATOR_INBOX_PREFIX = "_INBOX_OPERATOR";

/**
 * JetStream API subjects of one stream and its consumers, in as few patterns as is safe (a
 * credential travels in the CONNECT line, which nats-server limits to 4 KB by default). The
 * stream's name is always the fifth token: that is where every stream and consumer API puts it,
 * so a consumer named like this stream on another stream (`$JS.API.CONSUMER.CREATE.<other>.<this>`)
 * is not matched. `$JS.API.*.*.<stream>` covers stream info, create, update, purge and delete
 * (deleting its own stream gives a runtime nothing purging does not), direct get, and consumer
 * create, names and list; `.>` below it consumer info, delete and create with a name and filter,
 * and direct get by subject.
 */
function streamGrants(stream: string): string[] {
  return [
    `$JS.API.*.*.${stream}`,
    `$JS.API.*.*.${stream}.>`,
    `$JS.API.STREAM.MSG.*.${stream}`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.*`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
    `$JS.ACK.${stream}.>`,
    `$JS.FC.${stream}.>`,
  ];
}

/** A KV bucket of the runtime's own (the stream KV_<bucket> and its subjects $KV.<bucket>.>). */
function ownBucket(bucket: string): string[] {
  return [...streamGrants(`KV_${bucket}`), `$KV.${bucket}.>`];
}

function sorted(p: NatsPermissions): NatsPermissions {
  return { pub: [...new Set(p.pub)].sort(), sub: [...new Set(p.sub)].sort() };
}

/**
 * Everything an agent runtime (all replicas of one Agent) needs, and no more: the streams and
 * buckets named by its store key (agentStoreKey), replies under its agent id's inbox prefix; the
 * A2A task bucket only for an Agent with spec.a2a enabled (each bucket adds eight patterns to a
 * credential that must fit nats-server's default 4 KB CONNECT line).
 */
export function agentPermissions(
  agentId: string,
  key: string = agentId,
  opts: { a2a?: boolean } = {},
): NatsPermissions {
  const n = agentNames(key);
  const shared = `KV_${SHARED_AGENT_BUCKET}`;
  return sorted({
    pub: [
      "$JS.API.INFO",
      ...streamGrants(n.inboxStream),
      n.inboxSubjects,
      ...streamGrants(n.outboxStream),
      n.outboxSubjects,
      ...ownBucket(n.outboxStateBucket),
      ...ownBucket(n.peersBucket),
      ...ownBucket(n.conversationsBucket),
      ...(opts.a2a ? ownBucket(n.a2aTasksBucket) : []),
      // The shared bucket: its stream may be looked up (and created by the first agent), but
      // only this agent's own keys read and written.
      `$JS.API.STREAM.INFO.${shared}`,
      `$JS.API.STREAM.CREATE.${shared}`,
      `$JS.API.DIRECT.GET.${shared}.$KV.${SHARED_AGENT_BUCKET}.${n.kvKey}.>`,
      `$KV.${SHARED_AGENT_BUCKET}.${n.kvKey}.>`,
    ],
    sub: [`${agentInboxPrefix(agentId)}.>`],
  });
}

/**
 * Everything a relay runtime needs: its stream and its KV bucket. The runtime applies the
 * stream's config at start as the operator does, so it may create and update it.
 */
export function relayPermissions(relay: Pick<Relay, "metadata" | "spec">): NatsPermissions {
  const n = relayNames(relay);
  return sorted({
    pub: ["$JS.API.INFO", ...streamGrants(n.stream), n.subjects, ...ownBucket(n.kvBucket)],
    sub: [`${relayInboxPrefix(relay)}.>`],
  });
}

/**
 * The operator's own connection: it creates, updates, inspects and deletes relay streams, and
 * deletes a deleted Agent's streams and KV buckets (a bucket is the stream KV_<bucket>) and
 * purges its keys from the bucket all agents share. NATS matches permissions token by token, so
 * a stream-name prefix cannot be expressed: the grant covers managing any stream of the account,
 * but no message, consumer or data subject beyond what the status summary reads (the info of
 * consumers named `handler`, and the `last_error` KV keys).
 */
export function operatorPermissions(): NatsPermissions {
  return sorted({
    pub: [
      "$JS.API.INFO",
      ...["CREATE", "UPDATE", "INFO", "DELETE"].map((op) => `$JS.API.STREAM.${op}.*`),
      `$JS.API.STREAM.PURGE.KV_${SHARED_AGENT_BUCKET}`,
      // The status summary (operator/src/concerns/nats/traffic-summary.ts): each agent's handler backlog and
      // the last error agents and relays leave in KV — that key and nothing else of theirs.
      "$JS.API.CONSUMER.INFO.*.handler",
      `$JS.API.DIRECT.GET.KV_${SHARED_AGENT_BUCKET}.$KV.${SHARED_AGENT_BUCKET}.*.last_error`,
      "$JS.API.DIRECT.GET.*.$KV.*.last_error",
    ],
    sub: [`${OPERATOR_INBOX_PREFIX}.>`],
  });
}

/**
 * The operator's user in the account of one runtime: the same as in the shared account, and the
 * list of the account's stream names, so that a deleted runtime's account is emptied of every
 * stream, whatever it was named, before the account itself is deleted.
 */
export function operatorAccountPermissions(): NatsPermissions {
  const p = operatorPermissions();
  return sorted({ pub: [...p.pub, "$JS.API.STREAM.NAMES"], sub: p.sub });
}
