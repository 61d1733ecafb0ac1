// The status the operator writes, as zod schemas: the CRDs' status schema comes from here, the
// same way their spec schema comes from runtime/src/resources.
import { z } from "zod";

export const Condition = z.object({
  type: z.string().min(1).describe("Ready, Reconciling, Stalled (and StreamReady for relays)"),
  status: z.enum(["True", "False", "Unknown"]).describe("True, False or Unknown"),
  reason: z.string().min(1).describe("CamelCase reason of the last transition"),
  message: z.string().describe("Human-readable detail"),
  observedGeneration: z.number().int().min(0).describe("The metadata.generation the condition was set for"),
  lastTransitionTime: z.string().describe("When status last changed (RFC 3339)"),
});

export const Summary = z
  .object({
    acceptedLastHour: z
      .number()
      .int()
      .min(0)
      .describe(
        "Messages stored in the last hour: accepted into the inbox (an Agent) or copies stored for recipients (a Relay); counted from the operator's samples, so over a shorter time just after the operator starts",
      ),
    backlog: z
      .number()
      .int()
      .min(0)
      .describe(
        "Messages waiting: for an Agent, accepted but not yet taken by its handler plus queued to send; for a Relay, copies stored and not yet acknowledged",
      ),
    lastError: z
      .string()
      .optional()
      .describe(
        "The runtime's newest delivery problem (an undeliverable message, a dead letter, a push given up), as Reason: detail",
      ),
    lastErrorTime: z.string().optional().describe("When lastError happened (RFC 3339)"),
  })
  .describe(
    "A short summary of the traffic, read from NATS JetStream by the operator about once a minute and written only when it changed; the runtime's metrics have the detail",
  );

const common = {
  summary: Summary.optional().describe("Traffic at a glance, for kubectl get"),
  observedGeneration: z.number().int().min(0).optional().describe("The metadata.generation this status describes"),
  conditions: z.array(Condition).optional().describe("The resource's conditions, one per type"),
  tlsSecretName: z.string().optional().describe("The Secret the runtime's serving certificate is read from"),
  replicas: z.number().int().min(0).optional().describe("Runtime pods that exist"),
  readyReplicas: z.number().int().min(0).optional().describe("Runtime pods that are ready"),
};

export const AgentStatus = z
  .object({
    ...common,
    endpoint: z.string().optional().describe("The agent's base URL: spec.baseUrl, else its Service's in-cluster URL"),
    a2a: z
      .object({
        card: z.string().describe("The signed agent card"),
        jsonRpc: z.string().describe("The JSON-RPC binding's endpoint"),
        rest: z.string().describe("The HTTP+JSON binding's base URL"),
        grpc: z
          .string()
          .optional()
          .describe("The gRPC binding's target, <host>:<port> (the host of the base URL, the a2a-grpc port)"),
      })
      .optional()
      .describe("With spec.a2a.enabled: where A2A clients reach the agent (docs/a2a.md)"),
    capabilitiesHash: z.string().optional().describe("SHA-256 of the published capability list (canonical JSON)"),
    signingKey: z
      .object({
        keyId: z.string().describe("The key's id, as in spec.signing.keyId"),
        publicKey: z.string().describe("base64url of the raw Ed25519 public key, for peers' spec.peers[].keys"),
        secretName: z.string().describe("The Secret the key is kept in"),
        created: z.string().optional().describe("When the operator generated the key (RFC 3339)"),
      })
      .optional()
      .describe("The agent's signing key, as published"),
    encryptionKey: z
      .object({
        keyId: z.string().describe("The key_id the identity document publishes it under"),
        publicKey: z
          .string()
          .describe("base64url of the raw X25519 public key, for peers' spec.peers[].encryptionKeys"),
      })
      .optional()
      .describe(
        "The agent's end-to-end encryption key (encryption.key of the signing Secret); absent when that Secret has none, and the agent then cannot receive encrypted messages",
      ),
    signingKeys: z
      .array(
        z.object({
          keyId: z.string().describe("The key_id it is published under"),
          publicKey: z.string().describe("base64url of the raw Ed25519 public key"),
          status: z
            .enum(["active", "retired", "revoked"])
            .describe("active signs; retired still signs and verifies during the transition; revoked is refused"),
          created: z.string().optional().describe("When it was made"),
          retired: z.string().optional().describe("When a rotation retired it"),
          revokeAt: z.string().optional().describe("When a retired key will be revoked"),
          revoked: z.string().optional().describe("When it was revoked"),
        }),
      )
      .optional()
      .describe("Every signing key the agent has had, as its identity document publishes them"),
    selector: z.string().optional().describe("Label selector of the agent's runtime pods, for the scale subresource"),
  })
  .describe("The observed state of the agent, written by the operator");
export type AgentStatus = z.infer<typeof AgentStatus>;

export const StreamStatus = z.object({
  name: z.string().describe("The stream's name"),
  maxAge: z.string().describe("Age after which messages are removed"),
  maxBytes: z.number().int().describe("Size limit in bytes, -1 for none"),
  maxMessages: z.number().int().describe("Message count limit, -1 for none"),
  replicas: z.number().int().describe("Copies of the stream"),
  storage: z.string().describe("file or memory"),
  duplicateWindow: z.string().describe("Window in which a message_id is stored once"),
});

export const RelayStatus = z
  .object({
    ...common,
    url: z.string().optional().describe("The relay's public base URL"),
    stream: StreamStatus.optional().describe("The JetStream stream's applied configuration"),
    selector: z.string().optional().describe("Label selector of the relay's runtime pods, for the scale subresource"),
  })
  .describe("The observed state of the relay, written by the operator");
export type RelayStatus = z.infer<typeof RelayStatus>;
