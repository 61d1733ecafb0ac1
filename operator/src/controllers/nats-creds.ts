// The NATS credential of each Agent and Relay: a Secret `<name>-nats` with a `.creds` file whose
// user JWT allows only that runtime's own subjects (runtime/src/contract/nats-permissions.ts),
// re-issued at 2/3 of its lifetime or when the permissions it should carry change. The runtime
// re-reads the mounted file on every reconnect, so a renewal needs no restart.
import type { V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { NatsPermissions } from "../../../runtime/src/contract/nats-permissions.ts";
import { ChildConflictError, controlledBy } from "../kube/apply.ts";
import type { Kube } from "../kube/client.ts";
import { CredentialIssuer, generateKeys, KEY_FIELDS, renewalDue, SERVER_CONFIG_FIELD, serverConfig, type NatsKeys } from "../nats-credentials.ts";
import type { ReconcileContext } from "./reconciler.ts";
import { childMeta, type Owner } from "./runtime.ts";

/** The Secret key of the credentials file. */
export const CREDS_KEY = "nats.creds";
/** The Secret key of the account's public key (with the signing seed, all a bring-your-own setup needs). */
export const ACCOUNT_FIELD = "account.pub";

export const natsCredsSecretName = (name: string): string => `${name}-nats`;

/**
 * Make sure `<name>-nats` holds a valid credential with exactly `permissions`. Returns what was
 * written and when to look again (just after the renewal is due).
 */
export async function ensureNatsCreds(
  ctx: ReconcileContext,
  owner: Owner,
  issuer: CredentialIssuer,
  permissions: NatsPermissions,
  now = Date.now(),
): Promise<{ applied: string[]; requeueAfterMs: number }> {
  const ns = owner.metadata.namespace;
  const name = natsCredsSecretName(owner.metadata.name);
  const current = ctx.caches.get<V1Secret>("Secret", ns, name) ?? (await ctx.kube.read<V1Secret>("v1", "Secret", ns, name));
  // A Secret of that name made by someone else is never overwritten.
  if (current && !controlledBy(current, owner.metadata.uid)) {
    throw new ChildConflictError(`Secret ${name} exists and is not controlled by this ${owner.kind}; rename or delete it to let the operator issue the NATS credential`);
  }
  const existing = current?.data?.[CREDS_KEY] ? Buffer.from(current.data[CREDS_KEY], "base64").toString("utf8") : undefined;
  const due = renewalDue(existing, permissions, issuer.accountKey);
  if (due > now) return { applied: [], requeueAfterMs: due - now + 1_000 };
  const creds = await issuer.issue(`${owner.kind.toLowerCase()}:${ns}/${owner.metadata.name}`, permissions, now);
  const secret: V1Secret = {
    apiVersion: "v1",
    kind: "Secret",
    type: "Opaque",
    metadata: childMeta(owner, name, current?.metadata?.resourceVersion ? { resourceVersion: current.metadata.resourceVersion } : {}),
    data: { [CREDS_KEY]: Buffer.from(creds).toString("base64") },
  };
  if (current) await ctx.kube.replace(secret);
  else await ctx.kube.createIfAbsent(secret);
  return { applied: [`Secret/${name}`], requeueAfterMs: renewalDue(creds, permissions, issuer.accountKey) - now + 1_000 };
}

/**
 * The account signing key, from the Secret `name` in the operator's namespace. A missing Secret
 * is created at first start with new keys and the nats-server configuration that trusts them
 * (`auth.conf`, read by the chart's NATS). A Secret with only `account.pub` and
 * `account-signing.seed` (a NATS of one's own) is used as it is.
 */
export async function loadNatsIssuer(kube: Kube, namespace: string, name: string, log: Logger): Promise<CredentialIssuer> {
  let secret = await kube.read<V1Secret>("v1", "Secret", namespace, name);
  if (!secret) {
    const keys = generateKeys();
    const data: Record<string, string> = { [SERVER_CONFIG_FIELD]: await serverConfig(keys), [ACCOUNT_FIELD]: CredentialIssuer.fromKeys(keys).accountKey };
    for (const [k, field] of Object.entries(KEY_FIELDS)) data[field] = keys[k as keyof NatsKeys];
    const stringData = data;
    const created = await kube.createIfAbsent<V1Secret>({
      apiVersion: "v1",
      kind: "Secret",
      type: "Opaque",
      metadata: { name, namespace, labels: { "app.kubernetes.io/part-of": "ifp-operator", "app.kubernetes.io/component": "nats" } },
      stringData,
    });
    if (created) log.info({ secret: `${namespace}/${name}` }, "generated the NATS operator, account and signing keys");
    secret = await kube.read<V1Secret>("v1", "Secret", namespace, name);
  }
  const field = (k: string) => (secret?.data?.[k] ? Buffer.from(secret.data[k], "base64").toString("utf8").trim() : undefined);
  const account = field(ACCOUNT_FIELD);
  const signing = field(KEY_FIELDS.signing);
  if (!account || !signing) throw new Error(`Secret ${namespace}/${name} needs the keys ${ACCOUNT_FIELD} and ${KEY_FIELDS.signing}`);
  return new CredentialIssuer(account, signing);
}
