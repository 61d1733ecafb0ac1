// The field types the Agent and Relay resources share: URLs, Go-style durations, Ed25519 keys and
// the agents known by them, label selectors, agent ids, log levels, quantities and byte sizes.
import { z } from "zod";
import { bytesOf, bytesQuantity } from "./quantity.ts";
import { cel } from "./schema.ts";

const DURATION_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION_RE = /^(\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/;
const DURATION_PART_RE = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;

/**
 * An https URL. zod's protocol check becomes only `format: uri` in the JSON schema; the
 * scheme is checked by CEL.
 */
export const HttpsUrl = z
  .url({ protocol: /^https$/ })
  .meta(cel({ rule: "self.startsWith('https://')", message: "must be an https:// URL" }));

/** An http or https URL (the agent's own handler and notification endpoints). */
export const HttpUrl = z.url({ protocol: /^https?$/ }).meta(
  cel({
    rule: "self.startsWith('https://') || self.startsWith('http://')",
    message: "must be an http:// or https:// URL",
  }),
);

/** Milliseconds of a Go-style duration string ("168h", "1m30s", "250ms"), the form Kubernetes and CEL use. */
export function parseDuration(text: string): number {
  if (!DURATION_RE.test(text))
    throw new Error(`invalid duration ${JSON.stringify(text)} (use forms like 30s, 5m, 168h)`);
  let ms = 0;
  for (const [, value, unit] of text.matchAll(DURATION_PART_RE)) ms += Number(value) * DURATION_UNITS[unit!]!;
  return ms;
}

/** A Go-style duration string, e.g. `168h` or `1m30s`. */
export const Duration = z.string().regex(DURATION_RE, "must be a duration such as 30s, 5m or 168h");

/** base64url (no padding) of a raw 32-byte Ed25519 public key. */
export const Ed25519PublicKey = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/, "must be the base64url (no padding) encoding of a raw 32-byte Ed25519 public key");

export const TrustedKey = z.object({
  keyId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[^#\s]+$/, "must not contain '#' or white space")
    .describe("The key's id, as the agent's signatures name it"),
  publicKey: Ed25519PublicKey.describe("base64url (no padding) of the raw 32-byte Ed25519 public key"),
  status: z
    .enum(["active", "retired", "revoked"])
    .default("active")
    .describe("active and retired keys are accepted; revoked keys are refused"),
});
export type TrustedKey = z.infer<typeof TrustedKey>;

/** A Kubernetes label selector (metav1.LabelSelector): every matchLabels pair and every expression must hold. */
export const LabelSelector = z.object({
  matchLabels: z
    .record(z.string().max(317), z.string().max(63))
    .optional()
    .describe("Labels that must be present with these values"),
  matchExpressions: z
    .array(
      z.object({
        key: z.string().min(1).max(317).describe("The label's key"),
        operator: z.enum(["In", "NotIn", "Exists", "DoesNotExist"]).describe("In, NotIn, Exists or DoesNotExist"),
        values: z.array(z.string().max(63)).max(64).optional().describe("The values for In and NotIn"),
      }),
    )
    .max(16)
    .optional()
    .describe("Expressions on labels, all of which must hold"),
});
export type LabelSelector = z.infer<typeof LabelSelector>;

/** Whether `labels` satisfy `selector` ({} selects everything). */
export function selectorMatches(selector: LabelSelector, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(l, e.key);
    const inValues = has && (e.values ?? []).includes(l[e.key]!);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

export const AgentId = z.string().min(1).max(512).regex(/^\S+$/, "must not contain white space");

/** spec.logLevel: the runtime's log level (its IFP_LOG_LEVEL). */
export const LogLevel = z
  .enum(["fatal", "error", "warn", "info", "debug", "trace"])
  .describe(
    "Log level of the runtime's JSON logs (default info); debug adds a line per message, naming it and never its body",
  );

/** A resource quantity ("500m", "1.5Gi", 2): a string or a whole number, as in Kubernetes' own CRDs. */
export const QUANTITY_RE = /^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(\d+(\.\d*)?|\.\d+)))?$/;
export const Quantity = z
  .any()
  .refine(
    (v) => (typeof v === "string" && QUANTITY_RE.test(v)) || (typeof v === "number" && Number.isInteger(v)),
    "must be a quantity such as 500m, 128Mi or 2 (a string, or a whole number)",
  )
  .meta({ "x-kubernetes-int-or-string": true, pattern: QUANTITY_RE.source });
/** The most bytes a size field takes where no smaller bound applies: 1 PiB, inside a safe integer and an int64. */
export const MAX_BYTE_SIZE = 2 ** 50;
/**
 * A size written as a string: a whole number with a binary (Ki, Mi, Gi, Ti, Pi, Ei) or decimal
 * (k, M, G, T, P, E) suffix or a positive exponent, as a Kubernetes quantity writes them ("64Mi",
 * "500k", "2e6"; "1.5Mi" is written 1536Ki). No backslash, so that CEL and the API server read
 * the same pattern.
 */
export const BYTE_SIZE_RE = /^[0-9]+([KMGTPE]i|[kMGTPE]|[eE][+]?[0-9]+)?$/;
const BYTE_SIZE_MAX_LENGTH = 32;

/**
 * A size in bytes: a whole number (67108864) or a quantity ("64Mi", "1Gi", "500k", "2M"), from
 * `min` to `max` bytes, or -1 where `none` allows it. The API server refuses anything else at
 * apply (int-or-string, the pattern and a CEL rule, which also refuses fractions of a byte and
 * what overflows an int64); the parse gives bytes (quantity.ts bytesOf), so everything past it
 * (flags, the manifest, stream configs, account limits, status) sees a number. Give its default
 * with `.prefault()`, which the CRD shows (a `.default()` after a transform is not in it).
 */
export function ByteSize({ min, max = MAX_BYTE_SIZE, none = false }: { min: number; max?: number; none?: boolean }) {
  const message = `must be a whole number of bytes, or one with a binary (Ki, Mi, Gi, …) or decimal (k, M, G, …) suffix, from ${bytesQuantity(min)} to ${bytesQuantity(max)}${none ? ", or -1 for none" : ""}`;
  const inRange = (v: string) => `${v} >= ${min} && ${v} <= ${max}`;
  const rule = `type(self) == int ? (${inRange("self")}${none ? " || self == -1" : ""}) : (isQuantity(self) && quantity(self).isInteger() && ${inRange("quantity(self).asInteger()")})`;
  return z
    .any()
    .transform((v, ctx) => {
      if (none && v === -1) return -1;
      const bytes = typeof v === "number" || (typeof v === "string" && BYTE_SIZE_RE.test(v)) ? bytesOf(v) : undefined;
      if (bytes !== undefined && bytes >= min && bytes <= max) return bytes;
      ctx.addIssue({ code: "custom", message, input: v });
      return z.NEVER;
    })
    .meta({
      "x-kubernetes-int-or-string": true,
      pattern: BYTE_SIZE_RE.source,
      maxLength: BYTE_SIZE_MAX_LENGTH,
      ...cel({ rule, message }),
    });
}

/** The agents a relay serves or an agent trusts, with keys trusted out of band. */
export const KnownAgent = z.object({
  agentId: AgentId.describe("The agent's IFP-5 identifier"),
  keys: z.array(TrustedKey).min(1).describe("The agent's public signing keys"),
});
