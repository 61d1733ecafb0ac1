// The operator's reach into the NATS account of each runtime. Every Agent and Relay has an account
// of its own (credential-issuer.ts); the operator makes it (an account JWT pushed to the server's
// full resolver with a user of the system account), deletes it with its resource, and works on
// its streams (a Relay's stream, a deleted runtime's streams and buckets, the status summary)
// through a user of its own in that account. Those connections are a small pool: opened when
// needed, the least recently used idle one closed when the pool is full, and every one closed
// after a while without use.
// A server that authenticates no client (no operator mode, no resolver) isolates nothing: every
// client, whatever credential it shows, is in its one global account. The operator asks the
// server (its INFO's auth_required) and, on such a server, pushes no account and reaches every
// runtime's data through its own connection: the one-account model, said loudly (isolating()).
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import {
  OPERATOR_INBOX_PREFIX,
  operatorAccountPermissions,
  operatorPermissions,
  type NatsPermissions,
} from "../../../../runtime/src/contract/nats-permissions.ts";
import { sharedRuntimeAccountJwt } from "./shared-accounts.ts";
import { errorMessage } from "../../kube/client.ts";
import type { CredentialIssuer } from "./credential-issuer.ts";
import {
  accountLimitsOf,
  DEFAULT_ACCOUNT_LIMITS,
  type AccountLimitSettings,
  type AccountResource,
} from "./account-limits.ts";

/** The pool key of the system account's connection (account keys start with A). */
const SYSTEM = "$SYS";
/** Deleted accounts remembered, so that none is pushed again (NatsAccounts.deleted). */
const DELETED_KEPT = 10_000;
const ACCOUNT_KEY = /^A[A-Z2-7]{55}$/;
const CREDS_LIFETIME_MS = 24 * 3600_000;
/** How long the server's answer to "do you authenticate clients?" is kept. */
const PROBE_TTL_MS = 60_000;

/**
 * How the operator verifies the NATS servers' certificates, as its own connection does: with the
 * CA certificates of a PEM file, or with those a function gives at each connect (the install's CAs).
 */
export type NatsServerTls = { caFile: string } | { ca: () => string };

export interface NatsAccountsOptions {
  /** Server URLs, comma separated (the operator's --nats-url). */
  url: string;
  /** The operator's TLS settings for NATS (as its own connection's). */
  tls?: NatsServerTls;
  issuer: CredentialIssuer;
  log: Logger;
  /** Connections kept open at most, idle ones beyond it closed (default 8). */
  maxConnections?: number;
  /** How long an unused connection stays open (default 30 s). */
  idleMs?: number;
  /** Timeout of one request (default 5 s). */
  timeoutMs?: number;
  /** What every runtime's account may hold (default DEFAULT_ACCOUNT_LIMITS). */
  limits?: AccountLimitSettings;
}

interface Entry {
  open: Promise<{ nc: NatsConnection; jsm: JetStreamManager }>;
  users: number;
  lastUsed: number;
}

/** What a push or delete of account JWTs answered ($SYS.REQ.CLAIMS.UPDATE / .DELETE). */
interface ClaimsReply {
  data?: { account?: string; code?: number; message?: string };
  error?: { account?: string; code?: number; description?: string };
}

export class NatsAccounts {
  private readonly pool = new Map<string, Entry>();
  /** Accounts pushed by this process, with the limits they were pushed with. */
  private readonly pushed = new Map<string, string>();
  /**
   * Accounts this process deleted, the most recent DELETED_KEPT: never pushed again. An account
   * is its resource's uid's, which no later resource has, so only a cleanup run again for a
   * resource already gone (a pass on a cache that had not yet seen it go) would push one, and
   * until its second deletion the deleted runtime's credential would connect again.
   */
  private readonly deleted = new Set<string>();
  private readonly opts: Required<Omit<NatsAccountsOptions, "tls">> & Pick<NatsAccountsOptions, "tls">;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;
  /** Connections opened so far (for the benchmark and tests). */
  opened = 0;
  /** What the server last said: whether it authenticates clients, kept until `until`. */
  private authenticates: { value: boolean; until: number } | undefined;
  private warnedOpen = false;
  /** Resources told (an Event) in this process that their NATS keeps nothing apart. */
  readonly toldOpen = new Set<string>();

  constructor(opts: NatsAccountsOptions) {
    this.opts = { maxConnections: 8, idleMs: 30_000, timeoutMs: 5_000, limits: DEFAULT_ACCOUNT_LIMITS, ...opts };
    this.sweeper = setInterval(() => this.sweep(Date.now()), Math.max(1_000, this.opts.idleMs / 2));
    this.sweeper.unref();
  }

  get issuer(): CredentialIssuer {
    return this.opts.issuer;
  }

  /** Connections open now. */
  get size(): number {
    return this.pool.size;
  }

  /**
   * Whether the server keeps runtimes apart in accounts of their own. False only when the server
   * itself says it authenticates no client (its INFO without `auth_required`): then it runs no
   * operator mode and no resolver, ignores every credential and holds everything in one global
   * account, so no account is pushed and the operator reaches every runtime's data through its
   * own connection. Logged once per process as a warning. True when the server requires
   * authentication, and when it cannot be asked (then the push or the connection fails and says
   * why): a server unreachable for a moment never moves anything out of its account. The answer
   * is kept a minute, and forgotten when a push finds no resolver.
   */
  async isolating(now = Date.now()): Promise<boolean> {
    if (this.authenticates && this.authenticates.until > now) return this.authenticates.value;
    let value: boolean;
    try {
      value = await this.use(SYSTEM, async ({ nc }) => nc.info?.auth_required === true);
    } catch (err) {
      this.opts.log.debug({ err: errorMessage(err) }, "could not ask the NATS server whether it authenticates clients");
      return this.authenticates?.value ?? true;
    }
    const before = this.authenticates?.value;
    this.authenticates = { value, until: now + PROBE_TTL_MS };
    if (!value && !this.warnedOpen) {
      this.warnedOpen = true;
      this.opts.log.warn(
        { nats: this.opts.url },
        "the NATS server authenticates no client: every runtime, and anything that reaches its port, can read and write every other runtime's messages and state. Credentials are still issued (the server ignores them), no account is pushed, and relay streams, deletions and summaries go through the operator's own connection (the one-account model). Run NATS in operator mode with a full resolver to keep runtimes apart (docs/security.md, A NATS of your own)",
      );
    } else if (value && before === false) {
      this.opts.log.info(
        { nats: this.opts.url },
        "the NATS server now authenticates clients: each runtime's account is pushed again",
      );
    }
    return value;
  }

  /**
   * The account of the runtime of the resource `uid`, made on the server if this process has not
   * pushed it yet, or pushed again when the limits its spec gives (`resource`, accountLimitsOf)
   * changed: its JWT (operator-signed, JetStream within those limits, the install's signing key)
   * sent to the full resolver. Fails when the server does not take it (a NATS without a full
   * resolver).
   */
  async ensureAccount(
    uid: string,
    name: string,
    resource?: AccountResource,
    shared?: { dataAccount: string },
  ): Promise<string> {
    const account = this.opts.issuer.accountOf(uid);
    const pushed = this.pushed.get(account);
    if (pushed !== undefined && resource === undefined) return account;
    if (this.deleted.has(account))
      throw new Error(`the NATS account of ${name} was deleted with it; it is never made again`);
    const clustered = await this.use(SYSTEM, async ({ nc }) => !!nc.info?.cluster);
    const limits = accountLimitsOf(resource, this.opts.limits, clustered);
    // On the isolated layout: no JetStream of its own, the imports of its subjects from its tenant's data account.
    const key = JSON.stringify(shared ? { ...shared, conn: limits.conn, subs: limits.subs } : limits);
    if (pushed === key) return account;
    let jwt: string;
    if (shared) {
      const k = this.opts.issuer.sharedLayoutKeys();
      jwt = await sharedRuntimeAccountJwt(k.operator, account, name, shared.dataAccount, k.signingKey, {
        limits: { conn: limits.conn, subs: limits.subs },
      });
    } else jwt = await this.opts.issuer.runtimeAccountJwt(account, name, limits);
    await this.pushJwt(jwt, `pushing the NATS account of ${name}`);
    this.pushed.set(account, key);
    return account;
  }

  /**
   * The per-agent account of the resource `uid` pushed again as it is, but with every user
   * issued until now revoked: the server disconnects its clients (the operator's own too) and
   * none of their credentials connects again. Resolves once a credential issued now is a later one.
   */
  async fence(uid: string, name: string, resource: AccountResource): Promise<void> {
    const account = this.opts.issuer.accountOf(uid);
    const clustered = await this.use(SYSTEM, async ({ nc }) => !!nc.info?.cluster);
    const until = Math.floor(Date.now() / 1000);
    const limits = accountLimitsOf(resource, this.opts.limits, clustered);
    await this.pushJwt(
      await this.opts.issuer.runtimeAccountJwt(account, name, limits, until),
      `fencing the NATS account of ${name}`,
    );
    this.pushed.delete(account);
    this.creds.delete(account);
    this.drop(account);
    // A user JWT's issue time is in seconds, and one issued in the second of the revocation is revoked.
    while (Math.floor(Date.now() / 1000) <= until) await new Promise((r) => setTimeout(r, 50));
  }

  /** Push an account JWT to the full resolver; `what` names it in the error when the server refuses it. */
  pushJwt(jwt: string, what: string): Promise<void> {
    return this.claims("$SYS.REQ.CLAIMS.UPDATE", jwt, what);
  }

  /**
   * Delete a runtime's account from the resolver: its clients are disconnected and nothing can
   * connect to it any more. A runtime's account is never pushed again by this process; a
   * tenant's data account (`again`) may be, when the tenant has Agents again.
   */
  async deleteAccount(account: string, name: string, opts: { again?: boolean } = {}): Promise<void> {
    if (!ACCOUNT_KEY.test(account) || account === this.opts.issuer.accountKey)
      throw new Error(`not a runtime's account: ${account}`);
    this.drop(account);
    this.creds.delete(account);
    await this.claims(
      "$SYS.REQ.CLAIMS.DELETE",
      await this.opts.issuer.deleteAccountsJwt([account]),
      `deleting the NATS account of ${name}`,
    );
    this.pushed.delete(account);
    if (opts.again) return;
    this.deleted.add(account);
    if (this.deleted.size > DELETED_KEPT) this.deleted.delete(this.deleted.values().next().value!);
  }

  /** Whether this process deleted `account` (deleteAccount): there is nothing left in it to clean up. */
  wasDeleted(account: string): boolean {
    return this.deleted.has(account);
  }

  /**
   * Whether the server's resolver holds `account`: the full resolver answers
   * `$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP` with the account's JWT, or with nothing when it has
   * none (never pushed, or deleted, by this process or an earlier one). Throws when it cannot be
   * asked, so that nothing is decided on a server that did not answer.
   */
  async onResolver(account: string): Promise<boolean> {
    if (!ACCOUNT_KEY.test(account)) throw new Error(`not a NATS account key: ${account}`);
    return this.use(SYSTEM, async ({ nc }) => {
      const m = await nc
        .request(`$SYS.REQ.ACCOUNT.${account}.CLAIMS.LOOKUP`, "", { timeout: this.opts.timeoutMs })
        .catch((err: unknown) => {
          throw new Error(`looking up the NATS account ${account}: ${errorMessage(err)}`);
        });
      return m.data.length > 0;
    });
  }

  /** The account's JWT as the resolver holds it (CLAIMS.LOOKUP), or undefined when it holds none. */
  async claimsOf(account: string): Promise<string | undefined> {
    if (!ACCOUNT_KEY.test(account)) throw new Error(`not a NATS account key: ${account}`);
    return this.use(SYSTEM, async ({ nc }) => {
      const m = await nc.request(`$SYS.REQ.ACCOUNT.${account}.CLAIMS.LOOKUP`, "", { timeout: this.opts.timeoutMs });
      return m.data.length ? m.string() : undefined;
    });
  }

  /** The clients connected to `account` on every server that answers (CONNZ), less the operator's own. */
  async clientsOf(account: string): Promise<number> {
    if (!ACCOUNT_KEY.test(account)) throw new Error(`not a NATS account key: ${account}`);
    return this.use(SYSTEM, async ({ nc }) => {
      let n = 0;
      const replies = await nc.requestMany(`$SYS.REQ.ACCOUNT.${account}.CONNZ`, "", {
        strategy: "timer",
        maxWait: Math.min(this.opts.timeoutMs, 1_500),
      });
      for await (const m of replies) {
        const r = m.json<{ data?: { connections?: { name?: string }[] }; error?: { description?: string } }>();
        if (r.error) throw new Error(`asking for the clients of the NATS account ${account}: ${r.error.description}`);
        n += (r.data?.connections ?? []).filter((c) => c.name !== "ifp-operator").length;
      }
      return n;
    });
  }

  /**
   * `fn` on a connection of its own to `account` as an operator's user with `permissions`
   * (outside the pool, closed after): what a one-off job that needs more than the pooled user
   * does there (moving an Agent's data between layouts, layout-move.ts).
   */
  async asUser<T>(
    account: string,
    permissions: NatsPermissions,
    fn: (nc: NatsConnection, jsm: JetStreamManager) => Promise<T>,
  ): Promise<T> {
    if (!ACCOUNT_KEY.test(account)) throw new Error(`not a NATS account key: ${account}`);
    const creds = await this.opts.issuer.issue("ifp-operator", permissions, Date.now(), 3600_000, account);
    const nc = await this.connectWith(new TextEncoder().encode(creds), true);
    try {
      return await fn(nc, await jetstreamManager(nc, { timeout: this.opts.timeoutMs, checkAPI: false }));
    } finally {
      await nc.close().catch(() => {});
    }
  }

  /**
   * After the connection to NATS came back: what the server's resolver holds now
   * (`$SYS.REQ.CLAIMS.LIST`, every account key on the full resolver). The accounts this process
   * pushed that it no longer holds (a server started again with an empty store) are forgotten,
   * so that the next pass of their resource pushes them again. When the server cannot be asked,
   * every push is forgotten (pushing again changes nothing on a resolver that has them).
   */
  async recheck(): Promise<{ held: Set<string> | undefined; lost: string[] }> {
    let held: Set<string> | undefined;
    try {
      held = await this.use(SYSTEM, async ({ nc }) => {
        const m = await nc.request("$SYS.REQ.CLAIMS.LIST", "", { timeout: this.opts.timeoutMs });
        const reply = m.json<{ data?: string[]; error?: { description?: string } }>();
        if (!Array.isArray(reply.data)) throw new Error(reply.error?.description ?? "no list of accounts");
        return new Set(reply.data);
      });
    } catch (err) {
      this.opts.log.warn(
        { err: errorMessage(err) },
        "could not list the NATS resolver's accounts; pushing every account again",
      );
    }
    const lost = [...this.pushed.keys()].filter((a) => !held?.has(a));
    for (const a of lost) this.pushed.delete(a);
    return { held, lost };
  }

  /**
   * `fn` with a JetStream manager of `account` (the operator's user there), from the pool.
   * `permissions`: the operator's user's there, when not those of a runtime's account (a
   * tenant's data account, where the operator also makes the Agents' consumers).
   */
  async withAccount<T>(
    account: string,
    fn: (jsm: JetStreamManager, nc: NatsConnection) => Promise<T>,
    permissions?: NatsPermissions,
  ): Promise<T> {
    if (!ACCOUNT_KEY.test(account)) throw new Error(`not a NATS account key: ${account}`);
    if (permissions) this.permissions.set(account, permissions);
    return this.use(account, ({ jsm, nc }) => fn(jsm, nc));
  }

  /** The operator's permissions in accounts other than runtimes' (withAccount). */
  private readonly permissions = new Map<string, NatsPermissions>();

  private async claims(subject: string, jwt: string, what: string): Promise<void> {
    const reply = await this.use(SYSTEM, async ({ nc }) => {
      const m = await nc.request(subject, jwt, { timeout: this.opts.timeoutMs }).catch((err: unknown) => {
        this.authenticates = undefined; // asked again next time: the server may have changed
        throw new Error(
          `${what}: ${errorMessage(err)} (the NATS server must run in operator mode with a full resolver, docs/security.md)`,
        );
      });
      return m.json<ClaimsReply>();
    });
    if (reply.error)
      throw new Error(`${what}: ${reply.error.description ?? "refused"} (code ${reply.error.code ?? "?"})`);
  }

  private async use<T>(key: string, fn: (c: { nc: NatsConnection; jsm: JetStreamManager }) => Promise<T>): Promise<T> {
    if (this.closed) throw new Error("the operator's NATS account connections are closed");
    let entry = this.pool.get(key);
    if (entry)
      this.pool.delete(key); // re-inserted below: the map's order is the order of last use
    else {
      entry = { open: this.open(key), users: 0, lastUsed: Date.now() };
      entry.open.catch(() => this.forget(key, entry!));
      this.evict();
    }
    this.pool.set(key, entry);
    entry.users++;
    try {
      return await fn(await entry.open);
    } finally {
      entry.users--;
      entry.lastUsed = Date.now();
    }
  }

  /** The operator's credential per account, issued for a day and used for half of it (signing is most of a connect's cost). */
  private readonly creds = new Map<string, { creds: Uint8Array; until: number }>();

  private async credsFor(key: string): Promise<Uint8Array> {
    const now = Date.now();
    const kept = this.creds.get(key);
    if (kept && kept.until > now) return kept.creds;
    const issuer = this.opts.issuer;
    const creds =
      key === SYSTEM
        ? await issuer.systemCreds(now, CREDS_LIFETIME_MS)
        : new TextEncoder().encode(
            await issuer.issue(
              "ifp-operator",
              key === issuer.accountKey
                ? operatorPermissions()
                : (this.permissions.get(key) ?? operatorAccountPermissions()),
              now,
              CREDS_LIFETIME_MS,
              key,
            ),
          );
    this.creds.set(key, { creds, until: now + CREDS_LIFETIME_MS / 2 });
    return creds;
  }

  private async open(key: string): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
    const nc = await this.connectWith(await this.credsFor(key), key !== SYSTEM);
    this.opened++;
    const entry = this.pool.get(key);
    // A connection the server closes (its credential expired, the account deleted) leaves the pool.
    void nc.closed().then(() => entry && this.forget(key, entry));
    try {
      const jsm = await jetstreamManager(nc, { timeout: this.opts.timeoutMs, checkAPI: false });
      return { nc, jsm };
    } catch (err) {
      await nc.close().catch(() => {});
      throw err;
    }
  }

  private connectWith(creds: Uint8Array, inAccount: boolean): Promise<NatsConnection> {
    const tls = this.opts.tls;
    return connect({
      servers: this.opts.url.split(",").map((s) => s.trim()),
      name: "ifp-operator",
      authenticator: credsAuthenticator(creds),
      ...(inAccount ? { inboxPrefix: OPERATOR_INBOX_PREFIX } : {}),
      ...(tls ? { tls: "caFile" in tls ? { caFile: tls.caFile } : { ca: tls.ca() } } : {}),
      reconnect: false,
      timeout: this.opts.timeoutMs,
      noAsyncTraces: true,
    });
  }

  private forget(key: string, entry: Entry): void {
    if (this.pool.get(key) === entry) this.pool.delete(key);
  }

  /** Close `key`'s connection now (idle or not). */
  private drop(key: string): void {
    const entry = this.pool.get(key);
    if (!entry) return;
    this.pool.delete(key);
    void entry.open.then(({ nc }) => nc.close()).catch(() => {});
  }

  /** Over the bound: close the least recently used idle connections. */
  private evict(): void {
    for (const [key, entry] of this.pool) {
      if (this.pool.size < this.opts.maxConnections) return;
      if (entry.users === 0) this.drop(key);
    }
  }

  private sweep(now: number): void {
    for (const [key, entry] of this.pool)
      if (entry.users === 0 && now - entry.lastUsed >= this.opts.idleMs) this.drop(key);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    const entries = [...this.pool.values()];
    this.pool.clear();
    await Promise.all(entries.map((e) => e.open.then(({ nc }) => nc.close()).catch(() => {})));
  }
}
