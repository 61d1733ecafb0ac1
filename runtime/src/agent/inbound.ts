// What an accepted inbound message calls for (inspect, pure): a hand-off, an error-phase answer,
// a peer's capability document from a greeting; and PeerCapabilityCache, the capability
// documents learned per peer in a NATS KV bucket.
import type { KV } from "@nats-io/kv";
import type { Logger } from "pino";
import type { Nats } from "../nats/connection.ts";
import { encodeToken } from "../contract/nats.ts";
import { CapabilityDocument } from "../protocol/documents.ts";
import { PHASES, protocolProblem, type Message } from "../protocol/message.ts";
import { describeIssues } from "../contract/issues.ts";
import type { PeerCapabilities } from "../protocol/local-api.ts";
import type { Agent } from "../resources/agent.ts";
import { describeMismatches, unmetConditions } from "./capability-conditions.ts";
import type { AgentNames } from "./names.ts";

export interface InboundMeta {
  sender: string;
  authLevel: number;
}

/** What happens to an accepted message before (or instead of) the hand-off. */
export interface Inspection {
  /** Hand it to spec.handler.url. */
  deliver: boolean;
  /** Answer it with an error-phase message. */
  error?: { code: string; text: string; details?: Record<string, unknown> };
  /** A valid capability document from a greeting's body part. */
  capabilities?: CapabilityDocument;
  /**
   * A valid capability document from the `capabilities` part of any other message: the sender
   * says its capabilities changed (a capabilities.update, on a topic or straight to this agent).
   */
  announcement?: CapabilityDocument;
}

/** Pure: protocol problems (7.2.1), capability conditions (7.2.2) and greeting discovery (4.3). */
export function inspect(message: Message, meta: InboundMeta, agent: Agent): Inspection {
  const problem = protocolProblem(message);
  if (problem) {
    return {
      deliver: false,
      error: {
        code: message.ifp !== 4 ? "unsupported_version" : "unknown_phase",
        text: `Your message ${message.headers.message_id} was received but not processed: ${problem}.`,
        details: { supported_ifp: [4], phases: [...PHASES] },
      },
    };
  }
  const unmet = unmetConditions(message, meta.authLevel, agent.spec);
  if (unmet.length) {
    return {
      deliver: false,
      error: {
        code: "capability_conditions_not_met",
        text: `The capabilities you asked for are not available in this conversation: ${describeMismatches(unmet)}.`,
        details: { mismatches: unmet },
      },
    };
  }
  const part = message.body.parts?.find(
    (p) => p.name === "capabilities" && p.content_type.startsWith("application/json"),
  );
  if (message.headers.phase === "greeting" && part) {
    const doc = CapabilityDocument.safeParse(part.content);
    if (!doc.success) {
      return {
        deliver: true,
        error: {
          code: "invalid_capabilities",
          text: `The capability document in your greeting is not valid and was ignored: ${describeIssues(doc.error)}.`,
        },
      };
    }
    return { deliver: true, capabilities: doc.data };
  }
  if (part) {
    // Not a greeting: a document that is not valid is no announcement, and the message is the application's.
    const doc = CapabilityDocument.safeParse(part.content);
    if (doc.success) return { deliver: true, announcement: doc.data };
  }
  return { deliver: true };
}

export type { PeerCapabilities };

/** Capability documents learned per peer (KV), refining what endpoint discovery gives. */
export class PeerCapabilityCache {
  private kv: KV | undefined;
  private readonly nats: Nats;
  private readonly names: AgentNames;
  private readonly log: Logger;

  constructor(nats: Nats, names: AgentNames, log: Logger) {
    this.nats = nats;
    this.names = names;
    this.log = log;
  }

  async ensure(): Promise<void> {
    this.kv = await this.nats.bucket(this.names.peersBucket, { history: 1 });
  }

  /**
   * `greeting` entries are keyed by the peer alone; `baseline` (endpoint or announcement) ones
   * under `baseline.`, which no encoded peer name can spell (encodeToken never writes a dot).
   */
  async put(peer: string, entry: PeerCapabilities, kind: PeerEntryKind = "greeting"): Promise<void> {
    await this.kv?.put(peerKey(peer, kind), JSON.stringify(entry));
    this.log.info(
      { peer, source: entry.source, capabilities: entry.document.capabilities.length },
      "learned peer capabilities",
    );
  }

  async get(peer: string, kind: PeerEntryKind = "greeting"): Promise<PeerCapabilities | undefined> {
    const e = await this.kv?.get(peerKey(peer, kind));
    return e?.value.length ? (e.json() as PeerCapabilities) : undefined;
  }
}

export type PeerEntryKind = "greeting" | "baseline";

function peerKey(peer: string, kind: PeerEntryKind): string {
  return kind === "baseline" ? `baseline.${encodeToken(peer)}` : encodeToken(peer);
}
