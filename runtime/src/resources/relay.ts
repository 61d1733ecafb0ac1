import { z } from "zod";
import { cel, DeploymentSettings, Duration, LogLevel, ExposeSpec, NetworkSpec, HttpsUrl, KnownAgent, resource, TlsSpec } from "./common.ts";

export const RelayRetention = z.object({
  maxAge: Duration.default("168h").describe("How long a message is kept when nobody acknowledges it (default 7 days)"),
  maxBytes: z.number().int().min(-1).default(1024 * 1024 * 1024).describe("Stream size limit in bytes (default 1 GiB), -1 for none; when full, publish answers 503 relay_full"),
  maxMessages: z.number().int().min(-1).default(-1).describe("Message count limit, -1 for none"),
  storage: z.enum(["file", "memory"]).default("file").describe("JetStream storage of the relay's stream: file survives a NATS restart, memory does not; cannot change in place"),
  replicas: z.literal([1, 3, 5]).default(1).describe("Copies of the stream on a clustered JetStream: 1, 3 or 5"),
  duplicateWindow: Duration.default("48h").describe("A message_id is stored once per recipient within this window (at most maxAge)"),
  deleteOnRemoval: z.boolean().default(false).describe("Delete the JetStream stream when the Relay is deleted"),
}).meta(cel({ rule: "!has(oldSelf.storage) || self.storage == oldSelf.storage", message: "retention.storage cannot change in place; create a new Relay" }));

export const RelayDelivery = z.object({
  retries: z.number().int().min(0).max(1000).default(10).describe("Webhook delivery attempts after the first before a message is dead-lettered"),
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

export const RelaySpec = z.object({
  url: HttpsUrl.describe("The relay's public base URL, used in trace entries"),
  retention: RelayRetention.prefault({}).describe("How long and how much the relay's JetStream stream keeps"),
  agents: z.array(KnownAgent).default([]).describe("The agents the relay holds mail for, with their keys trusted out of band"),
  delivery: RelayDelivery.prefault({}).describe("Delivery to agents' webhooks"),
  limits: z
    .object({
      maxMessageBytes: z.number().int().min(1024).max(16 * 1024 * 1024).default(1048576).describe("Largest message accepted, in bytes; larger ones are answered 413"),
      perAgentPerMinute: z.number().int().min(1).default(600).describe("Requests per minute of one agent"),
      perAgentBytesPerHour: z
        .number()
        .int()
        .min(16 * 1024)
        .default(256 * 1024 * 1024)
        .describe("Bytes one agent may have stored per hour by its publishes, each copy counted (a message to a topic with 10 subscribers counts 10 times); past it, 429 with Retry-After"),
      maxStreamsPerAgent: z
        .number()
        .int()
        .min(1)
        .max(100)
        .default(4)
        .describe("Event streams (GET /relay/events and WebSockets together) one agent may hold open on each replica; past it, 429 with Retry-After"),
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
  logLevel: LogLevel.optional().describe("Log level of the runtime's JSON logs (default info); debug adds a line per message, naming it and never its body"),
  expose: ExposeSpec.optional().describe("How the relay is reached from outside the cluster"),
  network: NetworkSpec.prefault({}).describe("Where the relay's webhook pushes may go (https only; special addresses only when allowed)"),
  replicas: z.number().int().min(0).max(100).default(1).describe("Runtime pods of the relay"),
  image: z.string().min(1).optional().describe("The runtime's container image; defaults to the operator's runtime image"),
}).describe("The desired state of the relay: its URL, the agents it serves, its stream's retention and delivery, and how its runtime is deployed");
export type RelaySpec = z.infer<typeof RelaySpec>;
export type RelaySpecInput = z.input<typeof RelaySpec>;

export const Relay = resource("Relay", RelaySpec);
export type Relay = z.infer<typeof Relay>;
