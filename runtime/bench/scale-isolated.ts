// The isolated shared layout of bench:scale (`--layout isolated`, docs/scale.md "The isolated
// shared layout"): nats-server in operator mode with a full resolver, as the install runs it, on
// one server or on a three-node cluster (each node with a resolver directory of its own; the
// servers share the pushed account JWTs); per tenant a data account holding the shared streams
// and buckets of runtime/src/contract/shared-layout.ts under a JetStream limit of its own, with
// the replicas the product gives a runtime's streams ("auto": three on a cluster, one on a single
// server); per Agent an account of its own, JetStream off, importing its own subjects, and its two
// consumers in the data account (one replica each, as the contract makes them), as the operator
// would make them (the account JWT pushed with a system-account user, the consumers added by the
// operator's user in the data account). Publishes to one Agent's inbox go through that Agent's own
// runtime credential and its imports. A Relay stays on an account of its own, with JetStream
// within the limits the operator gives it (makeRelay). The tests of the agent runtime on the
// layout (operator/test/nats/nats-shared-layout-runtime.test.ts), test:faults and test:cluster make
// their install with it.
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { KeyPair } from "@nats-io/nkeys";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { startNats, startNatsCluster, type NatsCluster, type NatsServer } from "../../e2e/support/nats.ts";
import { tempDir } from "../../e2e/support/process.ts";
import {
  CredentialIssuer,
  generateKeys,
  serverConfig,
  type NatsKeys,
} from "../../operator/src/concerns/nats/credential-issuer.ts";
import {
  dataAccountJwt,
  dataAccountOf,
  pushAccountJwt,
  sharedRuntimeAccountJwt,
} from "../../operator/src/concerns/nats/shared-accounts.ts";
import { accountLimitsOf, DEFAULT_ACCOUNT_LIMITS } from "../../operator/src/concerns/nats/account-limits.ts";
import { agentInboxPrefix, OPERATOR_INBOX_PREFIX, relayPermissions } from "../src/contract/nats-permissions.ts";
import type { RelaySpecInput } from "../src/resources/relay.ts";
import {
  sharedAgentConsumers,
  sharedAgentNames,
  sharedAgentPermissions,
  sharedOperatorPermissions,
  sharedStreamConfigs,
} from "../src/contract/shared-layout.ts";
import { ensureReplicatedStream, placementOf } from "../src/nats/streams.ts";

const GIB = 1024 ** 3;
/** Each tenant's JetStream file storage (its data account's limit): the bench writes little. */
const TENANT_DISK_BYTES = 64 * GIB;

/** One nats-server in operator mode, and the operator's side of the layout on it. */
export class IsolatedInstall {
  private system!: NatsConnection;
  private readonly tenants = new Map<string, Promise<{ account: string; jsm: JetStreamManager }>>();
  private readonly open: NatsConnection[] = [];

  /** The servers (one, or a cluster's nodes), and their client URLs comma separated. */
  readonly nodes: NatsServer[];
  readonly url: string;
  /** The cluster, when the install runs on one (its nodes killed and started again by the caller). */
  cluster?: NatsCluster;
  private readonly keys: NatsKeys;
  private readonly issuer: CredentialIssuer;
  private readonly stop: () => Promise<void>;
  /** The install's account signing key (public), which every account JWT lists. */
  private readonly signingKey: string;
  /** The operator's key pair, which signs every account JWT (derived once, as the operator's own issuer holds it). */
  private readonly operator: KeyPair;

  private constructor(
    nodes: NatsServer[],
    url: string,
    stop: () => Promise<void>,
    keys: NatsKeys,
    issuer: CredentialIssuer,
  ) {
    this.nodes = nodes;
    this.url = url;
    this.stop = stop;
    this.keys = keys;
    this.issuer = issuer;
    ({ signingKey: this.signingKey, operator: this.operator } = issuer.sharedLayoutKeys());
  }

  /** The first (or only) server. */
  get server(): NatsServer {
    return this.nodes[0]!;
  }

  /**
   * The install on one nats-server, or on a cluster of `clusterSize` nodes. `http` is the
   * monitoring listener (given on a single server; a cluster's nodes have one each).
   */
  static async start(opts: {
    http: string;
    jetstream: string;
    graceMs: number;
    startTimeoutMs: number;
    clusterSize?: number;
  }) {
    const keys = generateKeys();
    const operatorMode = (storeDir: string) => serverConfig(keys, { resolverDir: join(storeDir, "jwt") });
    const issuer = CredentialIssuer.fromKeys(keys);
    const connect = { authenticator: credsAuthenticator(await issuer.systemCreds()) };
    let install: IsolatedInstall;
    if (opts.clusterSize && opts.clusterSize > 1) {
      const cluster = await startNatsCluster({
        size: opts.clusterSize,
        graceMs: opts.graceMs,
        startTimeoutMs: opts.startTimeoutMs,
        config: opts.jetstream,
        connect,
        nodeConfig: (_, storeDir) => operatorMode(storeDir),
      });
      install = new IsolatedInstall(cluster.nodes, cluster.url, () => cluster.close(), keys, issuer);
      install.cluster = cluster;
    } else {
      const storeDir = tempDir("ifp-bench-isolated-");
      const server = await startNats({
        storeDir,
        config: `${await operatorMode(storeDir)}${opts.http}${opts.jetstream}`,
        graceMs: opts.graceMs,
        startTimeoutMs: opts.startTimeoutMs,
        connect,
      });
      install = new IsolatedInstall([server], server.url, () => server.close(), keys, issuer);
    }
    install.system = await install.connect(await issuer.systemCreds(Date.now(), 7 * 24 * 3600_000));
    return install;
  }

  /**
   * A connection that reconnects for ever (the servers are restarted under it), without the
   * stack of each request's caller kept for its errors, as the operator's own connections.
   */
  private async connect(creds: Uint8Array, inboxPrefix?: string): Promise<NatsConnection> {
    const nc = await connect({
      servers: this.url.split(","),
      authenticator: credsAuthenticator(creds),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      noAsyncTraces: true,
      ...(inboxPrefix ? { inboxPrefix } : {}),
    });
    this.open.push(nc);
    return nc;
  }

  /** The tenant's data account, made once: its JWT pushed, the operator's user connected there, its streams applied. */
  tenant(name: string) {
    let t = this.tenants.get(name);
    if (!t) {
      t = (async () => {
        const account = dataAccountOf(this.keys.signing, name);
        const jwt = await dataAccountJwt(this.operator, account, this.signingKey, name, {
          diskBytes: TENANT_DISK_BYTES,
          memBytes: 0,
        });
        await pushAccountJwt(this.system, jwt);
        const creds = await this.issuer.issue(
          "ifp-operator",
          sharedOperatorPermissions(),
          Date.now(),
          undefined,
          account,
        );
        const nc = await this.connect(new TextEncoder().encode(creds), OPERATOR_INBOX_PREFIX);
        const jsm = await jetstreamManager(nc, { timeout: 30_000 });
        // On a cluster the push is answered by one server: the account's JetStream is enabled on
        // the others a moment later (until then they answer "JetStream not enabled for account").
        for (const until = Date.now() + 30_000; ; ) {
          try {
            await jsm.getAccountInfo();
            break;
          } catch (err) {
            if (Date.now() > until) throw err;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
        // The replicas the product gives a runtime's streams: three on a cluster, one on a single server.
        for (const s of sharedStreamConfigs()) await ensureReplicatedStream(jsm, s, "auto", placementOf(nc));
        return { account, jsm };
      })();
      t.catch(() => this.tenants.delete(name));
      this.tenants.set(name, t);
    }
    return t;
  }

  /** One Agent (`team/agent`): its account pushed with its imports, its two consumers made in its tenant's data account. */
  async makeAgent(key: string, step: { name: string }, handlerTimeoutMs = 30_000): Promise<string> {
    const tenantName = key.split("/")[0]!;
    step.name = "data account";
    const t = await this.tenant(tenantName);
    const account = this.issuer.accountOf(key);
    step.name = "runtime account";
    await pushAccountJwt(
      this.system,
      await sharedRuntimeAccountJwt(this.operator, account, `agent:${key}`, t.account, this.signingKey),
      30_000,
    );
    for (const c of sharedAgentConsumers(account, { handlerTimeoutMs, senderAckWaitMs: 30_000 })) {
      step.name = c.stream === sharedAgentNames(account).inboxStream ? "handler consumer" : "sender consumer";
      await t.jsm.consumers.add(c.stream, c.config);
    }
    return account;
  }

  /** The credential of the Agent `key`'s runtime, as the operator issues it: its allow-lists, replies under `agentId`'s inbox prefix. */
  runtimeCreds(key: string, agentId = key.split("/")[1]!): Promise<string> {
    const account = this.issuer.accountOf(key);
    return this.issuer.issue(
      `agent:${key}`,
      sharedAgentPermissions(agentInboxPrefix(agentId), account),
      Date.now(),
      undefined,
      account,
    );
  }

  /**
   * A Relay (`name`, its spec as its manifest holds it): its own account pushed as the operator
   * makes a Relay's (JetStream within the install's default limits and its stream's size, times
   * its replicas on a cluster), and its runtime's credential there with the Relay's allow-lists.
   */
  async makeRelay(name: string, spec: RelaySpecInput): Promise<{ account: string; creds: string }> {
    const key = `relay:${name}`;
    const account = this.issuer.accountOf(key);
    const limits = accountLimitsOf(
      { kind: "Relay", spec: spec as { retention?: { maxBytes?: string | number; replicas?: number } } },
      DEFAULT_ACCOUNT_LIMITS,
      this.nodes.length > 1,
    );
    await pushAccountJwt(this.system, await this.issuer.runtimeAccountJwt(account, key, limits), 30_000);
    const relay = { metadata: { name }, spec: spec as { url: string } } as Parameters<typeof relayPermissions>[0];
    return { account, creds: await this.issuer.issue(key, relayPermissions(relay), Date.now(), undefined, account) };
  }

  /** A JetStream client of the Agent `key`'s runtime, with its own credential (made by makeAgent). */
  async runtimeClient(key: string): Promise<{ js: JetStreamClient; inbox: (id: string) => string }> {
    const account = this.issuer.accountOf(key);
    const creds = await this.runtimeCreds(key);
    const nc = await this.connect(new TextEncoder().encode(creds), agentInboxPrefix(key.split("/")[1]!));
    return { js: jetstream(nc), inbox: (id) => sharedAgentNames(account).inbox(id) };
  }

  /** A user of the tenant's data account allowed every subject there: what a test looks at the tenant's data with. */
  async tenantClient(tenant: string): Promise<NatsConnection> {
    return this.anyUserOf((await this.tenant(tenant)).account);
  }

  /** A user of the Agent `key`'s own account allowed every subject (not a credential the operator issues: an attacker's best). */
  anyUserOfAgent(key: string): Promise<NatsConnection> {
    return this.anyUserOf(this.issuer.accountOf(key));
  }

  private async anyUserOf(account: string): Promise<NatsConnection> {
    return this.connect(await this.anyUserCreds(account));
  }

  /** The credential of a user of `account` allowed every subject (for a connection of the caller's own, pinned to one server, say). */
  async anyUserCreds(account: string): Promise<Uint8Array> {
    const creds = await this.issuer.issue("test", { pub: [">"], sub: [">"] }, Date.now(), undefined, account);
    return new TextEncoder().encode(creds);
  }

  /** The operator's user in the tenant's data account (made by tenant()). */
  async operatorOf(tenant: string): Promise<JetStreamManager> {
    return (await this.tenant(tenant)).jsm;
  }

  /**
   * Whether the bench's own client (the system account's, which reconnects as the runtimes' do)
   * is connected: a round trip to its server within a second.
   */
  async connected(): Promise<boolean> {
    if (this.system.isClosed()) return false;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 1_000)));
    try {
      return await Promise.race([this.system.flush().then(() => true), late]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    for (const nc of this.open) await nc.close().catch(() => {});
    await this.stop();
  }
}
