// Which NATS account holds the data of an Agent's or Relay's runtime, and the operator's way into
// it: its user there from the pool of account connections (accounts.ts), or the operator's
// own connection in the shared account (the one-account model, and runtimes still kept there, and
// every runtime on a server that authenticates no client, where everything is in one account).
import type { KubernetesObject, V1Secret } from "@kubernetes/client-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { AccountResource } from "./account-limits.ts";
import { isNotFound } from "../../../../runtime/src/contract/nats.ts";
import { accountOfSecret, natsCredsSecretName } from "./runtime-credential.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { NatsContext } from "./context.ts";
import { dataAccountOperatorPermissions } from "./data-accounts.ts";
import { agentKeyOf } from "../../reconcile/finalizers.ts";
import { readSharedAgent, type Reading } from "./traffic-summary.ts";

type AccountContext = Pick<ReconcileContext, "caches" | "nats"> &
  Pick<NatsContext, "natsIssuer" | "natsAccounts" | "dataAccounts">;

/** The account of a resource's runtime (from its `<name>-nats` Secret and uid); undefined without an issuer. */
export function runtimeAccountOf(ctx: AccountContext, obj: KubernetesObject): string | undefined {
  if (!ctx.natsIssuer) return undefined;
  const { namespace, name } = obj.metadata ?? {};
  const secret =
    namespace && name ? ctx.caches.get<V1Secret>("Secret", namespace, natsCredsSecretName(name)) : undefined;
  return accountOfSecret(obj, secret, ctx.natsIssuer, !!ctx.natsAccounts).account;
}

/** Whether the runtime's data is in an account of its own on the server (not on one that authenticates no client). */
const ownAccount = async (ctx: AccountContext, account: string | undefined): Promise<boolean> =>
  !!ctx.natsAccounts && !!account && account !== ctx.natsIssuer?.accountKey && (await ctx.natsAccounts.isolating());

/** `fn` with a JetStream manager of the account of the resource's runtime. */
export async function inRuntimeAccount<T>(
  ctx: AccountContext,
  obj: KubernetesObject,
  fn: (jsm: JetStreamManager) => Promise<T>,
  account = runtimeAccountOf(ctx, obj),
): Promise<T> {
  if (account && (await ownAccount(ctx, account))) return ctx.natsAccounts!.withAccount(account, fn);
  if (!ctx.nats?.isConnected) throw new Error("the operator is not connected to NATS");
  return fn(ctx.nats.jsm);
}

/**
 * Delete what a deleted resource's runtime kept. In an account of its own: every stream there
 * (whatever it was named; KV buckets are streams too), then the account itself, and what the
 * one-account model kept under its names in the shared account (`named`). In the shared
 * account: `named` only. Returns what was deleted.
 */
export async function deleteRuntimeData(
  ctx: AccountContext,
  obj: KubernetesObject,
  named: (jsm: JetStreamManager) => Promise<string[]>,
): Promise<string[]> {
  const account = runtimeAccountOf(ctx, obj);
  if (!account || !(await ownAccount(ctx, account))) return inRuntimeAccount(ctx, obj, named, account);
  const accounts = ctx.natsAccounts!;
  const label = `${obj.kind?.toLowerCase()}:${obj.metadata?.namespace}/${obj.metadata?.name}`;
  if (ctx.dataAccounts && obj.kind === "Agent") return deleteSharedAgent(ctx, obj, account, label);
  // Deleted already (the cleanup runs again on a cache that had not yet seen the resource go, or
  // in a new operator process after the one that deleted it), or never pushed: there is nothing
  // in it, and pushing the account to look into it would let its credential in. The resolver is
  // asked when this process does not know: it holds the account until it is deleted, which is
  // done only once the account's streams are.
  if (accounts.wasDeleted(account) || !(await accounts.onResolver(account)))
    return accounts.withAccount(ctx.natsIssuer!.accountKey, named);
  // On the resolver: pushed (again) by this process, to connect to it.
  await accounts.ensureAccount(obj.metadata?.uid ?? "", label, {
    kind: obj.kind,
    spec: (obj as { spec?: unknown }).spec,
  } as AccountResource);
  const deleted = await accounts.withAccount(account, async (jsm) => {
    const gone: string[] = [];
    for await (const stream of jsm.streams.names()) {
      try {
        await jsm.streams.delete(stream);
        gone.push(stream);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    return gone;
  });
  await accounts.deleteAccount(account, label);
  deleted.push(`the NATS account ${account}`);
  deleted.push(...(await accounts.withAccount(ctx.natsIssuer!.accountKey, named)));
  return deleted;
}

/**
 * A deleted Agent of the isolated layout: its consumers and KV keys in its tenant's data account
 * (data-accounts.ts deleteAgent), then its own account, which holds nothing (JetStream off);
 * and when it was the namespace's last Agent, the tenant's streams and data account.
 */
async function deleteSharedAgent(
  ctx: AccountContext,
  obj: KubernetesObject,
  account: string,
  label: string,
): Promise<string[]> {
  const accounts = ctx.natsAccounts!;
  const namespace = obj.metadata?.namespace ?? "";
  const deleted = await ctx.dataAccounts!.deleteAgent(namespace, account);
  if (!accounts.wasDeleted(account) && (await accounts.onResolver(account))) {
    await accounts.deleteAccount(account, label);
    deleted.push(`the NATS account ${account}`);
  }
  const others = ctx.caches
    .list<KubernetesObject>("Agent")
    .some(
      (o) =>
        o.metadata?.namespace === namespace && o.metadata?.uid !== obj.metadata?.uid && !o.metadata?.deletionTimestamp,
    );
  if (!others) deleted.push(...(await ctx.dataAccounts!.deleteTenant(namespace)));
  return deleted;
}

/** An Agent's status summary on the isolated layout: read in its tenant's data account (traffic-summary.ts readSharedAgent). */
export async function readTenantAgent(ctx: AccountContext, obj: KubernetesObject): Promise<Reading | undefined> {
  const account = runtimeAccountOf(ctx, obj);
  const namespace = obj.metadata?.namespace;
  // Not before its namespace's data account is made: a connection there would be refused meanwhile.
  if (!account || !namespace || !ctx.dataAccounts?.made(namespace)) return undefined;
  return ctx.natsAccounts!.withAccount(
    ctx.dataAccounts.accountOf(namespace),
    (jsm) => readSharedAgent(jsm, account, agentKeyOf(obj)),
    dataAccountOperatorPermissions(),
  );
}
