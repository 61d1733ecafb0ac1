// The schemas of the capability document (spec 2.4) and the identity document (IFP-5 1.2) as
// they are read and served, and their ETags.
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";
import { z } from "zod";

/** Capability (spec 2.1), as it appears in documents: unknown fields kept, unknown names ignored. */
export const Capability = z.looseObject({
  name: z.string().min(1),
  version: z.string().default("1"),
  description: z.string(),
  parameters: z.record(z.string(), z.unknown()).optional(),
  conditions: z
    .looseObject({
      min_disclosure: z.string().optional(),
      min_auth_level: z.number().int().optional(),
      temperature: z.enum(["cool", "warm", "hot"]).optional(),
    })
    .optional(),
});
export type Capability = z.infer<typeof Capability>;

export const RelayPreferenceDoc = z.looseObject({
  urls: z.array(z.string()),
  preference: z.string().optional(),
});

/** Capability document (spec 2.4). In a greeting part agent_id and updated may be absent. */
export const CapabilityDocument = z.looseObject({
  ifp: z.literal(7),
  agent_id: z.string().min(1).optional(),
  capabilities: z.array(Capability),
  ifp_support: z.array(z.number().int()).optional(),
  updated: z.iso.datetime({ offset: true }).optional(),
  relay: RelayPreferenceDoc.optional(),
});
export type CapabilityDocument = z.infer<typeof CapabilityDocument>;

export const IdentityKey = z.looseObject({
  key_id: z.string().min(1),
  type: z.string(),
  public_key: z.string(),
  /** "encryption" for an X25519 key that encrypts message bodies (docs/encryption.md); absent for signing keys. */
  use: z.string().optional(),
  created: z.string().optional(),
  status: z.enum(["active", "retired", "revoked"]).default("active"),
});

/** Identity document (IFP-5 1.2). */
export const IdentityDocument = z.looseObject({
  ifp: z.literal(5),
  agent_id: z.string().min(1),
  display: z.string().optional(),
  keys: z.array(IdentityKey),
  endpoints: z.record(z.string(), z.string()).optional(),
  relay: RelayPreferenceDoc.optional(),
});
export type IdentityDocument = z.infer<typeof IdentityDocument>;

/** A strong ETag over the document's canonical JSON, so equal documents share a tag across replicas. */
export function etagOf(doc: unknown): string {
  return `"${createHash("sha256")
    .update(canonicalize(doc) ?? "")
    .digest("base64url")
    .slice(0, 32)}"`;
}

/** Whether an If-None-Match header matches the ETag (weak comparison, as RFC 9110 wants for GET). */
export function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  if (ifNoneMatch.trim() === "*") return true;
  const bare = etag.replace(/^W\//, "");
  return ifNoneMatch.split(",").some((t) => t.trim().replace(/^W\//, "") === bare);
}
