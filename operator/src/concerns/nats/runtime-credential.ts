// The NATS credential of each Agent and Relay: a Secret `<name>-nats` with a `.creds` file whose
// user JWT belongs to the runtime's own NATS account (made and pushed by the operator,
// accounts.ts) and allows only that runtime's own subjects
// (runtime/src/contract/nats-permissions.ts), re-issued at 2/3 of its lifetime or when the account
// or the permissions it should carry change. The runtime re-reads the mounted file on every
// reconnect, so a renewal needs no restart.
import { randomBytes } from "node:crypto";
import type { V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { NatsPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { API_VERSION } from "../../../../runtime/src/resources/schema.ts";
import { ChildConflictError, controlledBy } from "../../kube/apply.ts";
import { markedFor, ownedMark } from "../../reconcile/generated-mark.ts";
import type { Kube } from "../../kube/client.ts";
import {
  CredentialIssuer,
  credsFacts,
  type CredsFacts,
  generateKeys,
  KEY_FIELDS,
  renewalDue,
  SERVER_CONFIG_FIELD,
  serverConfig,
  type NatsKeys,
} from "./credential-issuer.ts";
import type { NatsAccounts } from "./accounts.ts";
import type { AccountResource } from "./account-limits.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { NatsContext } from "./context.ts";
import { childMeta } from "../../reconcile/names.ts";
import type { Owner } from "../../reconcile/settings.ts";

/** The Secret key of the credentials file. */
export const CREDS_KEY = "nats.creds";
/** The Secret key of the account's public key (with the signing seed, all a bring-your-own setup needs). */
export const ACCOUNT_FIELD = "account.pub";
/**
 * On a `<name>-nats` Secret whose credential is of the shared account (issued before accounts per
 * runtime): the generation of the resource when the operator first saw it so. The runtime stays
 * in the shared account, where its data is, until its resource's spec changes.
 */
export const SHARED_ACCOUNT_ANNOTATION = "ifp.dev/nats-shared-account-generation";

export const natsCredsSecretName = (name: string): string => `${name}-nats`;

const credsIn = (secret: V1Secret | undefined): string | undefined =>
  secret?.data?.[CREDS_KEY] ? Buffer.from(secret.data[CREDS_KEY], "base64").toString("utf8") : undefined;

/**
 * How a cached Secret's `nats.creds` holds the credential's facts instead of the file (not base64,
 * so never taken for a file): the operator's memory keeps no runtime's user seed, and the JWT's
 * signature is verified once per change of the Secret rather than at every pass. The prefix is
 * this process's own and random: a value written into the Secret through the API that looks held
 * is no credential file, and is held as none (then issued anew), never taken for verified facts.
 */
const HELD_FACTS = `ifp-held-facts-${randomBytes(8).toString("hex")}:`;

/**
 * The cache's form of a Secret (in place): a credentials file under `nats.creds` becomes its facts
 * (credsFacts; "null" when it is no valid credential, which is then issued again). A reader that
 * needs the file itself reads the Secret from the API server.
 */
export function holdNatsCredential(secret: V1Secret): void {
  const value = secret.data?.[CREDS_KEY];
  if (!value || value.startsWith(HELD_FACTS)) return;
  secret.data![CREDS_KEY] = HELD_FACTS + JSON.stringify(credsFacts(credsIn(secret)) ?? null);
}

/** The facts of the credential in a `<name>-nats` Secret, as the API server gives it or as the cache holds it. */
export function credsFactsIn(secret: V1Secret | undefined): CredsFacts | undefined {
  const value = secret?.data?.[CREDS_KEY];
  if (!value) return undefined;
  if (!value.startsWith(HELD_FACTS)) return credsFacts(credsIn(secret));
  return (JSON.parse(value.slice(HELD_FACTS.length)) as CredsFacts | null) ?? undefined;
}

/**
 * Which account a resource's runtime belongs in, from its `<name>-nats` Secret: the shared one
 * while a credential of the shared account is kept there for the resource's generation it was
 * first seen at (an install from before accounts per runtime), else its own.
 */
export function accountOfSecret(
  owner: { metadata?: { uid?: string; generation?: number } },
  secret: V1Secret | undefined,
  issuer: CredentialIssuer,
  perRuntime: boolean,
): { account: string; sharedSince?: string } {
  if (!perRuntime) return { account: issuer.accountKey };
  const generation = String(owner.metadata?.generation ?? "");
  if (credsFactsIn(secret)?.issuerAccount === issuer.accountKey) {
    const since = secret?.metadata?.annotations?.[SHARED_ACCOUNT_ANNOTATION];
    if (since === undefined || since === generation) return { account: issuer.accountKey, sharedSince: generation };
  }
  return { account: issuer.accountOf(owner.metadata?.uid ?? "") };
}

/**
 * Make sure `<name>-nats` holds a valid credential of the runtime's account with exactly
 * `permissions`, the account made on the server first within the limits `spec` gives it
 * (account-limits.ts). Returns what was written, the account, and when to look again (just
 * after the renewal is due).
 */
export async function ensureNatsCreds(
  ctx: Pick<ReconcileContext, "kube" | "caches" | "settings"> &
    Pick<NatsContext, "trust" | "natsAccounts" | "dataAccounts">,
  owner: Owner,
  issuer: CredentialIssuer,
  permissionsOf: (account: string) => NatsPermissions,
  spec: NonNullable<AccountResource["spec"]>,
  now = Date.now(),
): Promise<{ applied: string[]; requeueAfterMs: number; account: string }> {
  const ns = owner.metadata.namespace;
  const name = natsCredsSecretName(owner.metadata.name);
  const current =
    ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  // A Secret of that name made by someone else is never used or overwritten.
  const marks = ctx.trust.marks();
  if (current && !(controlledBy(current, owner.metadata.uid) && markedFor(current, marks, owner.metadata.uid))) {
    throw new ChildConflictError(
      `Secret ${name} exists and was not made by the operator for this ${owner.kind}; rename or delete it to let the operator issue the NATS credential`,
    );
  }
  const existing = credsFactsIn(current);
  const { account, sharedSince } = accountOfSecret(owner, current, issuer, !!ctx.natsAccounts);
  const permissions = permissionsOf(account);
  const label = `${owner.kind.toLowerCase()}:${ns}/${owner.metadata.name}`;
  if (ctx.natsAccounts && account !== issuer.accountKey)
    await ensureAccountOnServer(ctx, ctx.natsAccounts, owner, label, spec);
  const annotated =
    sharedSince === undefined || current?.metadata?.annotations?.[SHARED_ACCOUNT_ANNOTATION] === sharedSince;
  const due = renewalDue(existing, permissions, account);
  if (due > now && annotated) return { applied: [], requeueAfterMs: due - now + 1_000, account };
  // Only the annotation to add: the same credential again, its file read from the API server (the cache holds its facts).
  const kept = due > now ? credsIn(await ctx.kube.read<V1Secret>("v1", "Secret", ns, name)) : undefined;
  const creds =
    kept && renewalDue(credsFacts(kept), permissions, account) > now
      ? kept
      : await issuer.issue(label, permissions, now, undefined, account);
  const secret: V1Secret = {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: childMeta(owner, name, {
      ...(current?.metadata?.resourceVersion ? { resourceVersion: current.metadata.resourceVersion } : {}),
      annotations: {
        ...ownedMark(marks, ns, name, owner.metadata.uid),
        ...(sharedSince !== undefined ? { [SHARED_ACCOUNT_ANNOTATION]: sharedSince } : {}),
      },
    }),
    data: { [CREDS_KEY]: Buffer.from(creds).toString("base64") },
  };
  if (current) await ctx.kube.replace(secret);
  else await ctx.kube.createIfAbsent(secret);
  return {
    applied: [`Secret/${name}`],
    requeueAfterMs: renewalDue(credsFacts(creds), permissions, account) - now + 1_000,
    account,
  };
}

/**
 * The runtime's own account on the server before a credential of it is handed out (pushed once
 * per operator process, and again when its limits change). A server that authenticates no client has no accounts to push to: the
 * credential is issued all the same (it ignores it), and the resource is told once per process.
 */
async function ensureAccountOnServer(
  ctx: Pick<ReconcileContext, "kube" | "settings"> & Pick<NatsContext, "dataAccounts">,
  accounts: NatsAccounts,
  owner: Owner,
  label: string,
  spec: NonNullable<AccountResource["spec"]>,
): Promise<void> {
  const { name, namespace, uid } = owner.metadata;
  const isolated = owner.kind === "Agent" && ctx.dataAccounts;
  if (await accounts.isolating()) {
    // On the isolated layout its tenant's data account first: the runtime's account imports from it.
    const shared = isolated ? { dataAccount: await ctx.dataAccounts!.ensure(namespace) } : undefined;
    await accounts.ensureAccount(uid, label, { kind: owner.kind, spec } as AccountResource, shared);
    return;
  }
  if (isolated)
    throw new Error(
      `the NATS server at ${ctx.settings.natsUrl} authenticates no client: the isolated NATS layout (--nats-layout isolated) needs it in operator mode with a full resolver (docs/security.md)`,
    );
  if (accounts.toldOpen.has(uid)) return;
  await ctx.kube.event(
    { apiVersion: API_VERSION, kind: owner.kind, metadata: { name, namespace, uid } },
    "Warning",
    "NatsNotIsolated",
    `the NATS server at ${ctx.settings.natsUrl} authenticates no client: this ${owner.kind}'s runtime is in one account with every other, which can read and write its messages and state; run NATS in operator mode with a full resolver (docs/security.md)`,
  );
  accounts.toldOpen.add(uid);
}

/**
 * The account signing key, from the Secret `name` in the operator's namespace. A missing Secret
 * is created at first start with new keys and the nats-server configuration that trusts them
 * (`auth.conf`, read by the chart's NATS). With the operator and system account seeds there, each
 * runtime gets an account of its own; an `auth.conf` of the one-account model (memory resolver)
 * is then rewritten for the full resolver, which the chart's NATS reads at its next start. A
 * Secret with only `account.pub` and `account-signing.seed` (a NATS of one's own) keeps every
 * runtime in that one account.
 */
export async function loadNatsIssuer(
  kube: Kube,
  namespace: string,
  name: string,
  log: Logger,
): Promise<CredentialIssuer> {
  const secret =
    (await kube.read<V1Secret>("v1", "Secret", namespace, name)) ??
    (await createKeysSecret(kube, namespace, name, log));
  const issuer = issuerOfSecret(secret, `${namespace}/${name}`);
  const field = secretField(secret);
  const operator = field(KEY_FIELDS.operator);
  const system = field(KEY_FIELDS.system);
  const signing = field(KEY_FIELDS.signing)!;
  const conf = field(SERVER_CONFIG_FIELD);
  const accountSeed = field(KEY_FIELDS.account);
  if (issuer.accountPerRuntime && conf !== undefined && accountSeed && !/^resolver: \{ type: full\b/m.test(conf))
    // Written by an operator of the one-account model: the same keys, the full resolver.
    await rewriteForFullResolver(
      kube,
      secret!,
      { operator: operator!, system: system!, account: accountSeed, signing },
      log,
    );
  return issuer;
}

const secretField = (secret: V1Secret | undefined) => (k: string) =>
  secret?.data?.[k] ? Buffer.from(secret.data[k], "base64").toString("utf8").trim() : undefined;

/** Pure: the issuer of the keys of an account Secret (the operator and system keys turn on one account per runtime). */
export function issuerOfSecret(
  secret: V1Secret | undefined,
  name = `${secret?.metadata?.namespace}/${secret?.metadata?.name}`,
): CredentialIssuer {
  const field = secretField(secret);
  const account = field(ACCOUNT_FIELD);
  const signing = field(KEY_FIELDS.signing);
  if (!account || !signing) throw new Error(`Secret ${name} needs the keys ${ACCOUNT_FIELD} and ${KEY_FIELDS.signing}`);
  const operator = field(KEY_FIELDS.operator);
  const system = field(KEY_FIELDS.system);
  return new CredentialIssuer(account, signing, operator && system ? { operator, system } : undefined);
}

/** The Secret of new keys and the server configuration that trusts them, as read back. */
async function createKeysSecret(
  kube: Kube,
  namespace: string,
  name: string,
  log: Logger,
): Promise<V1Secret | undefined> {
  const keys = generateKeys();
  const stringData: Record<string, string> = {
    [SERVER_CONFIG_FIELD]: await serverConfig(keys),
    [ACCOUNT_FIELD]: CredentialIssuer.fromKeys(keys).accountKey,
  };
  for (const [k, field] of Object.entries(KEY_FIELDS)) stringData[field] = keys[k as keyof NatsKeys];
  const created = await kube.createIfAbsent<V1Secret>({
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: {
      name,
      namespace,
      labels: { "app.kubernetes.io/part-of": "ifp-operator", "app.kubernetes.io/component": "nats" },
    },
    stringData,
  });
  if (created) log.info({ secret: `${namespace}/${name}` }, "generated the NATS operator, account and signing keys");
  return kube.read<V1Secret>("v1", "Secret", namespace, name);
}

/** The server configuration of `secret` written again for the full resolver (one account per runtime). */
async function rewriteForFullResolver(kube: Kube, secret: V1Secret, keys: NatsKeys, log: Logger): Promise<void> {
  const where = `${secret.metadata?.namespace}/${secret.metadata?.name}`;
  try {
    await kube.replace<V1Secret>({
      ...secret,
      apiVersion: "v1",
      kind: "Secret",
      data: { ...secret.data, [SERVER_CONFIG_FIELD]: Buffer.from(await serverConfig(keys)).toString("base64") },
    });
    log.warn(
      { secret: where },
      "rewrote the NATS server configuration for one account per runtime (full resolver); NATS takes it at its next start: restart its pods",
    );
  } catch (err) {
    log.error(
      { secret: where, err: String(err) },
      "could not rewrite the NATS server configuration for one account per runtime",
    );
  }
}
