// The capability set as published, and its hash: the runtime serves the list and moves
// `updated` when the hash changes; the operator reports the hash in status.capabilitiesHash.
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import type { CapabilityDocument } from "../protocol/documents.ts";
import type { Agent } from "../resources/agent.ts";

/** The capabilities exactly as published, from the Agent spec. */
export function capabilityList(agent: Pick<Agent, "spec">): CapabilityDocument["capabilities"] {
  return agent.spec.capabilities.map((c) => ({
    name: c.name,
    version: c.version,
    description: c.description,
    ...(c.parameters ? { parameters: c.parameters } : {}),
    ...(c.conditions && Object.keys(c.conditions).length ? { conditions: c.conditions } : {}),
  }));
}

/** Hash of the capability set (SHA-256 of its canonical JSON), the thing whose change moves `updated`. */
export function capabilitiesHash(agent: Pick<Agent, "spec">): string {
  return createHash("sha256").update(canonicalize(capabilityList(agent)) ?? "").digest("hex");
}
