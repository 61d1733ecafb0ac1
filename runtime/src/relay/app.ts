// The relay's public HTTPS server (spec 4.2, IFP-8): probes and the /relay/ routes, every
// request signed by an agent it serves or, for a publish, by a sender spec.publishers lets in.
// main.ts builds it and listens.
import type { FastifyInstance } from "fastify";
import type { Verifier } from "../protocol/verify.ts";
import type { Relay } from "../resources/relay.ts";
import { createServer, type EndpointDeps } from "../server/http.ts";
import { TargetPolicy } from "../net/targets.ts";
import { StreamSlots } from "../server/stream-slots.ts";
import { registerProbes } from "../server/probes.ts";
import { relayAuthenticator, requireSignedRequests } from "./auth.ts";
import { publishIntake } from "./intake.ts";
import { Publishers } from "./publishers.ts";
import type { KeyLookup } from "../discovery/keys.ts";
import type { Mailboxes } from "./mailbox.ts";
import { deadLetterRoutes } from "./routes/dead-letters.ts";
import { eventRoutes } from "./routes/events.ts";
import { messageRoutes } from "./routes/messages.ts";
import { publishRoutes } from "./routes/publish.ts";
import { subscriptionRoutes } from "./routes/subscriptions.ts";
import type { Subscriptions } from "./subscriptions.ts";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The `operation` label of ifp_relay_operations_total, counted for every answer of the route. */
    operation?: string;
  }
}

export interface RelayAppDeps extends EndpointDeps {
  relay: Relay;
  verifier: Verifier;
  mailboxes: Mailboxes;
  subs: Subscriptions;
  /** Where webhooks may point (default: spec.network.allowPrivateTargets alone). */
  targets?: TargetPolicy;
  /** How keys of senders not in spec.agents are looked up (none: only did:key senders can be strangers). */
  keyLookup?: KeyLookup;
}

/** What a WebSocket frame may carry beyond its message: the envelope and `recipients`. */
const FRAME_ROOM = 64 * 1024;

/**
 * The body limit of POST /relay/publish/batch: one largest message, and never less than 1 MiB,
 * with room for the envelope. The body is read and parsed before its signature is checked (as
 * for a lone publish), so a batch may cost an unsigned sender no more than a lone publish does;
 * 100 messages of a few KiB fit, larger ones go in smaller batches.
 */
export function batchBodyLimit(maxMessageBytes: number): number {
  return Math.max(maxMessageBytes, 1024 * 1024) + FRAME_ROOM;
}

/**
 * The relay's HTTPS endpoints (spec 4.2, IFP-8): every /relay/ request is signed (RFC 9421) by
 * one of the agents it serves, and touches only that agent's mailbox; a publish may also be
 * signed by a sender spec.publishers lets in, whose key is looked up. Never listens.
 */
export function buildRelayApp(deps: RelayAppDeps): FastifyInstance {
  const { relay, mailboxes, subs, metrics } = deps;
  const spec = relay.spec;
  const now = deps.now ?? Date.now;
  const app = createServer({
    tls: deps.tls,
    logger: deps.logger,
    bodyLimit: spec.limits.maxMessageBytes,
    trustedProxies: deps.trustedProxies,
  });
  registerProbes(app, deps.ready);
  const publishers = new Publishers({
    spec,
    verifier: deps.verifier,
    lookup: deps.keyLookup,
    now,
    fill: () => mailboxes.fill(),
  });
  const authenticate = relayAuthenticator({
    publishers,
    publicUrl: spec.url,
    perAddressPerMinute: spec.limits.perAddressPerMinute,
    perAgentPerMinute: spec.limits.perAgentPerMinute,
    now,
  });

  const maxMessageBytes = spec.limits.maxMessageBytes;
  const intake = publishIntake({
    relayUrl: spec.url,
    verifier: deps.verifier,
    subs,
    mailboxes,
    now,
    maxMessageBytes,
    bytesPerHour: spec.limits.perAgentBytesPerHour,
    publishers,
  });

  app.register(async (api) => {
    requireSignedRequests(api, authenticate);
    api.addHook("onResponse", async (req, reply) => {
      const operation = req.routeOptions.config.operation;
      if (operation)
        metrics.relay.inc({ operation, result: reply.statusCode < 400 ? "ok" : (reply.outcome ?? "internal_error") });
    });
    await api.register(publishRoutes, {
      intake,
      limitAgent: authenticate.limitAgent,
      batchBodyLimit: batchBodyLimit(maxMessageBytes),
    });
    await api.register(messageRoutes, { mailboxes, limitAgent: authenticate.limitAgent });
    await api.register(subscriptionRoutes, {
      subs,
      targets: deps.targets ?? new TargetPolicy(spec.network.allowPrivateTargets),
    });
    await api.register(deadLetterRoutes, { mailboxes });
    await api.register(eventRoutes, {
      mailboxes,
      metrics,
      log: deps.logger,
      authenticate,
      slots: new StreamSlots(spec.limits.maxStreamsPerAgent, spec.limits.maxStreams),
      intake,
      maxPayload: maxMessageBytes + FRAME_ROOM,
    });
  });
  return app;
}
