// The operator's side of the isolated shared layout (docs/scale.md, "The isolated shared layout";
// runtime/src/contract/shared-layout.ts), on an install of `--nats-layout isolated`: per tenant
// (a namespace with Agents) a data account, signed by the operator key with the JetStream limits
// the install sets, holding the streams and buckets `sharedStreamConfigs` returns; per Agent its
// consumers there, those `sharedAgentConsumers` returns. The operator reaches a data account
// through a user of its own there, issued by the install's signing key (which every data
// account lists) with `sharedOperatorPermissions`, from the pool of account connections
// (accounts.ts). What a tenant's data account holds is made once per process and again
// after a failure; an Agent's consumers likewise, and again when their settings change.
import { headers, type NatsConnection } from "@nats-io/transport-node";
import type { ConsumerConfig, JetStreamManager, StreamConfig } from "@nats-io/jetstream";
import type { Logger } from "pino";
import { isNotFound } from "../../../../runtime/src/contract/nats.ts";
import type { NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import {
  SHARED_BUCKETS,
  SHARED_STREAMS,
  sharedAgentConsumers,
  sharedAgentKeySubjects,
  sharedOperatorPermissions,
  sharedStreamConfigs,
} from "../../../../runtime/src/contract/shared-layout.ts";
import { errorMessage } from "../../kube/client.ts";
import { hashOf } from "../../kube/metadata.ts";
import { isSubset } from "../../kube/subset.ts";
import type { NatsAccounts } from "./accounts.ts";
import { dataAccountJwt, dataAccountOf, type TenantLimits } from "./shared-accounts.ts";

/** The layouts of an install (`--nats-layout`): where its Agents' JetStream objects are. */
export const INSTALL_NATS_LAYOUTS = ["per-agent", "isolated"] as const;
export type InstallNatsLayout = (typeof INSTALL_NATS_LAYOUTS)[number];

const MIB = 1024 * 1024;

/** What a tenant's data account may hold unless the install says otherwise (--nats-tenant-*). */
export const DEFAULT_TENANT_LIMITS: TenantLimits = { diskBytes: 1024 * MIB, memBytes: 0 };

/** The sender's ack wait: what the runtime gives its own `sender` consumer on the per-agent layout. */
const SENDER_ACK_WAIT_MS = 5 * 60_000;
/** The handler timeout an Agent without spec.handler is given: its application stream's ack wait (60 s) less the 30 s margin. */
const NO_HANDLER_TIMEOUT_MS = 30_000;

/** A tenant's data account cannot hold what it must: its JetStream was refused, or its limit is reached. */
export class TenantStorageError extends Error {
  readonly reason = "InsufficientStorage";
}

/**
 * The operator's user in a data account: `sharedOperatorPermissions`, the last error each Agent
 * leaves under its account key in the tenant's `ifp_agents` bucket (the status summary),
 * publishing on the Agents' KV keys (a deleted Agent's keys are overwritten with delete markers),
 * and the list of the inbox's and outbox's consumers (DataAccounts.recheck).
 */
export function dataAccountOperatorPermissions(): NatsPermissions {
  const p = sharedOperatorPermissions();
  const agents = SHARED_BUCKETS.agents;
  return {
    pub: [
      ...p.pub,
      `$JS.API.DIRECT.GET.KV_${agents}.$KV.${agents}.*.*.last_error`,
      "$KV.*.*.>",
      // The consumers of the inbox and outbox, looked at after a reconnect (recheck).
      `$JS.API.CONSUMER.LIST.${SHARED_STREAMS.inbox}`,
      `$JS.API.CONSUMER.LIST.${SHARED_STREAMS.outbox}`,
    ],
    sub: p.sub,
  };
}

/** Fields JetStream does not let a consumer's update change. */
const FIXED_CONSUMER_FIELDS = ["durable_name", "deliver_policy", "ack_policy"] as const;

/**
 * Brings a stream of a data account to `config` (made, or updated where it differs) by the one
 * replica rule of every stream the product makes; what it did, and where the stream's replicas are
 * not those asked for, why. The manager hands in the runtime's (`ensureReplicatedStream`).
 */
export type EnsureStream = (
  jsm: JetStreamManager,
  nc: NatsConnection,
  config: Partial<StreamConfig> & { name: string },
) => Promise<{ action: "created" | "updated" | "unchanged"; unmet?: { reason: string } }>;

export class DataAccounts {
  private readonly accounts: NatsAccounts;
  private readonly limits: TenantLimits;
  private readonly ensureStream: EnsureStream;
  private readonly log: Logger;
  /** Tenants whose data account this process pushed and filled with its streams. */
  private readonly ready = new Map<string, Promise<string>>();
  /** Agents (their account) whose consumers this process made, with the settings it made them with. */
  private readonly consumers = new Map<string, { tenant: string; key: string }>();
  /** The tenants of `ready` whose data account is made. */
  private readonly done = new Set<string>();

  constructor(opts: { accounts: NatsAccounts; limits?: TenantLimits; ensureStream: EnsureStream; log: Logger }) {
    this.accounts = opts.accounts;
    this.limits = opts.limits ?? DEFAULT_TENANT_LIMITS;
    this.ensureStream = opts.ensureStream;
    this.log = opts.log;
  }

  /** The data account of a tenant: derived from the install's signing seed and the namespace. */
  accountOf(tenant: string): string {
    return dataAccountOf(this.accounts.issuer.sharedLayoutKeys().signingSeed, tenant);
  }

  /**
   * The tenant's data account on the server with its streams and buckets: pushed with the
   * install's tenant limits, then each stream `sharedStreamConfigs` returns made or brought to
   * that configuration. Once per process unless it failed. Throws TenantStorageError when the
   * server does not give the account JetStream (its limit does not fit the store beside the
   * others' reservations).
   */
  ensure(tenant: string): Promise<string> {
    let p = this.ready.get(tenant);
    if (!p) {
      p = this.make(tenant);
      p.then(
        () => this.done.add(tenant),
        () => this.ready.delete(tenant),
      );
      this.ready.set(tenant, p);
    }
    return p;
  }

  /** Whether this process has made the tenant's data account (what reads wait for: none pushes it). */
  made(tenant: string): boolean {
    return this.done.has(tenant);
  }

  /** Forget what was made for a tenant and its Agents: the next use makes it again. */
  forget(tenant: string): void {
    this.ready.delete(tenant);
    this.done.delete(tenant);
    for (const [account, m] of this.consumers) if (m.tenant === tenant) this.consumers.delete(account);
  }

  /**
   * After the connection to NATS came back, given the accounts its resolver holds (undefined: not
   * known): each tenant this process made is looked at again, and what the server no longer has
   * is forgotten, so that the next pass of its Agents makes it again — a data account gone from
   * the resolver or a stream gone from it (the tenant made again, with every Agent's consumers),
   * or an Agent's consumer gone (that Agent's made again); a tenant that could not be looked at is
   * forgotten too (looked at again by its next pass). Returns the tenants and Agents forgotten. A server started with an empty store has lost the messages its streams held; what
   * is made again is empty, and said so (a warning).
   */
  async recheck(held: Set<string> | undefined): Promise<{ tenants: string[]; agents: string[]; unknown: string[] }> {
    const tenants: string[] = [];
    const agents: string[] = [];
    const unknown: string[] = [];
    for (const tenant of [...this.done]) {
      const account = this.accountOf(tenant);
      let missing: string[];
      try {
        missing = held?.has(account)
          ? await this.accounts.withAccount(
              account,
              async (jsm) => {
                const streams = new Set<string>();
                for await (const n of jsm.streams.names()) streams.add(n);
                const gone = sharedStreamConfigs()
                  .map((c) => c.name)
                  .filter((n) => !streams.has(n));
                if (gone.length) return gone;
                const consumers = new Set<string>();
                for (const stream of [SHARED_STREAMS.inbox, SHARED_STREAMS.outbox])
                  for await (const c of jsm.consumers.list(stream)) consumers.add(`${stream}/${c.name}`);
                for (const [runtime, m] of this.consumers) {
                  if (m.tenant !== tenant) continue;
                  const want = sharedAgentConsumers(runtime, { handlerTimeoutMs: 0, senderAckWaitMs: 0 });
                  if (want.some((c) => !consumers.has(`${c.stream}/${c.config.durable_name}`))) {
                    this.consumers.delete(runtime);
                    agents.push(runtime);
                  }
                }
                return [];
              },
              dataAccountOperatorPermissions(),
            )
          : [`the data account ${account}`];
      } catch (err) {
        // Not known: looked at again (made where missing) on the next pass.
        this.log.info({ namespace: tenant, err: errorMessage(err) }, "could not look at the tenant's data account");
        this.forget(tenant);
        unknown.push(tenant);
        continue;
      }
      if (!missing.length) continue;
      this.forget(tenant);
      tenants.push(tenant);
      this.log.warn(
        { namespace: tenant, account, missing },
        "the NATS server no longer holds the tenant's data account or streams: they are made again on its Agents' next pass, empty (the messages they held are gone with the server's store)",
      );
    }
    if (agents.length)
      this.log.warn({ agents }, "the NATS server no longer holds these Agents' consumers: they are made again");
    return { tenants, agents, unknown };
  }

  private async make(tenant: string): Promise<string> {
    const k = this.accounts.issuer.sharedLayoutKeys();
    const account = this.accountOf(tenant);
    const jwt = await dataAccountJwt(k.operator, account, k.signingKey, `namespace ${tenant}`, this.limits);
    await this.accounts.pushJwt(jwt, `pushing the NATS data account of namespace ${tenant}`);
    const made = await this.in(account, tenant, async (jsm, nc) => {
      const changed: string[] = [];
      for (const config of sharedStreamConfigs()) {
        const r = await this.ensureStream(jsm, nc, config);
        if (r.action !== "unchanged") changed.push(config.name);
        if (r.unmet) this.log.warn({ namespace: tenant, ...r.unmet }, r.unmet.reason);
      }
      return changed;
    });
    if (made.length) this.log.info({ namespace: tenant, account, streams: made }, "made the tenant's shared streams");
    return account;
  }

  /** `fn` as the operator's user in a data account; a refusal of its JetStream as TenantStorageError. */
  private async in<T>(
    account: string,
    tenant: string,
    fn: (jsm: JetStreamManager, nc: NatsConnection) => Promise<T>,
  ): Promise<T> {
    try {
      return await this.accounts.withAccount(account, fn, dataAccountOperatorPermissions());
    } catch (err) {
      if (/jetstream (is )?not enabled|insufficient (storage )?resources/i.test(errorMessage(err)))
        throw new TenantStorageError(
          `the NATS data account of namespace ${tenant} (JetStream limit ${this.limits.diskBytes} bytes of disk, ${this.limits.memBytes} of memory) was refused JetStream by the server: the tenants' limits are reservations, and the store (max_file_store) has no room left for this one (${errorMessage(err)}); raise the store or lower the install's tenant limit (docs/scale.md)`,
        );
      throw err;
    }
  }

  /**
   * One Agent's consumers in its tenant's data account, those `sharedAgentConsumers` returns:
   * the handler's ack wait from spec.handler.timeout (an Agent without a handler: its
   * application stream's). Returns what was made or changed.
   */
  async ensureAgent(tenant: string, runtimeAccount: string, handlerTimeoutMs: number | undefined): Promise<string[]> {
    const account = await this.ensure(tenant);
    const wanted = sharedAgentConsumers(runtimeAccount, {
      handlerTimeoutMs: handlerTimeoutMs ?? NO_HANDLER_TIMEOUT_MS,
      senderAckWaitMs: SENDER_ACK_WAIT_MS,
    });
    // A hash, not the consumers' JSON (about 650 bytes an Agent, ten thousand of them kept).
    const key = hashOf(wanted);
    if (this.consumers.get(runtimeAccount)?.key === key) return [];
    try {
      const changed = await this.in(account, tenant, async (jsm) => {
        const out: string[] = [];
        for (const c of wanted)
          if (await ensureConsumer(jsm, c.stream, c.config)) out.push(`${c.stream}/${c.config.durable_name}`);
        return out;
      });
      this.consumers.set(runtimeAccount, { tenant, key });
      return changed;
    } catch (err) {
      // A stream gone (deleted with the tenant's last Agent meanwhile): made again on the next pass.
      if (isNotFound(err)) this.forget(tenant);
      throw err;
    }
  }

  /**
   * What a deleted Agent leaves in its tenant's data account: its consumers deleted, its KV keys
   * overwritten with delete markers (the buckets deny purges and deletes to everyone). Its
   * messages in the shared inbox and outbox are reachable by nobody once its account is deleted,
   * and age out with the streams' retention. Returns what was deleted.
   */
  async deleteAgent(tenant: string, runtimeAccount: string): Promise<string[]> {
    this.consumers.delete(runtimeAccount);
    const account = this.accountOf(tenant);
    if (!(await this.accounts.onResolver(account))) return [];
    return this.accounts.withAccount(
      account,
      async (jsm, nc) => {
        const gone: string[] = [];
        for (const c of sharedAgentConsumers(runtimeAccount, { handlerTimeoutMs: 0, senderAckWaitMs: 0 })) {
          try {
            await jsm.consumers.delete(c.stream, c.config.durable_name);
            gone.push(`consumer ${c.config.durable_name} of ${c.stream}`);
          } catch (err) {
            if (!isNotFound(err)) throw err;
          }
        }
        let keys = 0;
        for (const { stream, subjects } of sharedAgentKeySubjects(runtimeAccount)) {
          const info = await jsm.streams.info(stream, { subjects_filter: subjects }).catch((err: unknown) => {
            if (isNotFound(err)) return undefined;
            throw err;
          });
          for (const subject of Object.keys(info?.state.subjects ?? {})) {
            const h = headers();
            h.set("KV-Operation", "DEL");
            nc.publish(subject, undefined, { headers: h });
            keys++;
          }
        }
        await nc.flush();
        if (keys) gone.push(`${keys} KV keys`);
        return gone;
      },
      dataAccountOperatorPermissions(),
    );
  }

  /**
   * A tenant whose last Agent is gone: its streams and buckets deleted, then its data account,
   * so that its JetStream limit no longer holds a share of the store. Made again with the next
   * Agent of the namespace.
   */
  async deleteTenant(tenant: string): Promise<string[]> {
    this.forget(tenant);
    const account = this.accountOf(tenant);
    if (!(await this.accounts.onResolver(account))) return [];
    const gone = await this.accounts.withAccount(
      account,
      async (jsm) => {
        const out: string[] = [];
        for (const s of sharedStreamConfigs()) {
          try {
            await jsm.streams.delete(s.name);
            out.push(s.name);
          } catch (err) {
            if (!isNotFound(err)) throw err;
          }
        }
        return out;
      },
      dataAccountOperatorPermissions(),
    );
    await this.accounts.deleteAccount(account, `the data account of namespace ${tenant}`, { again: true });
    // An Agent of the namespace made meanwhile finds its tenant made again on its next pass.
    this.forget(tenant);
    return [...gone, `the NATS data account ${account}`];
  }
}

/** A consumer made, or updated to `config` where it differs; whether it changed. */
async function ensureConsumer(
  jsm: JetStreamManager,
  stream: string,
  config: Partial<ConsumerConfig> & { durable_name: string },
): Promise<boolean> {
  const info = await jsm.consumers.info(stream, config.durable_name).catch((err: unknown) => {
    if (isNotFound(err) && !/stream not found/i.test(errorMessage(err))) return undefined;
    throw err;
  });
  if (!info) {
    await jsm.consumers.add(stream, config);
    return true;
  }
  if (isSubset(config, info.config)) return false;
  const update = Object.fromEntries(
    Object.entries(config).filter(([k]) => !(FIXED_CONSUMER_FIELDS as readonly string[]).includes(k)),
  );
  await jsm.consumers.update(stream, config.durable_name, update);
  return true;
}
