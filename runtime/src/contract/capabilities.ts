// The capability set as published, and its hash: the runtime serves the list and moves
// `updated` when the hash changes; the operator reports the hash in status.capabilitiesHash.
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import type { Capability, CapabilityDocument } from "../protocol/documents.ts";
import type { Agent, CapabilityConditions } from "../resources/agent.ts";

/**
 * The capabilities exactly as published, from the Agent spec. The Agent's fields are camelCase;
 * the document keeps the spec's names (min_disclosure, min_auth_level), mapped here.
 */
export function capabilityList(agent: Pick<Agent, "spec">): CapabilityDocument["capabilities"] {
  return agent.spec.capabilities.map((c) => {
    const conditions = documentConditions(c.conditions);
    return {
      name: c.name,
      version: c.version,
      description: c.description,
      ...(c.parameters ? { parameters: c.parameters } : {}),
      ...(conditions ? { conditions } : {}),
    };
  });
}

/** An Agent's capability conditions in the capability document's names; undefined when none is set. */
export function documentConditions(
  c: CapabilityConditions | undefined,
): NonNullable<Capability["conditions"]> | undefined {
  if (!c) return undefined;
  const out: NonNullable<Capability["conditions"]> = {
    ...(c.minDisclosure !== undefined ? { min_disclosure: c.minDisclosure } : {}),
    ...(c.minAuthLevel !== undefined ? { min_auth_level: c.minAuthLevel } : {}),
    ...(c.temperature !== undefined ? { temperature: c.temperature } : {}),
  };
  return Object.keys(out).length ? out : undefined;
}

/** Hash of the capability set (SHA-256 of its canonical JSON), the thing whose change moves `updated`. */
export function capabilitiesHash(agent: Pick<Agent, "spec">): string {
  return createHash("sha256")
    .update(canonicalize(capabilityList(agent)) ?? "")
    .digest("hex");
}
