// Annotations the operator writes into the manifest it renders and the runtime reads from it.

/** The prefix of the project's own annotations; the rendered manifest keeps only these. */
export const ANNOTATION_PREFIX = "ifp.dev/";

/** Annotations a rendered manifest may carry (the operator sets them). */
export const ANNOTATIONS = {
  /** When the capability set last changed (RFC 3339): the capability document's `updated`. */
  capabilitiesUpdated: "ifp.dev/capabilities-updated",
  /** When the signing key was created (RFC 3339): the identity document's key `created`. */
  signingKeyCreated: "ifp.dev/signing-key-created",
} as const;
