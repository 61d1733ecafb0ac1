// What the NATS identity and layout concern needs of a pass's context beyond the pass's own
// (reconcile/context.ts): the issuer of the runtimes' credentials, the pool of per-runtime
// accounts, the tenants' data accounts, and the marks key its credential Secrets carry.
import type { MarksSource } from "../../reconcile/generated-mark.ts";
import type { NatsAccounts } from "./accounts.ts";
import type { CredentialIssuer } from "./credential-issuer.ts";
import type { DataAccounts } from "./data-accounts.ts";

export interface NatsContext {
  /** The install's trust, for the marks key of the credential Secrets it writes (reconcile/generated-mark.ts). */
  trust: MarksSource;
  /** Issues each runtime's own NATS credential (credential-part.ts); absent when the operator was given no account. */
  natsIssuer?: CredentialIssuer;
  /**
   * One NATS account per runtime: made, deleted and reached through this (accounts.ts); absent in
   * the one-account model (no operator and system keys, or no --nats-url).
   */
  natsAccounts?: NatsAccounts;
  /**
   * The tenants' data accounts and the Agents' consumers there (data-accounts.ts): present only on
   * an install of the isolated layout (--nats-layout isolated).
   */
  dataAccounts?: DataAccounts;
}
