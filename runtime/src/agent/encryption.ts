// AgentEncryption: the agent's end-to-end encryption policy (spec.encryption, docs/encryption.md)
// — which relays are trusted, which outbound messages are encrypted and for which keys, and the
// decryption of inbound ones — with the protocol errors it answers.
import type { Logger } from "pino";
import { canonicalAgentId } from "../net/host-name.ts";
import { type DiscoveryClient, DiscoveryError } from "../discovery/client.ts";
import {
  decryptMessage,
  encryptMessage,
  EncryptionError,
  isEncrypted,
  type EncryptionKey,
  type RecipientKey,
} from "../protocol/encryption.ts";
import { ProtocolError, unavailable } from "../protocol/errors.ts";
import type { Message } from "../protocol/message.ts";
import type { AgentSpec } from "../resources/agent.ts";

export type RelayTrustLevel = "untrusted" | "trusted" | "self-operated";

/** Active encryption keys used per recipient at most (more than one during a rotation). */
const MAX_KEYS_PER_AGENT = 4;
const TOPIC_PREFIX = "topic:";

/** A relay URL as spec.encryption.relayTrust is compared: its host in canonicalHost form, no trailing slash. */
const normalize = (url: string) => canonicalAgentId(url).replace(/\/+$/, "");

/** 422 for a message that must be encrypted but cannot be, at send time. */
export const encryptionKeyUnavailable = (message: string) =>
  new ProtocolError(422, "encryption_key_unavailable", message);
/** A plaintext message through a relay that this agent requires encryption through. */
export const encryptionRequired = (message: string) => new ProtocolError(403, "encryption_required", message);
/** An encrypted message this agent cannot decrypt. */
export const decryptionFailed = (message: string) => new ProtocolError(400, "decryption_failed", message);

/**
 * The agent's end-to-end encryption policy (spec.encryption, docs/encryption.md): which relays
 * are trusted, whether an outbound message is encrypted and for which keys (looked up like
 * signing keys: spec.peers, then the recipient's identity document), and decryption of inbound
 * messages with the agent's own key.
 */
export class AgentEncryption {
  private readonly spec: AgentSpec;
  private readonly discovery: DiscoveryClient;
  private readonly own: readonly EncryptionKey[];
  private readonly peerUrls: Map<string, string>;
  private readonly log: Logger | undefined;
  private readonly trust: Map<string, RelayTrustLevel>;

  /** Ids of this agent's revoked encryption keys: a message still encrypted for one is refused saying so. */
  private readonly revoked: ReadonlySet<string>;

  constructor(deps: {
    spec: AgentSpec;
    discovery: DiscoveryClient;
    keys: readonly EncryptionKey[];
    revoked?: readonly string[];
    log?: Logger;
  }) {
    this.revoked = new Set(deps.revoked ?? []);
    this.spec = deps.spec;
    this.discovery = deps.discovery;
    this.own = deps.keys;
    this.log = deps.log;
    this.peerUrls = new Map(deps.spec.peers.filter((p) => p.url).map((p) => [p.agentId, p.url!]));
    this.trust = new Map(deps.spec.encryption.relayTrust.map((r) => [normalize(r.url), r.level]));
  }

  /** Whether this agent holds an encryption key (and so can receive encrypted messages). */
  get hasKey(): boolean {
    return this.own.length > 0;
  }

  relayTrust(url: string): RelayTrustLevel {
    return this.trust.get(normalize(url)) ?? "untrusted";
  }

  /** Whether plaintext read from this relay is refused (spec.encryption.requireThroughRelays). */
  refusesPlaintextFrom(relayUrl: string): boolean {
    return this.spec.encryption.requireThroughRelays && this.relayTrust(relayUrl) === "untrusted";
  }

  /**
   * The unsigned message as it is to be sent: encrypted for every recipient when the policy
   * asks for it, unchanged otherwise. Under `required` and `always`, throws 422
   * `encryption_key_unavailable` when it must be encrypted and a recipient has no encryption
   * key, never falling back to plaintext; under `auto` such a message goes in the clear (and
   * a relay that takes it so is named in the delivery record: plaintextThrough()).
   */
  async prepare(message: Message): Promise<Message> {
    if (isEncrypted(message)) return message;
    const why = await this.reason(message);
    if (!why) return message;
    try {
      return await this.encrypt(message, why);
    } catch (err) {
      if (
        this.spec.encryption.mode === "auto" &&
        err instanceof ProtocolError &&
        err.code === "encryption_key_unavailable"
      )
        return message;
      throw err;
    }
  }

  private async encrypt(message: Message, why: string): Promise<Message> {
    const agents = [...new Set(message.headers.to.map((t) => t.agent))];
    const topics = agents.filter((a) => a.startsWith(TOPIC_PREFIX));
    if (topics.length) {
      throw encryptionKeyUnavailable(
        `the message must be encrypted (${why}), but ${topics.join(", ")} is a topic: a body for unknown subscribers cannot be encrypted`,
      );
    }
    const keys = (await Promise.all(agents.map((a) => this.recipientKeys(a, why)))).flat();
    try {
      return encryptMessage(message, keys);
    } catch (err) {
      if (err instanceof EncryptionError)
        throw encryptionKeyUnavailable(`the message cannot be encrypted: ${err.message}`);
      throw err;
    }
  }

  /** Why the message must be encrypted, or undefined when it may go in the clear. */
  private async reason(message: Message): Promise<string | undefined> {
    const mode = this.spec.encryption.mode;
    if (mode === "never") return undefined;
    if (mode === "always") return "spec.encryption.mode is always";
    // auto and required: a recipient reached only through relays (no https route: none
    // configured, or an identity document that gives no https inbox) gets its messages through
    // them; one with an https route gets them directly, and a clear message falls back to an
    // untrusted relay only as plaintextRelayAllowed() says.
    for (const t of message.headers.to) {
      if (t.agent.startsWith(TOPIC_PREFIX) || (await this.hasDirectRoute(t.agent))) continue;
      const untrusted = (this.spec.peers.find((p) => p.agentId === t.agent)?.relay?.urls ?? []).find(
        (u) => this.relayTrust(u) === "untrusted",
      );
      if (untrusted)
        return `${t.agent} is reached through the relay ${untrusted}, which is not marked trusted or self-operated`;
      const base = this.baseOf(t.agent);
      if (base) return `${t.agent} offers no https inbox, only relays, none of them marked trusted or self-operated`;
    }
    return undefined;
  }

  /**
   * Whether the recipient is reached directly: it has an https base, and its identity document
   * (when it can be had now) does not leave the inbox out or give a plain-http one.
   */
  private async hasDirectRoute(agent: string): Promise<boolean> {
    const base = this.baseOf(agent);
    if (!base) return false;
    const doc = await this.discovery.identity(base).catch(() => undefined);
    if (!doc) return true;
    const inbox = doc.endpoints?.inbox;
    if (inbox && /^https:\/\//.test(inbox)) return true;
    const relays = doc.relay?.urls ?? [];
    return !relays.length || relays.every((u) => this.relayTrust(u) !== "untrusted");
  }

  /**
   * Whether the outbound delivery may hand this message for `agent` to this relay: an
   * encrypted one always; a clear one through a trusted or self-operated relay; through an
   * untrusted one under `never`, and under `auto` when the recipient offers no encryption key
   * (none in spec.peers, no active one in an identity document that can be had), since it
   * could not have been encrypted. Error-phase messages the runtime writes itself (they carry
   * only its reason) pass.
   */
  async plaintextRelayAllowed(message: Message, relayUrl: string, agent: string): Promise<boolean> {
    const mode = this.spec.encryption.mode;
    if (isEncrypted(message) || mode === "never" || message.headers.phase === "error") return true;
    if (this.relayTrust(relayUrl) !== "untrusted") return true;
    return mode === "auto" && !(await this.offersKey(agent));
  }

  /** Whether handing this message to this relay puts a clear body on a relay not marked trusted. */
  plaintextThrough(message: Message, relayUrl: string): boolean {
    return !isEncrypted(message) && this.relayTrust(relayUrl) === "untrusted";
  }

  private async offersKey(agent: string): Promise<boolean> {
    if (agent.startsWith(TOPIC_PREFIX)) return false;
    try {
      return (await this.recipientKeys(agent)).length > 0;
    } catch (err) {
      if (err instanceof ProtocolError) return false;
      throw err;
    }
  }

  private baseOf(agent: string): string | undefined {
    return this.peerUrls.get(agent) ?? (agent.startsWith("https://") ? agent : undefined);
  }

  /**
   * A recipient's active encryption keys, looked up like signing keys: spec.peers[].encryptionKeys
   * (the humans' word) first, else the identity document at its https id or its spec.peers url.
   */
  async recipientKeys(agent: string, why = "the policy asks for it"): Promise<RecipientKey[]> {
    const peer = this.spec.peers.find((p) => p.agentId === agent);
    const configured = peer?.encryptionKeys ?? [];
    if (configured.length) {
      const active = configured.filter((k) => k.status === "active").slice(0, MAX_KEYS_PER_AGENT);
      if (!active.length)
        throw encryptionKeyUnavailable(
          `the message must be encrypted (${why}), but every encryption key of ${agent} in spec.peers is retired or revoked`,
        );
      return active.map((k) => ({ agent, keyId: k.keyId, publicKey: k.publicKey }));
    }
    const base = this.baseOf(agent);
    if (!base) {
      throw encryptionKeyUnavailable(
        `the message must be encrypted (${why}), but no encryption key of ${agent} is known: add its encryptionKeys to spec.peers, or a url where its identity document publishes one`,
      );
    }
    let doc: Awaited<ReturnType<DiscoveryClient["identity"]>>;
    try {
      doc = await this.discovery.identity(base);
    } catch (err) {
      if (!(err instanceof DiscoveryError)) throw err;
      this.log?.warn({ agent, err: err.message }, "could not look up a recipient's encryption key");
      throw unavailable(
        `the message must be encrypted (${why}), but the identity document of ${agent} with its encryption key could not be obtained; try again later`,
      );
    }
    if (doc.agent_id !== agent)
      throw encryptionKeyUnavailable(`the identity document at ${base} is for ${doc.agent_id}, not for ${agent}`);
    const keys = doc.keys
      .filter(
        (k) =>
          k.use === "encryption" &&
          k.type.toLowerCase() === "x25519" &&
          k.status === "active" &&
          /^[A-Za-z0-9_-]{43}$/.test(k.public_key),
      )
      .slice(0, MAX_KEYS_PER_AGENT);
    if (!keys.length) {
      throw encryptionKeyUnavailable(
        `the message must be encrypted (${why}), but ${agent} publishes no active encryption key (use "encryption", type x25519) in its identity document`,
      );
    }
    return keys.map((k) => ({ agent, keyId: k.key_id, publicKey: k.public_key }));
  }

  /** The message with its body decrypted (400 `decryption_failed` saying why when it cannot be). */
  decrypt(message: Message): Message {
    if (!this.own.length)
      throw decryptionFailed(`the message is encrypted, but ${this.spec.agentId} has no encryption key`);
    const listed = (message.security?.encryption as { recipients?: unknown } | undefined)?.recipients;
    const mine = (Array.isArray(listed) ? listed : []).filter(
      (r): r is { agent: string; key_id: string } => r?.agent === this.spec.agentId && typeof r?.key_id === "string",
    );
    if (mine.length && mine.every((r) => this.revoked.has(r.key_id))) {
      throw decryptionFailed(
        `the message is encrypted for ${this.spec.agentId}'s key ${mine.map((r) => r.key_id).join(", ")}, which is revoked; encrypt for its active key (its identity document)`,
      );
    }
    try {
      return decryptMessage(message, this.spec.agentId, this.own);
    } catch (err) {
      if (err instanceof EncryptionError) throw decryptionFailed(`the message could not be decrypted: ${err.message}`);
      throw err;
    }
  }
}
