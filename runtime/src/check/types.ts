import type { SigningKey } from "../protocol/signing.ts";
import type { Probe } from "./probe.ts";

/** The groups of checks; `--only` picks one. */
export const AGENT_GROUPS = ["discovery", "tls", "inbox"] as const;
export const RELAY_GROUPS = ["tls", "relay"] as const;
export type Group = (typeof AGENT_GROUPS)[number] | (typeof RELAY_GROUPS)[number];

export type Outcome = "pass" | "fail" | "skip";

/** One check's verdict: an id such as `discovery.capabilities.etag`, where the rule comes from, and why. */
export interface CheckResult {
  id: string;
  spec: string;
  result: Outcome;
  reason: string;
}

export interface Report {
  target: string;
  kind: "agent" | "relay";
  /** HTTP requests and TLS connections the run made. */
  requests: number;
  results: CheckResult[];
  summary: Record<Outcome, number>;
}

/** What every group gets: the target, the bounded prober, the optional trusted key, and where to put results. */
export interface CheckContext {
  /** https base URL, no trailing slash. */
  base: string;
  probe: Probe;
  /** A key the target trusts (`--key` and `--from`), or undefined. */
  key?: SigningKey;
  record(id: string, spec: string, result: Outcome, reason: string): void;
  /** Whether a check has a verdict already. */
  has(id: string): boolean;
  /** What discovery learned, for later groups. */
  learned: { agentId?: string; maxMessageBytes?: number };
}

export const NEEDS_KEY = "skipped (needs --key and --from: a key the target trusts)";
