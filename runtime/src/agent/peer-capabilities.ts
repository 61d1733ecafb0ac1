import type { Logger } from "pino";
import { DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import { CapabilityDocument } from "../protocol/documents.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import { TOPIC_PREFIX } from "../protocol/relay-api.ts";
import type { Message } from "../protocol/message.ts";
import { errorMessage } from "../util/errors.ts";
import type { PeerCapabilities, PeerCapabilityCache } from "./inbound.ts";
import { messageLog } from "../telemetry/logs.ts";

/** The topic capability announcements are published on (spec 6). */
export const CAPABILITIES_TOPIC = "capabilities.update";

/**
 * What the application sees of a peer: the baseline document with the greeting's merged over
 * it. source, message_id and learned_at are the most specific source's (the greeting when it
 * refined the baseline); `baseline` then says where the document under it came from.
 */
export interface PeerCapabilitiesView extends PeerCapabilities {
  baseline?: { source: "endpoint" | "announcement"; message_id?: string; learned_at: string };
  /** The baseline could not be refreshed just now (the peer's endpoint failed); this is the last one kept. */
  stale?: boolean;
}

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

  constructor(deps: { store: Pick<PeerCapabilityCache, "get" | "put">; discovery: DiscoveryClient; peerUrls: Map<string, string>; log: Logger }) {
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
          if (!baseline || baseline.source !== "endpoint" || JSON.stringify(baseline.document) !== JSON.stringify(document)) {
            baseline = { agent_id: agent, document, source: "endpoint", learned_at: new Date().toISOString() };
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
   * A `capabilities.update` announcement received from `sender` (its verified signer): the
   * document in its `capabilities` part becomes the peer's baseline. False when the message
   * is not one, or its document is not valid or names another agent.
   */
  async announced(message: Message, sender: string | undefined): Promise<boolean> {
    // Only a verified signer speaks for an agent's capabilities.
    if (!sender) return false;
    if (!message.headers.to.some((t) => t.agent === `${TOPIC_PREFIX}${CAPABILITIES_TOPIC}`)) return false;
    const part = message.body.parts?.find((p) => p.name === "capabilities" && p.content_type.startsWith("application/json"));
    const doc = CapabilityDocument.safeParse(part?.content);
    if (!doc.success) {
      this.log.warn({ ...messageLog(message, sender) }, "ignored a capabilities.update without a valid capability document");
      return false;
    }
    if (doc.data.agent_id !== undefined && doc.data.agent_id !== sender) {
      this.log.warn({ peer: sender, claimed: doc.data.agent_id }, "ignored a capabilities.update about another agent");
      return false;
    }
    const base = this.baseOf(sender);
    if (base) this.discovery.invalidate(base);
    await this.store.put(
      sender,
      { agent_id: sender, document: doc.data, source: "announcement", message_id: message.headers.message_id, learned_at: new Date().toISOString() },
      "baseline",
    );
    return true;
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

function isOlder(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  return Date.parse(a) < Date.parse(b);
}

/** The baseline with the greeting's document merged over it, capability by capability. */
function merged(agent: string, baseline: PeerCapabilities | undefined, greeting: PeerCapabilities | undefined, stale: boolean): PeerCapabilitiesView | undefined {
  if (!baseline && !greeting) return undefined;
  if (!greeting || greeting.source !== "greeting") return { ...baseline!, ...(stale ? { stale } : {}) };
  if (!baseline) return greeting;
  // A baseline learned after the greeting supersedes it only when the peer says it changed since.
  if (isOlder(greeting.learned_at, baseline.document.updated)) return { ...baseline, ...(stale ? { stale } : {}) };
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
    baseline: {
      source: baseline.source === "announcement" ? "announcement" : "endpoint",
      ...(baseline.message_id ? { message_id: baseline.message_id } : {}),
      learned_at: baseline.learned_at,
    },
    ...(stale ? { stale } : {}),
  };
}
