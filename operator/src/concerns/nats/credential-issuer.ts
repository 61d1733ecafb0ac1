// NATS credentials per runtime. NATS runs in operator mode (decentralized JWT authentication)
// with ONE NATS ACCOUNT PER RUNTIME: each Agent and Relay gets an account of its own (its key
// derived from the install's signing seed and the resource's uid), whose JWT the operator signs
// with the operator key and pushes to the server's `full` resolver with a system-account user
// ($SYS.REQ.CLAIMS.UPDATE; $SYS.REQ.CLAIMS.DELETE with the resource). Streams, consumers, KV
// buckets and subjects of one account cannot name those of another: nothing a runtime configures
// (stream sources, mirrors, republish, subjects, a consumer's deliver subject) reaches outside its
// account, and the install never grants a runtime an export or import. Every runtime account lists
// the install's one account signing key, so the operator issues the user JWTs of all of them with
// that key, each carrying the permissions of runtime/src/contract/nats-permissions.ts.
// The shared account of the one-account model stays preloaded: a NATS of one's own configured with
// only its key and signing seed keeps every runtime there (docs/security.md).
import { createHash } from "node:crypto";
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import {
  encodeAccount,
  encodeGeneric,
  encodeOperator,
  encodeUser,
  fmtCreds,
  type Account,
  type User,
} from "@nats-io/jwt";
import { createAccount, createOperator, Prefix, type KeyPair } from "@nats-io/nkeys";
import type { NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import type { RuntimeAccountLimits } from "./account-limits.ts";
import { decodeVerified, keyPairOfRawSeed, keyPairOfSeed, newKeyPair } from "./key-pair.ts";

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
export const KEY_FIELDS = {
  operator: "operator.seed",
  system: "system.seed",
  account: "account.seed",
  signing: "account-signing.seed",
} as const;
/** The Secret key of the nats-server configuration fragment (JWTs only; no seeds). */
export const SERVER_CONFIG_FIELD = "auth.conf";

const text = (b: Uint8Array) => new TextDecoder().decode(b);
const seedOf = (kp: KeyPair) => text(kp.getSeed());

/** New keys for a fresh install. */
export function generateKeys(): NatsKeys {
  return {
    operator: seedOf(createOperator()),
    system: seedOf(createAccount()),
    account: seedOf(createAccount()),
    signing: seedOf(createAccount()),
  };
}

/** The key pair of an NKey seed of an operator or an account; throws on a seed of anything else. */
export function keyPair(seed: string, prefix: "O" | "A"): KeyPair {
  const kp = keyPairOfSeed(seed);
  if (!kp.getPublicKey().startsWith(prefix))
    throw new Error(`not an NKey seed of ${prefix === "O" ? "an operator" : "an account"}`);
  return kp;
}

/** Where the chart's NATS keeps the account JWTs the operator pushes: on its data volume, beside the JetStream store. */
export const RESOLVER_DIR = "/data/jwt";

/** An account's limits other than JetStream's: none. */
export const UNLIMITED = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
};
/** JetStream enabled without limits: the shared account of the one-account model. */
export const JETSTREAM = { mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 };

/**
 * The nats-server configuration that trusts the operator key, with a `full` resolver keeping the
 * account JWTs the operator pushes in `resolverDir` (deletes allowed), and two account JWTs
 * preloaded: the system account, and the shared account of the one-account model (JetStream
 * enabled, the signing key listed), kept so that what it holds stays reachable.
 */
export async function serverConfig(keys: NatsKeys, opts: { resolverDir?: string } = {}): Promise<string> {
  const operator = keyPair(keys.operator, "O");
  const system = keyPair(keys.system, "A");
  const account = keyPair(keys.account, "A");
  const signing = keyPair(keys.signing, "A");
  const signer = { signer: operator };
  const operatorJwt = await encodeOperator("ifp-operator", operator, { system_account: system.getPublicKey() });
  const systemJwt = await encodeAccount("SYS", system, { limits: UNLIMITED }, signer);
  const accountJwt = await encodeAccount(
    "ifp",
    account,
    { limits: { ...UNLIMITED, ...JETSTREAM }, signing_keys: [signing.getPublicKey()] } as Partial<Account>,
    signer,
  );
  const dir = opts.resolverDir ?? RESOLVER_DIR;
  if (/["\\\n]/.test(dir))
    throw new Error("the resolver directory must not contain quotes, backslashes or line breaks");
  return [
    // A user JWT with a runtime's allow-lists is longer than the default 4 KB CONNECT line.
    `max_control_line: ${MAX_CONTROL_LINE}`,
    `operator: ${operatorJwt}`,
    `system_account: ${system.getPublicKey()}`,
    // One account per runtime, pushed by the operator with a system-account user; a cluster's
    // servers share them with each other.
    `resolver: { type: full, dir: "${dir}", allow_delete: true, interval: "2m" }`,
    "resolver_preload: {",
    `  ${system.getPublicKey()}: ${systemJwt}`,
    `  ${account.getPublicKey()}: ${accountJwt}`,
    "}",
    "",
  ].join("\n");
}

/** The public key of an account derived from the install's signing seed and `label`: the same label, the same account. */
export function derivedAccount(signingSeed: string, label: string): string {
  const raw = hmac(sha256, new TextEncoder().encode(signingSeed.trim()), new TextEncoder().encode(label));
  return keyPairOfRawSeed(Prefix.Account, raw).getPublicKey();
}

/** What the operator needs to give each runtime an account of its own: the operator and system account keys. */
export interface AccountKeys {
  operator: KeyPair;
  system: KeyPair;
}

/**
 * Issues user credentials, signed by the install's account signing key: in the shared account,
 * or (with the operator and system keys) in the account of one runtime, which it also makes.
 */
export class CredentialIssuer {
  /** The shared account's public key (the one-account model; the operator's leftovers there). */
  readonly accountKey: string;
  private readonly signing: KeyPair;
  private readonly signingSeed: string;
  private readonly keys: AccountKeys | undefined;

  /**
   * `account` is the shared account's public key (A...), `signingSeed` the seed of its signing
   * key; `accountKeys` (the operator and system keys) turn on one account per runtime.
   */
  constructor(account: string, signingSeed: string, accountKeys?: { operator: string; system: string }) {
    if (!/^A[A-Z2-7]{55}$/.test(account))
      throw new Error("the NATS account must be an account public key (A…, 56 characters)");
    this.accountKey = account;
    this.signing = keyPair(signingSeed, "A");
    this.signingSeed = signingSeed.trim();
    this.keys = accountKeys
      ? { operator: keyPair(accountKeys.operator, "O"), system: keyPair(accountKeys.system, "A") }
      : undefined;
  }

  static fromKeys(keys: NatsKeys, opts: { accountPerRuntime?: boolean } = {}): CredentialIssuer {
    return new CredentialIssuer(
      keyPair(keys.account, "A").getPublicKey(),
      keys.signing,
      opts.accountPerRuntime === false ? undefined : keys,
    );
  }

  /** Whether each runtime gets an account of its own (the operator and system keys are known). */
  get accountPerRuntime(): boolean {
    return !!this.keys;
  }

  /** The operator key's public key, when known. */
  get operatorKey(): string | undefined {
    return this.keys?.operator.getPublicKey();
  }

  /**
   * The account of the runtime of the resource with this uid: derived from the signing seed and
   * the uid, so the same resource always has the same account (a lost Secret loses nothing) and a
   * resource made again under the same name a new, empty one. The shared account without the
   * operator and system keys.
   */
  accountOf(uid: string): string {
    if (!this.keys) return this.accountKey;
    return derivedAccount(this.signingSeed, `ifp-operator NATS account\0${uid}`);
  }

  /**
   * The JWT of a runtime's account: signed by the operator key, JetStream enabled within `limits`
   * (store, memory, streams, consumers, connections, subscriptions), the install's signing key
   * listed, no exports or imports. `revokedUntil` (seconds): every user JWT issued until then revoked.
   */
  async runtimeAccountJwt(
    account: string,
    name: string,
    limits: RuntimeAccountLimits,
    revokedUntil?: number,
  ): Promise<string> {
    const keys = this.need();
    return encodeAccount(
      name,
      account,
      {
        limits: { ...UNLIMITED, ...limits },
        signing_keys: [this.signing.getPublicKey()],
        ...(revokedUntil !== undefined ? { revocations: { "*": revokedUntil } } : {}),
      } as Partial<Account>,
      { signer: keys.operator },
    );
  }

  /**
   * What the accounts of the isolated layout are made with (shared-accounts.ts): the
   * operator's key pair that signs them (derived once), the signing key they list, the seed the
   * data accounts' keys are derived from.
   */
  sharedLayoutKeys(): { operator: KeyPair; signingKey: string; signingSeed: string } {
    const keys = this.need();
    return { operator: keys.operator, signingKey: this.signing.getPublicKey(), signingSeed: this.signingSeed };
  }

  /** The request that deletes accounts from a full resolver (allow_delete): a generic JWT the operator key signs for itself. */
  async deleteAccountsJwt(accounts: string[]): Promise<string> {
    const keys = this.need();
    return encodeGeneric("delete accounts", keys.operator, "generic", { accounts } as never);
  }

  /** A user of the system account (pushes and deletes account JWTs), valid for `lifetimeMs`. */
  async systemCreds(now = Date.now(), lifetimeMs = 24 * 3600_000): Promise<Uint8Array> {
    const keys = this.need();
    const user = newKeyPair(Prefix.User);
    const jwt = await encodeUser(
      "ifp-operator-system",
      user,
      keys.system,
      { bearer_token: false },
      { exp: Math.floor((now + lifetimeMs) / 1000) },
    );
    return fmtCreds(jwt, user);
  }

  private need(): AccountKeys {
    if (!this.keys) throw new Error("one account per runtime needs the NATS operator and system account keys");
    return this.keys;
  }

  /** A `.creds` file (user JWT and a fresh user seed) of `account` (default the shared one) allowing exactly `permissions`. */
  async issue(
    name: string,
    permissions: NatsPermissions,
    now = Date.now(),
    lifetimeMs = CREDENTIAL_LIFETIME_MS,
    account = this.accountKey,
  ): Promise<string> {
    const user = newKeyPair(Prefix.User);
    const claims: Partial<User> = {
      pub: { allow: permissions.pub, deny: [] },
      sub: { allow: permissions.sub, deny: [] },
      bearer_token: false,
    };
    const jwt = await encodeUser(name, user, account, claims, {
      signer: this.signing,
      exp: Math.floor((now + lifetimeMs) / 1000),
    });
    return text(fmtCreds(jwt, user));
  }
}

/** The claims of the user JWT in a `.creds` file, or undefined when it is not one. */
export function credsClaims(
  creds: string | undefined,
): { iat: number; exp?: number; pub: string[]; sub: string[]; issuerAccount?: string } | undefined {
  const m = creds && /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.-]+)\s*------END NATS USER JWT------/.exec(creds);
  if (!m) return undefined;
  try {
    const c = decodeVerified<User & { issuer_account?: string }>(m[1]!);
    return {
      iat: c.iat,
      exp: c.exp,
      pub: c.nats.pub?.allow ?? [],
      sub: c.nats.sub?.allow ?? [],
      issuerAccount: c.nats.issuer_account,
    };
  } catch {
    return undefined;
  }
}

/**
 * What the operator reads of a runtime's credential: when it was issued and when it expires, the
 * account it belongs to, and a digest of the subjects it allows (`permissionsDigest`). It is what
 * the operator's cache holds of a `<name>-nats` Secret in place of the credentials file, whose
 * user seed the operator never needs again once it has written it.
 */
export interface CredsFacts {
  iat: number;
  exp?: number;
  issuerAccount?: string;
  permissions: string;
}

/** The SHA-256 of the publish and subscribe allow lists, each in sorted order. */
export function permissionsDigest(p: Pick<NatsPermissions, "pub" | "sub">): string {
  return createHash("sha256")
    .update(JSON.stringify([[...p.pub].sort(), [...p.sub].sort()]))
    .digest("base64url");
}

/** The facts of the user JWT in a `.creds` file (its signature verified), or undefined when it is not one. */
export function credsFacts(creds: string | undefined): CredsFacts | undefined {
  const c = credsClaims(creds);
  if (!c) return undefined;
  return {
    iat: c.iat,
    ...(c.exp !== undefined ? { exp: c.exp } : {}),
    ...(c.issuerAccount !== undefined ? { issuerAccount: c.issuerAccount } : {}),
    permissions: permissionsDigest(c),
  };
}

/**
 * When the credential `facts` tell of must be re-issued (ms since the epoch): when a third of the
 * standard lifetime is left (at 2/3 of the lifetime of a credential issued here), at once when it
 * is missing, unreadable, issued by another account, or allows other subjects.
 */
export function renewalDue(facts: CredsFacts | undefined, want: NatsPermissions, account: string): number {
  if (!facts || facts.exp === undefined || facts.issuerAccount !== account) return 0;
  if (facts.permissions !== permissionsDigest(want)) return 0;
  return facts.exp * 1000 - CREDENTIAL_LIFETIME_MS * (1 - RENEW_AT);
}
