// The account JWTs of the isolated shared JetStream layout (runtime/src/contract/shared-layout.ts,
// docs/scale.md "The isolated shared layout"): a data account per tenant, which holds the tenant's streams
// and consumers under a JetStream limit of its own and exports each subject family of an Agent
// once, keyed by the importing account; and each runtime's account, with JetStream off, importing
// those families with its own key. The operator key signs both, as it signs every account of the
// install; the install's account signing key is listed in both, so that the operator issues its
// own user in a data account and each runtime's user in the runtime's account as it does today.
// The operator makes the layout with it on an install of `--nats-layout isolated`
// (data-accounts.ts); the bench and the isolation tests build it by hand.
import { encodeAccount, type Account } from "@nats-io/jwt";
import type { KeyPair } from "@nats-io/nkeys";
import type { NatsConnection } from "@nats-io/transport-node";
import { dataAccountExports, runtimeAccountImports } from "../../../../runtime/src/contract/shared-layout.ts";
import { derivedAccount, JETSTREAM, keyPair, UNLIMITED } from "./credential-issuer.ts";

/** A data account's JetStream limits: bytes of file and memory storage the tenant may use (-1 none). */
export interface TenantLimits {
  diskBytes: number;
  memBytes: number;
}

/** The data account of a tenant (its namespace): derived from the install's signing seed, so the same tenant always has the same one. */
export function dataAccountOf(signingSeed: string, tenant: string): string {
  return derivedAccount(signingSeed, `ifp-operator NATS data account\0${tenant}`);
}

/**
 * What signs the layout's account JWTs: the operator's key pair, or its seed. A key pair is
 * derived once (CredentialIssuer.sharedLayoutKeys), where a seed is derived again at each JWT:
 * what the operator spends most on per Agent when thousands are applied at once.
 */
export type OperatorKey = string | KeyPair;

function operatorSigner(operator: OperatorKey): KeyPair {
  if (typeof operator === "string") return keyPair(operator, "O");
  if (!operator.getPublicKey().startsWith("O")) throw new Error("not an operator's key pair");
  return operator;
}

/** The JWT of a tenant's data account: JetStream within `limits`, the layout's exports. */
export async function dataAccountJwt(
  operator: OperatorKey,
  dataAccount: string,
  signingKey: string,
  tenant: string,
  limits: TenantLimits,
  exports: ReturnType<typeof dataAccountExports> = dataAccountExports(),
): Promise<string> {
  return encodeAccount(
    `data ${tenant}`,
    dataAccount,
    {
      limits: {
        ...UNLIMITED,
        mem_storage: limits.memBytes,
        disk_storage: limits.diskBytes,
        streams: -1,
        consumer: -1,
      },
      exports,
      signing_keys: [signingKey],
    } as Partial<Account>,
    { signer: operatorSigner(operator) },
  );
}

/**
 * The JWT of a runtime's account in the shared layout: no JetStream of its own (no stream to
 * source, mirror or republish with, no storage to reserve), the imports of its own subjects
 * from its tenant's data account.
 */
export async function sharedRuntimeAccountJwt(
  operator: OperatorKey,
  account: string,
  name: string,
  dataAccount: string,
  signingKey: string,
  opts: {
    jetstream?: boolean;
    imports?: ReturnType<typeof runtimeAccountImports>;
    /** The account's connections and subscriptions (default: unlimited). */
    limits?: { conn?: number; subs?: number };
  } = {},
): Promise<string> {
  return encodeAccount(
    name,
    account,
    {
      limits: { ...UNLIMITED, ...(opts.jetstream ? JETSTREAM : {}), ...opts.limits },
      imports: opts.imports ?? runtimeAccountImports(dataAccount, account),
      signing_keys: [signingKey],
    } as Partial<Account>,
    { signer: operatorSigner(operator) },
  );
}

/** Pushes an account JWT to the servers' full resolver with a system-account connection; rejects with the server's refusal. */
export async function pushAccountJwt(system: NatsConnection, jwt: string, timeoutMs = 10_000): Promise<void> {
  const reply = (await system.request("$SYS.REQ.CLAIMS.UPDATE", jwt, { timeout: timeoutMs })).json<{
    error?: { description?: string; code?: number };
  }>();
  if (reply.error) throw new Error(`the account JWT was refused: ${reply.error.description ?? "?"}`);
}
