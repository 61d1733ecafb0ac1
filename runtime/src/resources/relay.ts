// The Relay custom resource as a zod schema (retention, delivery, publishers, limits and the rest
// of its spec, with defaults), shared by the relay runtime, the operator and the CRD generator.
import { z } from "zod";
import {
  ByteSize,
  cel,
  DeploymentSettings,
  Duration,
  LogLevel,
  ExposeSpec,
  NetworkSpec,
  HttpsUrl,
  KnownAgent,
  resource,
  TlsSpec,
} from "./common.ts";
import { DisruptionSpec } from "./disruption.ts";

export const RelayRetention = z
  .object({
    maxAge: Duration.default("168h").describe(
      "How long a message is kept when nobody acknowledges it (default 7 days)",
    ),
    maxBytes: ByteSize({ min: 0, none: true })
      .prefault(1024 * 1024 * 1024)
      .describe(
        "Stream size limit in bytes or a quantity (1Gi, 500M; default 1 GiB), -1 for none; when full, publish answers 503 relay_full",
      ),
    maxMessages: z.number().int().min(-1).default(-1).describe("Message count limit, -1 for none"),
    storage: z
      .enum(["file", "memory"])
      .default("file")
      .describe(
        "JetStream storage of the relay's stream: file survives a NATS restart, memory does not; cannot change in place",
      ),
    replicas: z.literal([1, 3, 5]).default(1).describe("Copies of the stream on a clustered JetStream: 1, 3 or 5"),
    duplicateWindow: Duration.default("48h").describe(
      "A message_id is stored once per recipient within this window (at most maxAge)",
    ),
    deleteOnRemoval: z.boolean().default(false).describe("Delete the JetStream stream when the Relay is deleted"),
  })
  .meta(
    cel({
      rule: "!has(oldSelf.storage) || self.storage == oldSelf.storage",
      message: "retention.storage cannot change in place; create a new Relay",
    }),
  );

export const RelayDelivery = z.object({
  retries: z
    .number()
    .int()
    .min(0)
    .max(1000)
    .default(10)
    .describe("Webhook delivery attempts after the first before a message is dead-lettered"),
  backoff: z.enum(["exponential", "linear"]).default("exponential").describe("How the pause between attempts grows"),
  backoffDelay: Duration.default("1s").describe("The first pause between attempts"),
  timeout: Duration.default("10s").describe("How long one webhook POST may take"),
  concurrency: z.number().int().min(1).max(64).default(4).describe("Webhook POSTs in flight per agent"),
  deadLetter: z
    .object({
      maxAge: Duration.default("168h").describe("How long dead letters are kept"),
    })
    .prefault({})
    .describe("Messages whose delivery was given up"),
});

/** A host of an https agent id: `example.com` is that host, `*.example.com` any host below it. */
const DomainPattern = z
  .string()
  .max(253)
  .regex(
    /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/,
    "a lower-case host name, or *. and a host name",
  );

export const RelaySenderSet = z.object({
  agentIds: z
    .array(z.string().min(1).max(2048))
    .max(1000)
    .default([])
    .describe("Agent ids exactly as they sign (an https agent id or a did:key)"),
  domains: z
    .array(DomainPattern)
    .max(1000)
    .default([])
    .describe("Hosts of https agent ids: example.com is that host, *.example.com any host below it"),
});

export const RelayPublishers = z
  .object({
    policy: z
      .enum(["registered", "verified", "selector"])
      .default("verified")
      .describe(
        "Who besides spec.agents may publish to them: registered (nobody), verified (any sender whose key is found by lookup, the default), selector (those spec.publishers.allow names)",
      ),
    allow: RelaySenderSet.prefault({}).describe(
      "With policy selector: the senders besides spec.agents that may publish",
    ),
    deny: RelaySenderSet.prefault({}).describe(
      "Senders never let in whatever the policy (spec.agents are not affected)",
    ),
    minAuthLevel: z
      .literal([1, 2])
      .default(1)
      .describe(
        "The least authentication level of a sender's key: 1 takes a did:key, 2 only an https agent id with its identity document over verified TLS",
      ),
    topics: z
      .boolean()
      .default(false)
      .describe(
        "Whether senders not in spec.agents may publish to topics (default: only to the agents the relay serves)",
      ),
    limits: z
      .object({
        perSenderPerMinute: z
          .number()
          .int()
          .min(1)
          .default(60)
          .describe("Requests per minute of one sender not in spec.agents (a batch of n messages counts n)"),
        perSenderBytesPerHour: ByteSize({ min: 16 * 1024 })
          .prefault(16 * 1024 * 1024)
          .describe("Bytes (or a quantity: 16Mi) one such sender may have stored per hour, each copy counted"),
        perSenderStored: z
          .number()
          .int()
          .min(1)
          .default(1000)
          .describe(
            "Copies one such sender may have stored within retention.maxAge (so never more waiting at once); past it, 429 with Retry-After",
          ),
        perRecipientPerMinute: z
          .number()
          .int()
          .min(1)
          .default(300)
          .describe("Messages per minute to one served agent from all senders not in spec.agents together"),
        perRecipientBytesPerHour: ByteSize({ min: 16 * 1024 })
          .prefault(64 * 1024 * 1024)
          .describe(
            "Bytes (or a quantity: 64Mi) per hour stored for one served agent by all senders not in spec.agents together",
          ),
        perNetworkPerMinute: z
          .number()
          .int()
          .min(1)
          .default(120)
          .describe(
            "Messages per minute from all senders not in spec.agents at one client network together (an IPv4 address, an IPv6 /64; a batch of n counts n), so that fresh keys do not multiply a sender's budget",
          ),
        totalPerMinute: z
          .number()
          .int()
          .min(1)
          .default(1200)
          .describe("Messages per minute from all senders not in spec.agents together (a batch of n counts n)"),
        streamShare: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(50)
          .describe(
            "Percent of the stream (retention.maxBytes, retention.maxMessages) below which senders not in spec.agents may store copies, as JetStream counts the stream; the rest is kept for the agents the relay serves. Past it, 429 with Retry-After; 100 keeps no room (a full relay answers 503 relay_full)",
          ),
        lookupsPerMinute: z
          .number()
          .int()
          .min(1)
          .default(120)
          .describe("Identity document lookups of senders never seen before, per minute, whatever their address"),
      })
      .prefault({})
      .describe(
        "Quotas on senders not in spec.agents, each replica's own but streamShare, which every replica reads from the stream; past them, 429 with Retry-After",
      ),
  })
  .describe(
    "Who may publish to the agents the relay serves besides those agents themselves; reading, acknowledging and subscribing stay theirs alone",
  );

export const RelaySpec = z
  .object({
    url: HttpsUrl.describe("The relay's public base URL, used in trace entries"),
    retention: RelayRetention.prefault({}).describe("How long and how much the relay's JetStream stream keeps"),
    agents: z
      .array(KnownAgent)
      .default([])
      .describe("The agents the relay holds mail for, with their keys trusted out of band"),
    publishers: RelayPublishers.prefault({}).describe(
      "Who else may deliver to the agents the relay serves, and the quotas they are held to",
    ),
    delivery: RelayDelivery.prefault({}).describe("Delivery to agents' webhooks"),
    limits: z
      .object({
        maxMessageBytes: ByteSize({ min: 1024, max: 16 * 1024 * 1024 })
          .prefault(1048576)
          .describe("Largest message accepted, in bytes or a quantity (1Mi); larger ones are answered 413"),
        perAgentPerMinute: z.number().int().min(1).default(600).describe("Requests per minute of one agent"),
        perAgentBytesPerHour: ByteSize({ min: 16 * 1024 })
          .prefault(256 * 1024 * 1024)
          .describe(
            "Bytes (or a quantity: 256Mi) one agent may have stored per hour by its publishes, each copy counted (a message to a topic with 10 subscribers counts 10 times); past it, 429 with Retry-After",
          ),
        maxStreamsPerAgent: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(4)
          .describe(
            "Event streams (GET /relay/events and WebSockets together) one agent may hold open on each replica; past it, 429 with Retry-After",
          ),
        maxStreams: z
          .number()
          .int()
          .min(1)
          .max(100000)
          .default(1000)
          .describe("Event streams all agents together may hold open on each replica; past it, 503 with Retry-After"),
        perAddressPerMinute: z
          .number()
          .int()
          .min(1)
          .default(6000)
          .describe("Requests per minute from one client address, checked before the costly signature verification"),
      })
      .prefault({})
      .describe("Limits on what the relay accepts"),
    tls: TlsSpec.optional().describe("The runtime's serving certificate and the extra CAs it trusts"),
    deployment: DeploymentSettings.optional(),
    logLevel: LogLevel.optional().describe(
      "Log level of the runtime's JSON logs (default info); debug adds a line per message, naming it and never its body",
    ),
    expose: ExposeSpec.optional().describe("How the relay is reached from outside the cluster"),
    network: NetworkSpec.prefault({}).describe(
      "Where the relay's webhook pushes may go (https only; special addresses only when allowed)",
    ),
    replicas: z.number().int().min(0).max(100).default(1).describe("Runtime pods of the relay"),
    disruption: DisruptionSpec.prefault({}),
    image: z
      .string()
      .min(1)
      .optional()
      .describe("The runtime's container image; defaults to the operator's runtime image"),
  })
  .describe(
    "The desired state of the relay: its URL, the agents it serves, its stream's retention and delivery, and how its runtime is deployed",
  );
export type RelaySpec = z.infer<typeof RelaySpec>;
export type RelaySpecInput = z.input<typeof RelaySpec>;

export const Relay = resource("Relay", RelaySpec);
export type Relay = z.infer<typeof Relay>;
