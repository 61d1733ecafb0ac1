// The types of `ifp check`: the groups of checks, the levels of rules, a check's result, the
// report, and the context every group runs in.
import type { SigningKey } from "../protocol/signing.ts";
import type { Probe } from "./probe.ts";
import type { TestInbox } from "./test-inbox.ts";

/** The groups of checks; `--only` picks one. */
export const AGENT_GROUPS = ["discovery", "tls", "inbox", "send"] as const;
export const RELAY_GROUPS = ["tls", "relay"] as const;
export type Group = (typeof AGENT_GROUPS)[number] | (typeof RELAY_GROUPS)[number];

export type Outcome = "pass" | "fail" | "skip";

/**
 * How binding the rule a check holds the target to is: the specification's MUST (a miss fails
 * the run), SHOULD (a miss fails only with --strict), MAY (an optional feature: a miss never
 * fails the run), or "profile": this project's own choice where the specification is silent
 * (its request-signing scheme, relay API, signing input), which another implementation need
 * not share (a miss fails only with --profile).
 */
export type Level = "MUST" | "SHOULD" | "MAY" | "profile";
export const LEVELS: readonly Level[] = ["MUST", "SHOULD", "MAY", "profile"];

/** One check's verdict: an id such as `inbox.accepted`, the rule's section and level, and why. */
export interface CheckResult {
  id: string;
  /** Where the rule comes from: a section of discovery-and-transport.md, an IFP draft, an RFC, or a docs/ page for the profile. */
  section: string;
  level: Level;
  result: Outcome;
  reason: string;
}

export type Tally = Record<Outcome, number>;

export interface Report {
  target: string;
  kind: "agent" | "relay";
  /** HTTP requests and TLS connections the run made to the target. */
  requests: number;
  results: CheckResult[];
  /** Totals over every check, and per level. */
  summary: Tally & { levels: Record<Level, Tally> };
}

/** How the kit can make the target send, and the kit's own HTTPS inbox that receives what it sends. */
export interface SendSetup {
  inbox: TestInbox;
  /** The target's local application API (POST /outbox), when given. */
  localApi?: { url: string; token?: string };
  /** How long to wait for the target's deliveries and retries, in ms. */
  waitMs: number;
}

/** What every group gets: the target, the bounded prober, the optional trusted key, and where to put results. */
export interface CheckContext {
  /** https base URL, no trailing slash. */
  base: string;
  probe: Probe;
  /** A key the target trusts (`--key` and `--from`), or undefined. */
  key?: SigningKey;
  /** The relay's own URL, which its trace entries name (the target URL unless --relay-url says otherwise). */
  relayUrl: string;
  /** A second key the relay serves (`--peer-key`), for topics; or undefined. */
  peerKey?: SigningKey;
  /** The kit's inbox and a way to make the target send, when set up. */
  send?: SendSetup;
  record(id: string, result: Outcome, reason: string): void;
  /** Whether a check has a verdict already. */
  has(id: string): boolean;
  /** What discovery learned, for later groups. */
  learned: {
    agentId?: string;
    maxMessageBytes?: number;
    identity?: { agent_id: string; keys: { key_id: string; type: string; public_key: string; status?: string }[] };
    capabilities?: { capabilities: { name: string; conditions?: Record<string, unknown> }[] };
  };
  /** Error answers the run saw, for the error-body and error-code checks: the check, the answer, the standard code IFP-6 names for the case. */
  errors: { id: string; status: number; text: string; code?: readonly string[] }[];
}

export const NEEDS_KEY = "skipped (needs --key and --from: a key the target trusts)";
