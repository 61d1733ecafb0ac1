// NATS credentials per runtime. NATS runs in operator mode (decentralized JWT authentication):
// one NATS operator, one account for everything ifp-operator runs, and a signing key of that
// account with which this operator issues a user JWT per Agent and Relay, carrying exactly the
// permissions of runtime/src/contract/nats-permissions.ts. Issuing needs no change to the NATS
// server's configuration: the server trusts any user the account's signing key signed.
import { decode, encodeAccount, encodeOperator, encodeUser, fmtCreds, type Account, type User } from "@nats-io/jwt";
import { createAccount, createOperator, createUser, fromSeed, type KeyPair } from "@nats-io/nkeys";
import type { NatsPermissions } from "../../runtime/src/contract/nats-permissions.ts";

/** How long an issued user credential is valid, and when (fraction of that) it is re-issued. */
export const CREDENTIAL_LIFETIME_MS = 30 * 24 * 3600_000;
export const RENEW_AT = 2 / 3;

/** The keys the operator keeps in its NATS Secret (each an NKey seed). */
export interface NatsKeys {
  operator: string;
  system: string;
  account: string;
  /** The account's signing key: the only key needed to issue runtime credentials. */
  signing: string;
}

/** The nats-server max_control_line the issued credentials need (their CONNECT line is long). */
export const MAX_CONTROL_LINE = "64KB";

/** Secret data keys of the bootstrap Secret. */
export const KEY_FIELDS = { operator: "operator.seed", system: "system.seed", account: "account.seed", signing: "account-signing.seed" } as const;
/** The Secret key of the nats-server configuration fragment (JWTs only; no seeds). */
export const SERVER_CONFIG_FIELD = "auth.conf";

const text = (b: Uint8Array) => new TextDecoder().decode(b);
const seedOf = (kp: KeyPair) => text(kp.getSeed());

/** New keys for a fresh install. */
export function generateKeys(): NatsKeys {
  return { operator: seedOf(createOperator()), system: seedOf(createAccount()), account: seedOf(createAccount()), signing: seedOf(createAccount()) };
}

function keyPair(seed: string, prefix: "O" | "A"): KeyPair {
  const kp = fromSeed(new TextEncoder().encode(seed.trim()));
  if (!kp.getPublicKey().startsWith(prefix)) throw new Error(`not an NKey seed of ${prefix === "O" ? "an operator" : "an account"}`);
  return kp;
}

/**
 * The nats-server configuration that trusts the operator key, with the two account JWTs
 * preloaded into the memory resolver: the system account, and the account of the runtimes with
 * JetStream enabled and the signing key listed.
 */
export async function serverConfig(keys: NatsKeys): Promise<string> {
  const operator = keyPair(keys.operator, "O");
  const system = keyPair(keys.system, "A");
  const account = keyPair(keys.account, "A");
  const signing = keyPair(keys.signing, "A");
  const unlimited = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const opts = { signer: operator };
  const operatorJwt = await encodeOperator("ifp-operator", operator, { system_account: system.getPublicKey() });
  const systemJwt = await encodeAccount("SYS", system, { limits: unlimited }, opts);
  const accountJwt = await encodeAccount(
    "ifp",
    account,
    { limits: { ...unlimited, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 }, signing_keys: [signing.getPublicKey()] } as Partial<Account>,
    opts,
  );
  return [
    // A user JWT with a runtime's allow-lists is longer than the default 4 KB CONNECT line.
    `max_control_line: ${MAX_CONTROL_LINE}`,
    `operator: ${operatorJwt}`,
    `system_account: ${system.getPublicKey()}`,
    "resolver: MEMORY",
    "resolver_preload: {",
    `  ${system.getPublicKey()}: ${systemJwt}`,
    `  ${account.getPublicKey()}: ${accountJwt}`,
    "}",
    "",
  ].join("\n");
}

/** Issues user credentials of the account, signed by its signing key. */
export class CredentialIssuer {
  /** The account's public key. */
  readonly accountKey: string;
  private readonly signing: KeyPair;

  /** `account` is the account's public key (A...), `signingSeed` the seed of its signing key. */
  constructor(account: string, signingSeed: string) {
    if (!/^A[A-Z2-7]{55}$/.test(account)) throw new Error("the NATS account must be an account public key (A…, 56 characters)");
    this.accountKey = account;
    this.signing = keyPair(signingSeed, "A");
  }

  static fromKeys(keys: NatsKeys): CredentialIssuer {
    return new CredentialIssuer(keyPair(keys.account, "A").getPublicKey(), keys.signing);
  }

  /** A `.creds` file (user JWT and a fresh user seed) allowing exactly `permissions`. */
  async issue(name: string, permissions: NatsPermissions, now = Date.now(), lifetimeMs = CREDENTIAL_LIFETIME_MS): Promise<string> {
    const user = createUser();
    const claims: Partial<User> = {
      pub: { allow: permissions.pub, deny: [] },
      sub: { allow: permissions.sub, deny: [] },
      bearer_token: false,
    };
    const jwt = await encodeUser(name, user, this.accountKey, claims, { signer: this.signing, exp: Math.floor((now + lifetimeMs) / 1000) });
    return text(fmtCreds(jwt, user));
  }
}

/** The claims of the user JWT in a `.creds` file, or undefined when it is not one. */
export function credsClaims(creds: string | undefined): { iat: number; exp?: number; pub: string[]; sub: string[]; issuerAccount?: string } | undefined {
  const m = creds && /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.-]+)\s*------END NATS USER JWT------/.exec(creds);
  if (!m) return undefined;
  try {
    const c = decode<User & { issuer_account?: string }>(m[1]!);
    return { iat: c.iat, exp: c.exp, pub: c.nats.pub?.allow ?? [], sub: c.nats.sub?.allow ?? [], issuerAccount: c.nats.issuer_account };
  } catch {
    return undefined;
  }
}

/**
 * When the credential in `creds` must be re-issued (ms since the epoch): when a third of the
 * standard lifetime is left (at 2/3 of the lifetime of a credential issued here), at once when it
 * is missing, unreadable, issued by another account, or allows other subjects.
 */
export function renewalDue(creds: string | undefined, want: NatsPermissions, account: string): number {
  const c = credsClaims(creds);
  if (!c || c.exp === undefined || c.issuerAccount !== account) return 0;
  const same = (a: string[], b: string[]) => a.length === b.length && [...a].sort().every((x, i) => x === [...b].sort()[i]);
  if (!same(c.pub, want.pub) || !same(c.sub, want.sub)) return 0;
  return c.exp * 1000 - CREDENTIAL_LIFETIME_MS * (1 - RENEW_AT);
}
