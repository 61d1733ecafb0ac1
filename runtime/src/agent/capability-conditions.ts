// Pure: the capability conditions (spec 2.2, rule 7.2.2) a message's requested capabilities do
// not meet — authentication level, disclosure tier, temperature — and their description.
import type { Message } from "../protocol/message.ts";
import type { AgentSpec } from "../resources/agent.ts";

const TEMPERATURES = ["cool", "warm", "hot"] as const;

export interface ConditionMismatch {
  capability: string;
  condition: "min_auth_level" | "min_disclosure" | "temperature";
  required: string | number;
  actual: string | number | null;
}

/**
 * Capability conditions (spec 2.2, rule 7.2.2) for the capabilities a message requests in
 * headers.capabilities.request. Authentication level is what verification established;
 * disclosure is the message's headers.disclosure, ordered by spec.disclosureTiers (unknown
 * tiers only match themselves); temperature is the relationship's, from spec.peers[].
 * A mismatch names its condition as the capability document does (min_auth_level, min_disclosure).
 */
export function unmetConditions(message: Message, authLevel: number, spec: AgentSpec): ConditionMismatch[] {
  const requested = message.headers.capabilities?.request ?? [];
  if (!requested.length) return [];
  const peer = spec.peers.find((p) => p.agentId === message.headers.from.agent);
  const temperature = peer?.temperature ?? "cool";
  const disclosure = message.headers.disclosure ?? null;
  const out: ConditionMismatch[] = [];
  for (const name of requested) {
    const cap = spec.capabilities.find((c) => c.name === name);
    const c = cap?.conditions;
    if (!c) continue;
    if (c.minAuthLevel !== undefined && authLevel < c.minAuthLevel) {
      out.push({ capability: name, condition: "min_auth_level", required: c.minAuthLevel, actual: authLevel });
    }
    if (c.minDisclosure !== undefined && !disclosureMeets(disclosure, c.minDisclosure, spec.disclosureTiers)) {
      out.push({ capability: name, condition: "min_disclosure", required: c.minDisclosure, actual: disclosure });
    }
    if (c.temperature !== undefined && TEMPERATURES.indexOf(temperature) < TEMPERATURES.indexOf(c.temperature)) {
      out.push({ capability: name, condition: "temperature", required: c.temperature, actual: temperature });
    }
  }
  return out;
}

function disclosureMeets(actual: string | null, required: string, tiers: string[]): boolean {
  if (actual === null) return false;
  if (actual === required) return true;
  const a = tiers.indexOf(actual);
  const r = tiers.indexOf(required);
  return a >= 0 && r >= 0 && a >= r;
}

export function describeMismatches(m: ConditionMismatch[]): string {
  return m
    .map(
      (x) =>
        `${x.capability} needs ${x.condition} ${JSON.stringify(x.required)} but this conversation has ${JSON.stringify(x.actual)}`,
    )
    .join("; ");
}
