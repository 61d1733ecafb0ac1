// PeerCapabilityService: what each peer can do, from its endpoint's capability document, its
// capabilities.update announcements and its greetings, kept in the peers KV bucket; and the
// outbox check that refuses a message a peer's capabilities rule out.
import type { Logger } from "pino";
import { type DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import type { CapabilityDocument } from "../protocol/documents.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import { TOPIC_PREFIX } from "../protocol/relay-api.ts";
import type { Message } from "../protocol/message.ts";
import { errorMessage } from "../util/errors.ts";
import type { PeerCapabilities, PeerCapabilitiesView } from "../protocol/local-api.ts";
import type { PeerCapabilityCache } from "./inbound.ts";

/** The topic capability announcements are published on (spec 6). */
export const CAPABILITIES_TOPIC = "capabilities.update";

export type { PeerCapabilitiesView };

/**
 * A peer's capabilities, from the three sources of spec 4.3 and 6: the capability document at
 * its endpoint (fetched before the first conversation through the discovery cache, so refreshed
 * as its ETag and max-age say), a `capabilities.update` announcement (replaces the baseline and
 * forgets the cached endpoint document), and the capability part of its greeting (merged over
 * the baseline, capability by capability). Kept in the peers KV bucket so that replicas and
 * restarts share them.
 */
export class PeerCapabilityService {
  private readonly store: Pick<PeerCapabilityCache, "get" | "put">;
  private readonly discovery: DiscoveryClient;
  private readonly peerUrls: Map<string, string>;
  private readonly log: Logger;

  constructor(deps: {
    store: Pick<PeerCapabilityCache, "get" | "put">;
    discovery: DiscoveryClient;
    peerUrls: Map<string, string>;
    log: Logger;
  }) {
    this.store = deps.store;
    this.discovery = deps.discovery;
    this.peerUrls = deps.peerUrls;
    this.log = deps.log;
  }

  /** Where the peer's documents are: its spec.peers url, or its agent id when that is an https URL. */
  baseOf(agent: string): string | undefined {
    return this.peerUrls.get(agent) ?? (/^https:\/\//.test(agent) ? agent : undefined);
  }

  /**
   * The peer's capabilities as known now: the endpoint document (fresh per its caching headers;
   * with `refresh`, fetched again whatever the cache says) or the last announcement, with the
   * greeting's document merged over it. Undefined when nothing is known.
   */
  async get(agent: string, opts: { refresh?: boolean } = {}): Promise<PeerCapabilitiesView | undefined> {
    try {
      return await this.lookup(agent, opts);
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      throw unavailable(`the peer capabilities store (NATS KV) is not reachable: ${errorMessage(err)}`);
    }
  }

  private async lookup(agent: string, opts: { refresh?: boolean }): Promise<PeerCapabilitiesView | undefined> {
    let baseline = await this.store.get(agent, "baseline");
    let stale = false;
    const base = this.baseOf(agent);
    if (base) {
      if (opts.refresh) this.discovery.invalidate(base);
      try {
        const document = await this.discovery.capabilities(base);
        // An announcement newer than the endpoint's document wins until the endpoint catches up.
        if (!(baseline?.source === "announcement" && isOlder(document.updated, baseline.document.updated))) {
          if (baseline?.source !== "endpoint" || JSON.stringify(baseline.document) !== JSON.stringify(document)) {
            baseline = {
              agent_id: agent,
              document,
              source: "endpoint",
              learned_at: new Date().toISOString(),
              auth_level: ENDPOINT_LEVEL,
            };
            await this.store.put(agent, baseline, "baseline");
          }
        }
      } catch (err) {
        if (!(err instanceof DiscoveryError)) throw err;
        this.log.debug({ peer: agent, err: errorMessage(err) }, "no capability document at the peer's endpoint");
        stale = baseline?.source === "endpoint";
      }
    }
    const greeting = await this.store.get(agent);
    return merged(agent, baseline, greeting, stale);
  }

  /**
   * A capabilities.update from `sender` at `authLevel` — on a relay topic, or a message of a
   * conversation carrying a capability document outside a greeting: the document becomes the
   * peer's baseline (`source: "announcement"`) and the cached endpoint document is dropped, so
   * the next look-up asks the endpoint again. Not taken from an unsigned sender, for a document
   * naming another agent, nor below the level the current baseline was learned at (an
   * endpoint document counts as level 2, what an https id's own document gives).
   */
  async updated(sender: string, authLevel: number, document: CapabilityDocument, messageId: string): Promise<boolean> {
    if (authLevel < 0) {
      this.log.info({ peer: sender, message_id: messageId }, "ignored a capability document from an unsigned message");
      return false;
    }
    if (document.agent_id !== undefined && document.agent_id !== sender) {
      this.log.warn({ peer: sender, claimed: document.agent_id }, "ignored a capabilities.update about another agent");
      return false;
    }
    const current = await this.store.get(sender, "baseline");
    if (current && levelOf(current) > authLevel) {
      this.log.warn(
        { peer: sender, message_id: messageId, level: authLevel, known_level: levelOf(current) },
        "ignored a capabilities.update below the level of what is known of the peer",
      );
      return false;
    }
    const base = this.baseOf(sender);
    if (base) this.discovery.invalidate(base);
    await this.store.put(
      sender,
      {
        agent_id: sender,
        document,
        source: "announcement",
        message_id: messageId,
        learned_at: new Date().toISOString(),
        auth_level: authLevel,
      },
      "baseline",
    );
    return true;
  }

  /**
   * A greeting's capability document from `sender` at `authLevel`: cached for the peer unless
   * the greeting cached now was learned at a higher level (an unsigned or introduction greeting
   * never replaces what a signed one taught). A document newer (`updated`) than the endpoint
   * document kept says that one is stale (spec 9.2): it is fetched again.
   */
  async greeted(sender: string, authLevel: number, document: CapabilityDocument, messageId: string): Promise<boolean> {
    const current = await this.store.get(sender);
    if (current && levelOf(current) > authLevel) {
      this.log.warn(
        { peer: sender, message_id: messageId, level: authLevel, known_level: levelOf(current) },
        "kept the capabilities a greeting at a higher level gave; this greeting's are not cached",
      );
      return false;
    }
    await this.store.put(sender, {
      agent_id: sender,
      document,
      source: "greeting",
      message_id: messageId,
      learned_at: new Date().toISOString(),
      auth_level: authLevel,
    });
    await this.refreshIfStale(sender, authLevel, document.updated);
    return true;
  }

  /**
   * A conversation says the peer's document changed at `updated`: when that is later than the
   * baseline kept (or nothing is kept), the endpoint document is fetched again now, whatever
   * its cache headers said. Only at the baseline's level or above.
   */
  private async refreshIfStale(agent: string, authLevel: number, updated: string | undefined): Promise<void> {
    const base = this.baseOf(agent);
    if (!base || !updated || !Number.isFinite(Date.parse(updated))) return;
    const baseline = await this.store.get(agent, "baseline");
    if (
      baseline &&
      (levelOf(baseline) > authLevel || !isOlder(baseline.document.updated ?? baseline.learned_at, updated))
    )
      return;
    this.log.info(
      { peer: agent, updated, cached: baseline?.document.updated },
      "the peer's capability document changed since it was fetched; fetching it again",
    );
    this.discovery.invalidate(base);
    // In the background: the message that said so is not held up by the peer's endpoint.
    void this.get(agent).catch((err: unknown) =>
      this.log.debug({ peer: agent, err: errorMessage(err) }, "could not refresh the peer's capability document"),
    );
  }

  /** `outbox` with check() before every enqueue: the local API's POST /outbox refuses instead of queuing. */
  gate(outbox: Enqueue): Enqueue {
    return {
      enqueue: async (message) => {
        await this.check(message);
        return outbox.enqueue(message);
      },
    };
  }

  /**
   * The outbox's check before a message is queued: for each direct recipient whose capabilities
   * are known, the message's format (`ifp`) must be in the document's `ifp_support` (when it has
   * one, spec 9.3), and every name in `headers.capabilities.request` must be a capability the
   * document offers. 422 otherwise. A peer with no known document is not checked: nothing says
   * it would refuse.
   */
  async check(message: Message): Promise<void> {
    const requested = message.headers.capabilities?.request ?? [];
    const agents = [...new Set(message.headers.to.map((t) => t.agent).filter((a) => !a.startsWith(TOPIC_PREFIX)))];
    // Looked up side by side: one slow endpoint bounds the wait (the discovery timeout), not their sum.
    const views = await Promise.all(agents.map((a) => this.get(a)));
    for (const [i, agent] of agents.entries()) {
      const known = views[i];
      if (!known) continue;
      const support = known.document.ifp_support;
      if (support && !support.includes(message.ifp)) {
        throw new ProtocolError(
          422,
          "unsupported_version",
          `${agent} does not support ifp ${message.ifp} messages: its capability document (${known.source}) lists ifp_support ${JSON.stringify(support)}`,
        );
      }
      const offered = new Set(known.document.capabilities.map((c) => c.name));
      const missing = requested.filter((name) => !offered.has(name));
      if (missing.length) {
        throw new ProtocolError(
          422,
          "capability_not_offered",
          `${agent} does not offer ${missing.map((m) => JSON.stringify(m)).join(", ")}: its capabilities (${known.source}) are ${[...offered].join(", ") || "none"}`,
        );
      }
    }
  }
}

/** The outbox behind check(): what the local API queues into. */
export interface Enqueue {
  enqueue(message: Message): Promise<{ duplicate: boolean; seq: number }>;
}

/** What an https id's own document gives (docs/identity.md): an endpoint document is learned at it. */
const ENDPOINT_LEVEL = 2;

/** The level an entry was learned at; an entry kept before levels were recorded counts as unsigned, an endpoint document as level 2. */
function levelOf(e: PeerCapabilities): number {
  return e.auth_level ?? (e.source === "endpoint" ? ENDPOINT_LEVEL : -1);
}

function isOlder(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  return Date.parse(a) < Date.parse(b);
}

/** The baseline with the greeting's document merged over it, capability by capability. */
function merged(
  agent: string,
  baseline: PeerCapabilities | undefined,
  greeting: PeerCapabilities | undefined,
  stale: boolean,
): PeerCapabilitiesView | undefined {
  if (!baseline && !greeting) return undefined;
  if (greeting?.source !== "greeting") return { ...baseline!, ...(stale ? { stale } : {}) };
  if (!baseline) return greeting;
  // A baseline learned after the greeting supersedes it only when the peer says it changed since;
  // a greeting below the level the baseline was learned at does not refine it.
  if (isOlder(greeting.learned_at, baseline.document.updated) || levelOf(greeting) < levelOf(baseline))
    return { ...baseline, ...(stale ? { stale } : {}) };
  const byName = new Map(baseline.document.capabilities.map((c) => [c.name, c]));
  for (const c of greeting.document.capabilities) byName.set(c.name, c);
  const { capabilities: _b, ...baseRest } = baseline.document;
  const { capabilities: _g, agent_id: _a, updated: _u, ...greetRest } = greeting.document;
  return {
    agent_id: agent,
    document: { ...baseRest, ...greetRest, capabilities: [...byName.values()] },
    source: "greeting",
    ...(greeting.message_id ? { message_id: greeting.message_id } : {}),
    learned_at: greeting.learned_at,
    ...(greeting.auth_level !== undefined ? { auth_level: greeting.auth_level } : {}),
    baseline: {
      source: baseline.source === "announcement" ? "announcement" : "endpoint",
      ...(baseline.message_id ? { message_id: baseline.message_id } : {}),
      learned_at: baseline.learned_at,
      ...(baseline.auth_level !== undefined ? { auth_level: baseline.auth_level } : {}),
    },
    ...(stale ? { stale } : {}),
  };
}
