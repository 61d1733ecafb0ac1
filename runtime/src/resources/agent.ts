// The Agent custom resource as a zod schema (spec and its defaults): what the runtime validates
// its manifest with, the operator reconciles, and operator/src/crd/generate.ts writes the CRD from.
import { z } from "zod";
import { DeploymentSettings } from "./deployment.ts";
import { ExposeSpec } from "./expose.ts";
import { AgentId, ByteSize, Duration, LogLevel, HttpsUrl, HttpUrl, KnownAgent, LabelSelector } from "./fields.ts";
import { NetworkSpec } from "./network.ts";
import { cel, resource } from "./schema.ts";
import { TlsSpec } from "./tls.ts";
import { DisruptionSpec } from "./disruption.ts";

export const CAPABILITY_NAME_RE = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

export const CapabilityConditions = z.object({
  minDisclosure: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Lowest disclosure tier (of spec.disclosureTiers) a request's headers.disclosure must reach; published as min_disclosure",
    ),
  minAuthLevel: z
    .number()
    .int()
    .min(0)
    .max(3)
    .optional()
    .describe("Lowest IFP-5 authentication level a request must be verified at; published as min_auth_level"),
  temperature: z
    .enum(["cool", "warm", "hot"])
    .optional()
    .describe("Lowest temperature of the relationship with the sender (spec.peers[].temperature)"),
});
export type CapabilityConditions = z.infer<typeof CapabilityConditions>;

export const CapabilitySpec = z.object({
  name: z
    .string()
    .min(1)
    .max(256)
    .regex(CAPABILITY_NAME_RE, "must be dot notation such as category.name")
    .describe("The capability's name in dot notation, e.g. calendar.availability"),
  version: z.string().min(1).default("1").describe("The capability's version"),
  description: z.string().min(1).describe("What the capability does, for peers reading the capability document"),
  parameters: z.record(z.string(), z.unknown()).optional().describe("Expected input parameters (free-form)"),
  conditions: CapabilityConditions.optional().describe(
    "What a request for this capability must meet; a request that does not is answered with capability_conditions_not_met",
  ),
});

export const RelayPreference = z.object({
  urls: z
    .array(z.url({ protocol: /^https$/ }))
    .default([])
    .describe("https base URLs of the relays"),
  preference: z
    .string()
    .min(1)
    .default("any")
    .describe("How the relays are used, as the identity document says: any, or a preference the sender honours"),
});

/** The agent's own relays: advertised to peers, and read for waiting messages. */
export const AgentRelay = RelayPreference.extend({
  urls: z
    .array(HttpsUrl)
    .default([])
    .describe(
      "https base URLs of the agent's relays, advertised in its identity document and read for waiting messages",
    ),
  receive: z
    .enum(["events", "poll"])
    .default("events")
    .describe(
      "events: follow each relay's event stream (GET /relay/events) and take messages as they arrive, polling only while a stream is down and once a minute besides; poll: read the mailbox every pollInterval",
    ),
  pollInterval: Duration.default("5s").describe(
    "How often the agent's mailbox on each relay is read when no event stream is open (or with receive: poll)",
  ),
  topics: z
    .array(z.string().max(128).regex(CAPABILITY_NAME_RE, "a dot-notation topic name such as capabilities.update"))
    .max(32)
    .default([])
    .describe(
      "Topics the agent follows on each of its relays (e.g. capabilities.update, whose announcements refresh the sender's known capabilities)",
    ),
});

/**
 * The asymmetric JWS algorithms, the only ones taken where a key comes from a public JWKS (an
 * OIDC issuer's tokens, an A2A card's signature): never `none`, never HMAC, since a symmetric key
 * in a public document would let anyone sign.
 */
export const ASYMMETRIC_JWS_ALGORITHMS = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
  "Ed25519",
] as const;

/** spec.a2a.authentication.oidc[]: an identity provider whose JWTs name A2A callers (docs/a2a.md#authentication). */
export const A2aOidcIssuer = z.object({
  issuer: HttpsUrl.max(2048).describe(
    "The issuer's identifier, exactly as its tokens' iss claim and its /.well-known/openid-configuration give it",
  ),
  audience: z
    .string()
    .min(1)
    .max(1024)
    .describe("The audience a token must name in its aud claim (the agent's client id or URL at the issuer)"),
  jwksUrl: HttpsUrl.max(2048)
    .optional()
    .describe("The issuer's JWKS; without it, the jwks_uri of the issuer's /.well-known/openid-configuration"),
  algorithms: z
    .array(z.enum(ASYMMETRIC_JWS_ALGORITHMS))
    .min(1)
    .max(ASYMMETRIC_JWS_ALGORITHMS.length)
    .default(["RS256", "ES256"])
    .describe("The JWS algorithms accepted (asymmetric only)"),
  subjectClaim: z
    .string()
    .min(1)
    .max(128)
    .default("sub")
    .describe("The claim that names the caller at the issuer (a string); the caller is the issuer and this claim"),
});

export type A2aOidcIssuerSpec = z.infer<typeof A2aOidcIssuer>;

/** spec.a2a: the Agent2Agent (A2A v1.0) face of the agent, served beside the IFP inbox (docs/a2a.md). */
export const A2aSpec = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe(
        "Serve A2A v1.0 (agent card, JSON-RPC and HTTP+JSON bindings) on the runtime's HTTPS port, beside the IFP inbox",
      ),
    authentication: z
      .object({
        bearerTokenSecret: z
          .object({
            name: z.string().min(1).describe("Secret holding the accepted bearer tokens, one per line"),
            key: z.string().min(1).default("tokens").describe("Key of the Secret that holds them"),
          })
          .optional()
          .describe(
            "Bearer tokens A2A clients may present (Authorization: Bearer); a caller with one is authenticated at level 0. IFP HTTP message signatures (RFC 9421) are always accepted",
          ),
        minAuthLevel: z
          .number()
          .int()
          .min(0)
          .max(3)
          .default(0)
          .describe(
            "Lowest authentication level an A2A caller must reach (0 bearer token, 1-2 IFP signatures as for the inbox)",
          ),
        oidc: z
          .array(A2aOidcIssuer)
          .max(8)
          .default([])
          .describe(
            "OpenID Connect issuers whose JWT access tokens A2A clients may present (Authorization: Bearer); a caller with one is authenticated at level 0 as a2a-oidc:<issuer>#<subject>",
          ),
      })
      .prefault({})
      .describe("Who may call the A2A endpoints; unauthenticated calls are refused with 401"),
    skills: z
      .array(
        z.object({
          id: z
            .string()
            .min(1)
            .max(256)
            .describe("The skill's id; one equal to a capability's name replaces that capability's skill"),
          name: z.string().min(1).max(256).optional().describe("Human-readable name"),
          description: z.string().min(1).optional().describe("What the skill does"),
          tags: z.array(z.string().min(1)).max(32).default([]).describe("Keywords"),
          examples: z.array(z.string().min(1)).max(32).default([]).describe("Example prompts"),
        }),
      )
      .max(64)
      .default([])
      .describe("Skills of the agent card: by default one per capability; entries here replace or add to them"),
    waitFor: Duration.default("30s").describe(
      "How long a blocking SendMessage waits for the application to bring the task to a terminal or interrupted state before it answers with the task as it stands",
    ),
    peerTokenSecret: z
      .object({
        name: z
          .string()
          .min(1)
          .describe(
            "Secret holding the tokens, one a line: an agent card's URL or an https origin, a space, the token",
          ),
        key: z.string().min(1).default("tokens").describe("Key of the Secret that holds them"),
      })
      .optional()
      .describe(
        "Bearer tokens this agent presents when it sends to A2A agents (to: {a2a: <card URL>}), chosen by the card's URL, else its origin; every request is also signed with the agent's key (RFC 9421). Used whether or not spec.a2a.enabled",
      ),
  })
  .prefault({})
  .describe("The A2A (Agent2Agent v1.0) face of the agent");

export const AgentSpec = z
  .object({
    agentId: AgentId.describe("Stable identifier of the agent (IFP-5)").meta(
      cel({
        rule: "self == oldSelf",
        message: "agentId is the agent's identity and cannot change; create a new Agent",
      }),
    ),
    displayName: z.string().min(1).optional().describe("Human-readable name, published in the identity document"),
    baseUrl: HttpsUrl.optional().describe(
      "Public https base URL advertised in the identity document; defaults to https://<spec.expose host>, else the request's host",
    ),
    capabilities: z
      .array(CapabilitySpec)
      .default([])
      .describe("The capabilities the agent publishes in its capability document"),
    peers: z
      .array(
        KnownAgent.extend({
          url: HttpsUrl.optional().describe("The peer's https base URL, when known"),
          relay: RelayPreference.optional().describe("Relays that reach this peer when it has no https endpoint"),
          encryptionKeys: z
            .array(
              z.object({
                keyId: z
                  .string()
                  .min(1)
                  .max(128)
                  .regex(/^[^#\s]+$/, "must not contain '#' or white space")
                  .describe("The key's key_id, as the peer's identity document names it"),
                publicKey: z
                  .string()
                  .regex(
                    /^[A-Za-z0-9_-]{43}$/,
                    "must be the base64url (no padding) encoding of a raw 32-byte X25519 public key",
                  )
                  .describe("The raw 32-byte X25519 public key, base64url without padding"),
                status: z
                  .enum(["active", "retired", "revoked"])
                  .default("active")
                  .describe("Only active keys are encrypted for"),
              }),
            )
            .max(8)
            .default([])
            .describe(
              "The peer's X25519 encryption keys, exchanged out of band; when empty they are looked up in its identity document",
            ),
          temperature: z
            .enum(["cool", "warm", "hot"])
            .default("cool")
            .describe("Temperature of the relationship, checked against capability conditions"),
        }),
      )
      .default([])
      .describe("Agents this agent knows, with their keys trusted out of band (authentication level 2)"),
    peerSelector: z
      .object({
        agentSelector: LabelSelector.describe(
          "Labels of the Agents to trust ({} selects every Agent of the namespaces below)",
        ),
        namespaceSelector: LabelSelector.optional().describe(
          "Labels of the namespaces they may be in, among those the operator watches ({} all of them); absent: this Agent's own namespace",
        ),
      })
      .optional()
      .describe(
        "Agents of this install to trust as peers without copying their keys: the operator adds each match's agent id, endpoint and current public keys (across rotation) to spec.peers as the runtime reads it; an entry of spec.peers with the same agent id wins",
      ),
    inbox: z
      .object({
        maxMessageBytes: ByteSize({ min: 1024, max: 16 * 1024 * 1024 })
          .prefault(1048576)
          .describe("Largest message body accepted, in bytes or a quantity (1Mi); larger ones are answered 413"),
        maxBytes: ByteSize({ min: 1024 * 1024 })
          .prefault(64 * 1024 * 1024)
          .describe(
            "Most bytes the agent's inbox stream holds, a number or a quantity (64Mi, 1Gi) (messages are kept for the replay window, at least 7 days); when full, new messages are refused with 503 inbox_full and Retry-After. On the per-agent NATS layout JetStream reserves it on every NATS server holding a replica, against the server's store limit (the chart's nats.storage.size), so the store must cover the sum over the install's Agents; on the isolated layout the runtime counts the Agent's stored bytes against it, within its namespace's limit (docs/scale.md) (default 64 MiB)",
          ),
        rateLimit: z
          .object({
            perSenderPerMinute: z
              .number()
              .int()
              .min(1)
              .default(60)
              .describe("Requests per sending agent per minute; more are answered 429"),
            perSenderBytesPerHour: ByteSize({ min: 16 * 1024 })
              .prefault(64 * 1024 * 1024)
              .describe(
                "Bytes (or a quantity: 64Mi) of messages one sender may have accepted per hour (a quota that refills evenly); past it, 429 with Retry-After",
              ),
            perAddressPerMinute: z
              .number()
              .int()
              .min(1)
              .default(1200)
              .describe("Requests per client address per minute, checked before any signature is verified"),
          })
          .prefault({})
          .describe("Rate limits of the inbox"),
        requireSignature: z
          .boolean()
          .default(true)
          .describe("Refuse unsigned messages; false lets them in below every authentication level"),
        replayWindow: Duration.default("48h").describe(
          "Messages are deduplicated for this long and direct ones dated earlier are refused (a relayed one is judged by when its relay accepted it, within the inbox's retention); must cover the senders' 24h retry window",
        ),
        minAuthLevel: z
          .number()
          .int()
          .min(0)
          .max(3)
          .optional()
          .describe(
            "Lowest IFP-5 authentication level accepted (0 introduction token, 1 key found by lookup or a did:key no spec.peers entry names, 2 key from spec.peers, a did:key spec.peers names, or an https agent id's identity document; no key source reaches 3); default 1, or 0 when introductionTokens is set",
          ),
        introductionTokens: z
          .object({
            secretName: z.string().min(1).describe("Secret holding the introduction tokens, one per line"),
            key: z.string().min(1).default("tokens").describe("Key of the Secret that holds them"),
          })
          .optional()
          .describe(
            "Shared introduction tokens (IFP-5 level 0): messages signed hmac-sha256 with one of them are accepted at level 0",
          ),
        sequenceCheck: z
          .enum(["record", "strict"])
          .default("record")
          .describe(
            "IFP-5 4.2 sequence checks: record notes a sequence number a sender reuses for another message of a conversation in the conversation's record; strict refuses that message with 409 sequence_conflict",
          ),
      })
      .prefault({})
      .describe("How the agent's inbox accepts messages"),
    relay: AgentRelay.optional().describe("The agent's own relays, for peers that cannot reach it directly"),
    handler: z
      .object({
        url: HttpUrl.describe("Each accepted message is POSTed here, at least once"),
        timeout: Duration.default("10s").describe("How long one hand-off POST may take"),
        deadLetterAfter: Duration.default("24h").describe("Give up and dead-letter a message after retrying this long"),
      })
      .optional()
      .describe("The application that receives accepted messages; without it they wait in the inbox for the local API"),
    disclosureTiers: z
      .array(z.string().min(1))
      .default(["public", "professional", "personal", "private"])
      .describe("Disclosure tiers from least to most open, to compare against capabilities[].conditions.minDisclosure"),
    localApi: z
      .object({
        port: z
          .number()
          .int()
          .min(1)
          .max(65535)
          .default(8081)
          .describe("Loopback port of the local application API (outbox, dead letters); never exposed by the Service"),
        service: z
          .object({
            enabled: z
              .boolean()
              .default(false)
              .describe(
                "Also serve the local API over HTTPS to applications in other pods, through a ClusterIP Service <name>-local-api, with a bearer token from the Secret <name>-local-api (key token)",
              ),
            port: z
              .number()
              .int()
              .min(1)
              .max(65535)
              .default(9443)
              .describe("Port of that HTTPS listener and of the Service"),
          })
          .refine((s) => s.port !== 8443, {
            message: "port 8443 is the runtime's HTTPS port; choose another",
            path: ["port"],
          })
          .meta(
            cel({
              rule: "self.port != 8443",
              message: "localApi.service.port: 8443 is the runtime's HTTPS port; choose another",
            }),
          )
          .optional()
          .describe("The local API for applications in other pods"),
      })
      .refine((l) => l.service?.port !== l.port, {
        message: "service.port must differ from the loopback port",
        path: ["service", "port"],
      })
      .meta(
        cel({
          rule: "!has(self.service) || !has(self.port) || self.service.port != self.port",
          message: "localApi.service.port must differ from localApi.port",
        }),
      )
      .prefault({})
      .describe("The local application API (send messages, read the inbox and dead letters)"),
    outbound: z
      .object({
        retryFor: Duration.default("24h").describe("Stop retrying an undeliverable message after this long"),
        backoff: z
          .array(Duration)
          .min(1)
          .default(["1m", "5m", "30m", "1h"])
          .describe(
            "Pauses between delivery attempts after a network error or 5xx; the last one repeats (IFP-6 section 7)",
          ),
        resiliency: z
          .object({
            failureThreshold: z
              .number()
              .int()
              .min(1)
              .max(1000)
              .default(5)
              .describe(
                "Consecutive failures of one destination (network errors, timeouts, 5xx; never a 4xx) that open its circuit",
              ),
            coolDown: Duration.default("30s").describe(
              "How long an open circuit makes no attempt to its destination before one probe is let through",
            ),
            maxInFlight: z
              .number()
              .int()
              .min(1)
              .max(1000)
              .default(8)
              .describe("Deliveries in flight to one destination at once; more wait in the outbox"),
            timeout: Duration.default("15s").describe(
              "How long one request to a destination may take before it counts as a failed attempt",
            ),
          })
          .prefault({})
          .describe(
            "Per-destination resiliency (an inbox URL, a relay URL): a circuit breaker, a cap on deliveries in flight, a timeout (docs/reliability.md)",
          ),
      })
      .prefault({})
      .describe("How messages the agent sends are retried"),
    notify: z
      .object({
        url: HttpUrl.describe("Told by POST when a message is dead-lettered or undeliverable"),
      })
      .optional()
      .describe("Where the application is told about messages that could not be delivered"),
    signing: z
      .object({
        keyId: z
          .string()
          .min(1)
          .max(128)
          .regex(/^[^#\s]+$/)
          .default("key-1")
          .describe("Id of the agent's first signing key; keys made by rotation are named <keyId>-r<n>"),
        secretName: z
          .string()
          .min(1)
          .optional()
          .describe(
            "Secret holding the PKCS#8 PEM key under signing.key; default <name>-signing, created by the operator. Another Secret must carry the label ifp.dev/agent: <Agent name>",
          ),
        rotate: z
          .string()
          .min(1)
          .max(63)
          .optional()
          .describe(
            "Set or change this value to have the operator generate a new signing key; the old one turns retired and is still published and used beside the new one for the transition",
          ),
        transition: Duration.default("168h").describe(
          "How long a retired key stays valid (published as retired, still signing) before it is revoked",
        ),
        revoke: z
          .array(z.string().min(1).max(128))
          .max(32)
          .default([])
          .describe(
            "Key ids to revoke now (a compromised key); the active key cannot be revoked before a rotation replaces it",
          ),
      })
      .prefault({})
      .describe(
        "The agent's Ed25519 signing keys; the operator generates the first into the Secret <name>-signing unless secretName is given, and rotates on request",
      ),
    encryption: z
      .object({
        mode: z
          .enum(["auto", "required", "always", "never"])
          .default("auto")
          .describe(
            "When outbound message bodies are encrypted end to end (docs/encryption.md): auto when a recipient is reached only through a relay not marked trusted or self-operated and offers an encryption key (in the clear, and marked so in the delivery record, when it offers none); required as auto, but a message that cannot be encrypted is refused and never goes in the clear through such a relay; always for every message; never",
          ),
        requireThroughRelays: z
          .boolean()
          .default(false)
          .describe(
            "Refuse plaintext messages read from a relay not marked trusted or self-operated, answering them with an error-phase message",
          ),
        relayTrust: z
          .array(
            z.object({
              url: HttpsUrl.describe("The relay's base URL, as it appears in spec.relay.urls or in a peer's relays"),
              level: z
                .enum(["untrusted", "trusted", "self-operated"])
                .describe(
                  "Relay trust level (spec 5.5): untrusted may log or leak content; trusted is run by a known party; self-operated by one of the communicating parties",
                ),
            }),
          )
          .max(64)
          .default([])
          .describe("Trust levels of relays; a relay not listed is untrusted"),
      })
      .prefault({})
      .describe("End-to-end encryption of message bodies for untrusted relays"),
    tls: TlsSpec.optional().describe("The runtime's serving certificate and the extra CAs it trusts"),
    deployment: DeploymentSettings.optional(),
    logLevel: LogLevel.optional().describe(
      "Log level of the runtime's JSON logs (default info); debug adds a line per message, naming it and never its body",
    ),
    expose: ExposeSpec.optional().describe("How the agent is reached from outside the cluster"),
    durability: z
      .object({
        replicas: z
          .literal([1, 3, 5])
          .optional()
          .describe(
            "JetStream replicas of the agent's inbox and outbox streams; unset: 3 on a NATS cluster with the servers for them, else 1",
          ),
      })
      .prefault({})
      .describe("How the agent's messages are stored (file storage; see docs/reliability.md for the fsync guarantee)"),
    network: NetworkSpec.prefault({}).describe(
      "Where the agent's outbound requests to peers and relays may go (spec 5.2: https only; special addresses only when allowed)",
    ),
    a2a: A2aSpec,
    runtime: z
      .object({
        workers: z
          .any()
          .refine(
            (v) => v === "auto" || (typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 64),
            'must be a whole number from 1 to 64 or "auto"',
          )
          .meta({
            "x-kubernetes-int-or-string": true,
            pattern: "^auto$",
            "x-kubernetes-validations": [
              {
                rule: "type(self) == string || (self >= 1 && self <= 64)",
                message: 'must be a whole number from 1 to 64 or "auto"',
              },
            ],
          })
          .optional()
          .describe(
            "Event loops serving the agent's HTTPS port in each pod, each with its own NATS connection, sharing the inbox's and the A2A face's rate limits, the identity-lookup budget and the A2A signatures' nonces (docs/scale.md#more-than-one-core); \"auto\" is the container's CPU limit (spec.deployment.resources), 1 without one; unset: 1. Each loop beside the first adds 64Mi to the default memory request and 128Mi to its limit, and each loop's heap bound is its share of the memory limit",
          ),
      })
      .optional()
      .describe("How the runtime process uses its pod's CPUs"),
    replicas: z
      .number()
      .int()
      .min(0)
      .max(100)
      .default(1)
      .describe("Runtime pods of the agent; the scale subresource sets it (kubectl scale, a HorizontalPodAutoscaler)"),
    image: z
      .string()
      .min(1)
      .optional()
      .describe("The runtime's container image; defaults to the operator's runtime image"),
    disruption: DisruptionSpec.prefault({}),
    retention: z
      .object({
        keepOnDelete: z
          .boolean()
          .default(false)
          .describe(
            "Keep the agent's JetStream streams (inbox, outbox and their consumers) and KV buckets when the Agent is deleted; by default the operator deletes them before it lets the Agent go",
          ),
      })
      .prefault({})
      .describe("What happens to the agent's stored messages and state when the Agent is deleted"),
  })
  .describe("The desired state of the agent: its identity, capabilities, peers, inbox and how its runtime is deployed");
export type AgentSpec = z.infer<typeof AgentSpec>;
export type AgentSpecInput = z.input<typeof AgentSpec>;

export const Agent = resource("Agent", AgentSpec);
export type Agent = z.infer<typeof Agent>;
