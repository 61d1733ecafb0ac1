import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { generateSigningKey, privateKeyFromPem } from "../../src/protocol/keys.ts";
import type { Message } from "../../src/protocol/message.ts";
import { signMessage, type SigningKey } from "../../src/protocol/signing.ts";
import { newMessageId } from "../../src/agent/outbound/replies.ts";
import type { AgentSpecInput } from "../../src/resources/agent.ts";
import type { RelaySpecInput } from "../../src/resources/relay.ts";

export interface TestIdentity {
  agentId: string;
  keyId: string;
  publicKey: string;
  privateKeyPem: string;
  signing: SigningKey;
}

export function identity(agentId: string, keyId = "key-1"): TestIdentity {
  const { privateKeyPem, publicKey } = generateSigningKey();
  return {
    agentId,
    keyId,
    publicKey,
    privateKeyPem,
    signing: { agentId, keyId, privateKey: privateKeyFromPem(privateKeyPem) },
  };
}

export const peerOf = (id: TestIdentity) => ({
  agentId: id.agentId,
  keys: [{ keyId: id.keyId, publicKey: id.publicKey }],
});

export function tempDir(prefix = "ifp-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/**
 * What a person running every runtime on one machine writes: peers, relays and webhooks on
 * loopback are allowed as targets (spec.network.allowPrivateTargets), unless the spec says otherwise.
 */
/**
 * Two agents that talk through one relay: `to` polls its mailbox there and hands what it gets to
 * `handlerUrl`; `from` sends to `to` through the relay, trusting it as self-operated.
 */
export function throughRelay(from: TestIdentity, to: TestIdentity, relayUrl: string, handlerUrl: string) {
  return {
    to: {
      peers: [peerOf(from)],
      relay: { urls: [relayUrl], pollInterval: "300ms" },
      handler: { url: handlerUrl },
    },
    from: {
      peers: [{ ...peerOf(to), relay: { urls: [relayUrl] } }],
      outbound: { backoff: ["300ms"], retryFor: "30s" },
      encryption: { relayTrust: [{ url: relayUrl, level: "self-operated" as const }] },
    },
  };
}

export const LOOPBACK_TARGETS = { allowPrivateTargets: ["127.0.0.0/8", "::1/128"] };

export function writeAgentManifest(
  dir: string,
  spec: AgentSpecInput,
  name = "agent",
  namespace?: string,
  annotations?: Record<string, string>,
): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    stringify({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name, ...(namespace ? { namespace } : {}), ...(annotations ? { annotations } : {}) },
      spec: { network: LOOPBACK_TARGETS, ...spec },
    }),
  );
  return path;
}

export function writeRelayManifest(dir: string, spec: RelaySpecInput, name = "relay"): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    stringify({
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Relay",
      metadata: { name },
      spec: { network: LOOPBACK_TARGETS, ...spec },
    }),
  );
  return path;
}

export function writeKey(dir: string, id: TestIdentity): string {
  const path = join(dir, `${id.agentId.replace(/\W/g, "_")}.key`);
  writeFileSync(path, id.privateKeyPem, { mode: 0o600 });
  return path;
}

/** An unsigned IFP-4 message from one agent to others. */
export function message(
  from: string,
  to: string | string[],
  overrides: Partial<Message["headers"]> = {},
  text = "hello",
): Message {
  return {
    ifp: 4,
    headers: {
      message_id: newMessageId(),
      date: new Date().toISOString(),
      from: { agent: from },
      to: (Array.isArray(to) ? to : [to]).map((agent) => ({ agent })),
      conversation_id: "conv:test",
      sequence: 1,
      phase: "greeting",
      content_type: "text/markdown; charset=utf-8",
      ...overrides,
    },
    body: { text },
  };
}

export function signed(
  id: TestIdentity,
  to: string | string[],
  overrides: Partial<Message["headers"]> = {},
  text?: string,
): Message {
  return signMessage(message(id.agentId, to, overrides, text), id.signing);
}
