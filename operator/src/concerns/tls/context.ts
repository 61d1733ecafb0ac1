// What the TLS concern needs of a pass's context beyond the pass's own (reconcile/context.ts):
// the install's trust, which issues the serving certificates and holds the CAs of the bundles.
import type { InstallTrust } from "./trust.ts";

export interface TlsContext {
  /** The install CA and the CAs every trust bundle holds. */
  trust: InstallTrust;
}
