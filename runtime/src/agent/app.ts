// The agent's public HTTPS server (spec 4.1): probes, the published documents and the inbox,
// built from their dependencies. main.ts builds it and listens.
import type { FastifyInstance } from "fastify";
import type { MessageVerifier } from "../protocol/verify.ts";
import type { Agent } from "../resources/agent.ts";
import { createServer, type EndpointDeps } from "../server/http.ts";
import { registerProbes } from "../server/probes.ts";
import type { AcceptStore, ConversationIntake, OnAccepted } from "./inbound/accept.ts";
import type { Documents } from "./documents.ts";
import { documentRoutes } from "./routes/documents.ts";
import { type InboxLimits, inboxRoutes } from "./inbound/routes/inbox.ts";
import type { AgentEncryption } from "./encryption.ts";

export interface AgentAppDeps extends EndpointDeps {
  agent: Agent;
  documents: Documents;
  verifier: MessageVerifier;
  store: AcceptStore;
  /** No downgrade within a conversation (IFP-5 section 2). */
  conversations?: ConversationIntake;
  /**
   * Side effects of the inspection (error-phase replies, learned capabilities), run after the
   * message is stored — also for a repeat, so a retried POST completes what a crash cut short.
   * They are idempotent; a failure answers 503 so that the sender retries.
   */
  onAccepted?: OnAccepted;
  /** Decryption of end-to-end encrypted bodies (docs/encryption.md). */
  encryption?: AgentEncryption;
  /** Clock skew tolerated on headers.date in the future. */
  maxFutureSkewMs?: number;
  /** The inbox's limits shared by the pod's event loops (spec.runtime.workers); else the server's own. */
  limits?: InboxLimits;
}

/** The agent's HTTPS endpoints (spec 4.1); buildAgentApp never listens. */
export function buildAgentApp(deps: AgentAppDeps): FastifyInstance {
  const { agent, metrics } = deps;
  const app = createServer({
    tls: deps.tls,
    logger: deps.logger,
    bodyLimit: agent.spec.inbox.maxMessageBytes,
    trustedProxies: deps.trustedProxies,
  });
  registerProbes(app, deps.ready);
  app.register(documentRoutes, { documents: deps.documents });
  app.register(inboxRoutes, {
    agent,
    verifier: deps.verifier,
    store: deps.store,
    conversations: deps.conversations,
    onAccepted: deps.onAccepted,
    encryption: deps.encryption,
    metrics,
    now: deps.now ?? Date.now,
    maxFutureSkewMs: deps.maxFutureSkewMs ?? 5 * 60_000,
    limits: deps.limits,
  });
  return app;
}
