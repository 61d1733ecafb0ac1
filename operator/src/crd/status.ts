// The status the operator writes, as zod schemas: the CRDs' status schema comes from here, the
// same way their spec schema comes from runtime/src/resources.
import { z } from "zod";

export const Condition = z.object({
  type: z.string().min(1).describe("Ready, Reconciling, Stalled (and StreamReady for relays)"),
  status: z.enum(["True", "False", "Unknown"]),
  reason: z.string().min(1).describe("CamelCase reason of the last transition"),
  message: z.string().describe("Human-readable detail"),
  observedGeneration: z.number().int().min(0),
  lastTransitionTime: z.string().describe("When status last changed (RFC 3339)"),
});

const common = {
  observedGeneration: z.number().int().min(0).optional().describe("The metadata.generation this status describes"),
  conditions: z.array(Condition).optional(),
  tlsSecretName: z.string().optional().describe("The Secret the runtime's serving certificate is read from"),
  replicas: z.number().int().min(0).optional().describe("Runtime pods that exist"),
  readyReplicas: z.number().int().min(0).optional().describe("Runtime pods that are ready"),
};

export const AgentStatus = z.object({
  ...common,
  endpoint: z.string().optional().describe("The agent's base URL: spec.baseUrl, else its Service's in-cluster URL"),
  capabilitiesHash: z.string().optional().describe("SHA-256 of the published capability list (canonical JSON)"),
  signingKey: z
    .object({
      keyId: z.string(),
      publicKey: z.string().describe("base64url of the raw Ed25519 public key, for peers' spec.peers[].keys"),
      secretName: z.string(),
      created: z.string().optional(),
    })
    .optional(),
  encryptionKey: z
    .object({
      keyId: z.string().describe("The key_id the identity document publishes it under"),
      publicKey: z.string().describe("base64url of the raw X25519 public key, for peers' spec.peers[].encryptionKeys"),
    })
    .optional()
    .describe("The agent's end-to-end encryption key (encryption.key of the signing Secret); absent when that Secret has none, and the agent then cannot receive encrypted messages"),
  signingKeys: z
    .array(
      z.object({
        keyId: z.string(),
        publicKey: z.string(),
        status: z.enum(["active", "retired", "revoked"]),
        created: z.string().optional(),
        retired: z.string().optional(),
        revokeAt: z.string().optional().describe("When a retired key will be revoked"),
        revoked: z.string().optional(),
      }),
    )
    .optional()
    .describe("Every signing key the agent has had, as its identity document publishes them"),
});
export type AgentStatus = z.infer<typeof AgentStatus>;

export const StreamStatus = z.object({
  name: z.string(),
  maxAge: z.string(),
  maxBytes: z.number().int(),
  maxMessages: z.number().int(),
  replicas: z.number().int(),
  storage: z.string(),
  duplicateWindow: z.string(),
});

export const RelayStatus = z.object({
  ...common,
  url: z.string().optional(),
  stream: StreamStatus.optional().describe("The JetStream stream's applied configuration"),
});
export type RelayStatus = z.infer<typeof RelayStatus>;
