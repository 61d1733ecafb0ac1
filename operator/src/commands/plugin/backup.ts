// `kubectl ifp backup` and `kubectl ifp restore` (docs/backup.md): what an install needs to be
// rebuilt — the install CA's Secret (its keys and its marks key), the NATS operator, system and
// account keys (the operator's account Secret), each Agent's signing Secret, the Agents and
// Relays themselves, and the JetStream data of every runtime's account (inboxes, outboxes, KV
// buckets, relay streams) as the server's own stream snapshots — in one archive
// (backup-archive.ts), and that archive put back.
//
// The plugin reaches NATS at --nats-url (a port-forward to the chart's NATS Service, or any
// address of it the admin's machine reaches), as a user of each runtime's account that it issues
// itself, for a few minutes, with the install's account signing key from the account Secret — the
// key the operator issues every runtime's credential with — allowed only the stream API and the
// snapshot subjects. No seed, key or credential is printed or logged; the archive holds them, so
// it is written with mode 0600 and is to be kept as a secret.
import canonicalize from "canonicalize";
import type { KubernetesObject, V1Secret } from "@kubernetes/client-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";
import { isNotFound } from "../../../../runtime/src/contract/nats.ts";
import { childNames } from "../../reconcile/names.ts";
import { accountOfSecret, issuerOfSecret, natsCredsSecretName } from "../../concerns/nats/runtime-credential.ts";
import type { CredentialIssuer } from "../../concerns/nats/credential-issuer.ts";
import { type Archive, type ArchiveInput, type Manifest, writeArchive } from "./backup-archive.ts";
import { restoreStream, snapshotStream, type StreamSnapshot } from "./jetstream-snapshot.ts";
import {
  apiMessage,
  type Connection,
  GROUP,
  type Kind,
  listResources,
  must,
  type Obj,
  orAbsent,
  PLURAL,
  PluginError,
  statusOf,
  VERSION,
} from "./kube.ts";
import { findOperator, operatorFlag } from "./status.ts";

/** The inbox prefix of the plugin's NATS users: the only subjects they may subscribe to. */
const INBOX = "_INBOX_IFP_BACKUP";
/** How long a NATS user the plugin issues itself is valid. */
const USER_LIFETIME_MS = 15 * 60_000;
/** What that user may publish: the stream API of its account, and the snapshots' flow control and chunks. */
const PERMISSIONS = {
  pub: [
    "$JS.API.INFO",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.DELETE.*",
    "$JS.API.STREAM.SNAPSHOT.*",
    "$JS.API.STREAM.RESTORE.*",
    "$JS.SNAPSHOT.>",
  ],
  sub: [`${INBOX}.>`],
};

export interface NatsOptions {
  /** Where the install's NATS is reached from here. */
  natsUrl?: string;
  /** The name its certificate is checked for (TLS); default the URL's host. */
  natsServerName?: string;
}

type Say = (line: string) => void;
type Owner = NonNullable<Manifest["streams"][number]["owner"]>;

const json = (o: unknown) => Buffer.from(`${JSON.stringify(o, null, 2)}\n`);
const same = (a: unknown, b: unknown) => canonicalize(a ?? null) === canonicalize(b ?? null);
const label = (o: { kind: string; namespace: string; name: string }) =>
  `${o.kind.toLowerCase()} ${o.namespace}/${o.name}`;

/** A Secret as it is kept: its name, type, labels, annotations and data; nothing the API server or an owner set. */
function keptSecret(s: V1Secret): V1Secret {
  const { name, namespace, labels, annotations } = s.metadata ?? {};
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: s.type ?? "Opaque",
    metadata: { name, namespace, ...(labels ? { labels } : {}), ...(annotations ? { annotations } : {}) },
    data: s.data ?? {},
  };
}

/** An Agent or Relay as it is kept: its name, labels, annotations and spec; its status is the operator's to write again. */
function keptResource(o: Obj): Obj {
  const { name, namespace, labels, annotations } = o.metadata ?? {};
  const kept = { ...(annotations ?? {}) };
  delete kept["kubectl.kubernetes.io/last-applied-configuration"];
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: o.kind,
    metadata: {
      name,
      namespace,
      ...(labels ? { labels } : {}),
      ...(Object.keys(kept).length ? { annotations: kept } : {}),
    },
    spec: o.spec ?? {},
  };
}

const readSecret = (c: Connection, namespace: string, name: string) =>
  orAbsent(() => c.core.readNamespacedSecret({ namespace, name }), `Secret ${namespace}/${name}`);

/** The account a resource's runtime keeps its data in, as the operator finds it; undefined before it has a credential. */
async function runtimeAccount(c: Connection, issuer: CredentialIssuer | undefined, obj: Obj) {
  const ns = obj.metadata.namespace as string;
  const creds = await readSecret(c, ns, natsCredsSecretName(obj.metadata.name));
  // Without the install's keys NATS authenticates no client: everything is in its one account.
  if (!issuer) return "";
  if (!creds) return undefined;
  return accountOfSecret(obj, creds, issuer, issuer.accountPerRuntime).account;
}

/** A connection to NATS as a short-lived user of `account` (none: a server that authenticates no client). */
async function natsIn(
  opts: NatsOptions,
  issuer: CredentialIssuer | undefined,
  account: string,
  caPem: string | undefined,
): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
  if (!opts.natsUrl) throw new PluginError("the JetStream data needs --nats-url (docs/backup.md)");
  const url = new URL(opts.natsUrl.includes("://") ? opts.natsUrl : `nats://${opts.natsUrl}`);
  const tls = url.protocol === "tls:" || opts.natsServerName !== undefined;
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: opts.natsUrl,
      name: "kubectl-ifp backup",
      inboxPrefix: INBOX,
      reconnect: false,
      timeout: 10_000,
      ...(issuer && account
        ? {
            authenticator: credsAuthenticator(
              new TextEncoder().encode(
                await issuer.issue("kubectl-ifp-backup", PERMISSIONS, Date.now(), USER_LIFETIME_MS, account),
              ),
            ),
          }
        : {}),
      // The transport hands these to tls.connect, servername included (the name the certificate is checked for).
      ...(tls
        ? {
            tls: {
              ...(caPem ? { ca: caPem } : {}),
              servername: opts.natsServerName ?? url.hostname,
            } as NodeConnectionOptions["tls"],
          }
        : {}),
    });
  } catch (err) {
    throw new PluginError(`cannot connect to NATS at ${opts.natsUrl}: ${(err as Error).message}`);
  }
  return { nc, jsm: await jetstreamManager(nc, { timeout: 30_000 }) };
}

/** Where the install keeps its CA and NATS keys: the operator's Deployment's flags. */
async function installOf(c: Connection, operatorNamespace: string | undefined): Promise<Manifest["install"]> {
  const dep = await findOperator(c, operatorNamespace);
  if (!dep)
    throw new PluginError(
      `no operator Deployment found${operatorNamespace ? ` in ${operatorNamespace}` : ""} (labels app.kubernetes.io/part-of=ifp-operator, app.kubernetes.io/component=operator; --operator-namespace)`,
    );
  const natsAccountSecret = operatorFlag(dep, "nats-account-secret");
  return {
    operatorNamespace: dep.metadata.namespace,
    caSecret: operatorFlag(dep, "ca-secret") ?? "ifp-operator-ca",
    ...(natsAccountSecret ? { natsAccountSecret } : {}),
  };
}

/** The archive of the install: its keys, its Agents and Relays (of `namespace`, else every one), and their JetStream data. */
export async function backup(
  c: Connection,
  opts: NatsOptions & { namespace?: string; operatorNamespace?: string; skipData?: boolean },
  say: Say,
): Promise<Buffer> {
  const install = await installOf(c, opts.operatorNamespace);
  const files: ArchiveInput["files"] = [];
  const streams: Manifest["streams"] = [];
  const addSecret = (s: V1Secret) =>
    files.push({
      path: `secrets/${s.metadata!.namespace}/${s.metadata!.name}.json`,
      kind: "secret",
      content: json(keptSecret(s)),
    });
  const ns = install.operatorNamespace;
  const ca = await readSecret(c, ns, install.caSecret);
  if (!ca) throw new PluginError(`the install CA's Secret ${ns}/${install.caSecret} does not exist`);
  addSecret(ca);
  let issuer: CredentialIssuer | undefined;
  if (install.natsAccountSecret) {
    const keys = await readSecret(c, ns, install.natsAccountSecret);
    if (!keys) throw new PluginError(`the NATS account Secret ${ns}/${install.natsAccountSecret} does not exist`);
    addSecret(keys);
    issuer = issuerOfSecret(keys);
    install.account = issuer.accountKey;
  }
  const resources: Obj[] = [];
  for (const kind of ["Agent", "Relay"] as Kind[]) {
    for (const o of await listResources(c, kind, opts.namespace)) {
      o.kind = kind;
      resources.push(o);
      files.push({
        path: `resources/${o.metadata.namespace}/${kind.toLowerCase()}-${o.metadata.name}.json`,
        kind: "resource",
        content: json(keptResource(o)),
      });
      if (kind !== "Agent") continue;
      const name = o.spec?.signing?.secretName ?? childNames(o.metadata.name).signingSecret;
      const signing = await readSecret(c, o.metadata.namespace, name);
      if (signing) addSecret(signing);
      else say(`${label({ kind, ...o.metadata })}: no signing Secret ${name} yet (the operator makes it)`);
    }
  }
  if (!opts.skipData) {
    // One pass per account: a runtime's own, or the shared one (every runtime kept there, once).
    const accounts = new Map<string, Obj[]>();
    for (const o of resources) {
      const account = await runtimeAccount(c, issuer, o);
      if (account === undefined) {
        say(`${label({ kind: o.kind, ...o.metadata })}: no NATS credential yet, so no JetStream data`);
        continue;
      }
      accounts.set(account, [...(accounts.get(account) ?? []), o]);
    }
    const caPem = ca.data?.["ca.crt"] ? Buffer.from(ca.data["ca.crt"], "base64").toString() : undefined;
    for (const [account, owners] of accounts) {
      const shared = !account || account === issuer?.accountKey;
      const owner: Owner | undefined = shared
        ? undefined
        : { kind: owners[0].kind, namespace: owners[0].metadata.namespace, name: owners[0].metadata.name };
      const dir = owner ? `jetstream/${owner.namespace}/${owner.kind.toLowerCase()}-${owner.name}` : "jetstream/shared";
      const { nc, jsm } = await natsIn(opts, issuer, account, caPem);
      try {
        for await (const stream of jsm.streams.names()) {
          const snap = await snapshotStream(nc, stream, `${INBOX}.snapshot.${streams.length}`);
          files.push(
            { path: `${dir}/${stream}.json`, kind: "stream-meta", content: json(snap.meta) },
            { path: `${dir}/${stream}.tar.s2`, kind: "stream-data", content: snap.data },
          );
          streams.push({
            ...(owner ? { owner } : {}),
            stream,
            meta: `${dir}/${stream}.json`,
            data: `${dir}/${stream}.tar.s2`,
            messages: snap.meta.state.messages,
            lastSeq: snap.meta.state.last_seq,
          });
          say(
            `stream ${stream} of ${owner ? label(owner) : "the shared account"}: ${snap.meta.state.messages} messages`,
          );
        }
      } finally {
        await nc.close();
      }
    }
  }
  const { versionLine } = await import("../../../../runtime/src/util/version.ts");
  return writeArchive({
    created: new Date().toISOString(),
    plugin: versionLine("kubectl-ifp"),
    install,
    files,
    streams,
  });
}

interface Planned<T> {
  path: string;
  want: T;
  current: T | undefined;
  action: "create" | "unchanged" | "replace";
}

/**
 * A Secret or resource of the archive, read as what its path says it is: a Secret at
 * `secrets/NS/NAME.json`, an Agent or Relay at `resources/NS/KIND-NAME.json`; anything else is refused.
 */
function parse<T>(a: Archive, path: string): T {
  let o: Obj;
  try {
    o = JSON.parse(a.files.get(path)!.toString("utf8"));
  } catch {
    throw new PluginError(`${path} in the archive is not JSON`);
  }
  const { namespace, name } = (o?.metadata ?? {}) as { namespace?: unknown; name?: unknown };
  const expected =
    o?.kind === "Secret"
      ? `secrets/${namespace}/${name}.json`
      : o?.kind === "Agent" || o?.kind === "Relay"
        ? `resources/${namespace}/${String(o.kind).toLowerCase()}-${name}.json`
        : undefined;
  if (typeof namespace !== "string" || typeof name !== "string" || expected !== path)
    throw new PluginError(`${path} in the archive does not hold what its name says`);
  return o as T;
}

/** The archive put back into the cluster the kubeconfig names. Throws a PluginError listing what it refused. */
export async function restore(
  c: Connection,
  a: Archive,
  opts: NatsOptions & { force: boolean; keysOnly: boolean; timeoutMs: number },
  say: Say,
): Promise<void> {
  const m = a.manifest;
  const byKind = (k: string) => m.files.filter((f) => f.kind === k).map((f) => f.path);
  if (!opts.keysOnly && m.streams.length && !opts.natsUrl)
    throw new PluginError(
      `the archive holds ${m.streams.length} JetStream streams: give --nats-url (or --keys-only to restore the keys alone)`,
    );
  // Plan first: nothing is written while anything would be refused.
  const secrets: Planned<V1Secret>[] = [];
  for (const path of byKind("secret")) {
    const want = parse<V1Secret>(a, path);
    const { namespace, name } = want.metadata as { namespace: string; name: string };
    const now = await readSecret(c, namespace, name);
    const unchanged = now && same(now.data, want.data) && (now.type ?? "Opaque") === want.type;
    secrets.push({ path, want, current: now, action: !now ? "create" : unchanged ? "unchanged" : "replace" });
  }
  const resources: Planned<Obj>[] = [];
  if (!opts.keysOnly)
    for (const path of byKind("resource")) {
      const want = parse<Obj>(a, path);
      const { namespace, name } = want.metadata;
      const plural = PLURAL[want.kind as Kind];
      if (!plural) throw new PluginError(`${path}: not an Agent or Relay`);
      const now = (await orAbsent(
        () => c.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name }),
        label({ kind: want.kind, namespace, name }),
      )) as Obj | undefined;
      resources.push({
        path,
        want,
        current: now,
        action: !now ? "create" : same(now.spec, want.spec) ? "unchanged" : "replace",
      });
    }
  const refused = [...secrets, ...resources].filter((p) => p.action === "replace");
  if (refused.length && !opts.force)
    throw new PluginError(
      `refused: the cluster holds ${refused
        .map((p) => `${p.want.kind} ${p.want.metadata.namespace}/${p.want.metadata.name}`)
        .join(
          ", ",
        )} with other contents than the archive (another install's, or changed since); nothing was written. --force replaces them`,
    );
  for (const namespace of new Set([...secrets, ...resources].map((p) => p.want.metadata.namespace as string))) {
    if (await orAbsent(() => c.core.readNamespace({ name: namespace }), `namespace ${namespace}`)) continue;
    await must(() => c.core.createNamespace({ body: { metadata: { name: namespace } } }), `namespace ${namespace}`);
    say(`namespace ${namespace}: created`);
  }
  for (const p of secrets) {
    const { namespace, name } = p.want.metadata as { namespace: string; name: string };
    if (p.action === "create")
      await must(() => c.core.createNamespacedSecret({ namespace, body: p.want }), `Secret ${namespace}/${name}`);
    if (p.action === "replace")
      await must(
        () =>
          c.core.replaceNamespacedSecret({
            namespace,
            name,
            body: {
              ...p.want,
              metadata: { ...p.want.metadata, resourceVersion: p.current!.metadata!.resourceVersion },
            },
          }),
        `Secret ${namespace}/${name}`,
      );
    say(
      `secret ${namespace}/${name}: ${p.action === "create" ? "created" : p.action === "replace" ? "replaced" : "unchanged"}`,
    );
  }
  if (opts.keysOnly) return;

  // The runtimes of what the archive has data of start only once it is back: created with
  // spec.replicas 0, their replicas given back after.
  const withData = new Set(
    m.streams.flatMap((s) => (s.owner ? [`${s.owner.kind}/${s.owner.namespace}/${s.owner.name}`] : [])),
  );
  const held: Obj[] = [];
  for (const p of resources) {
    const { namespace, name } = p.want.metadata;
    const plural = PLURAL[p.want.kind as Kind];
    const key = `${p.want.kind}/${namespace}/${name}`;
    if (p.action === "create") {
      const hold = withData.has(key);
      const body = hold ? { ...p.want, spec: { ...p.want.spec, replicas: 0 } } : p.want;
      await must(
        () => c.custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, body }),
        key,
      );
      if (hold) held.push(p.want);
    } else if (p.action === "replace") {
      await replaceSpec(c, p.want.kind, namespace, name, () => p.want.spec);
    }
    say(
      `${label({ kind: p.want.kind, namespace, name })}: ${p.action === "create" ? "created" : p.action === "replace" ? "replaced" : "unchanged"}`,
    );
  }

  const failures: string[] = [];
  try {
    if (m.streams.length) await restoreData(c, a, opts, say, failures);
  } finally {
    for (const want of held) {
      const { namespace, name } = want.metadata;
      await replaceSpec(c, want.kind, namespace, name, (spec) => {
        const next = { ...spec };
        if (want.spec?.replicas === undefined) delete next.replicas;
        else next.replicas = want.spec.replicas;
        return next;
      });
      say(`${label({ kind: want.kind, namespace, name })}: replicas ${want.spec?.replicas ?? "default"}`);
    }
  }
  if (failures.length) throw new PluginError(`not restored: ${failures.join("; ")}`);
}

/** The resource's spec replaced by `next(spec)` at its current resourceVersion (again on a conflict). */
async function replaceSpec(c: Connection, kind: string, namespace: string, name: string, next: (spec: Obj) => Obj) {
  const plural = PLURAL[kind as Kind];
  for (let attempt = 0; ; attempt++) {
    const now = (await must(
      () => c.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name }),
      `${kind} ${namespace}/${name}`,
    )) as Obj;
    try {
      await c.custom.replaceNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural,
        name,
        body: { ...now, spec: next(now.spec ?? {}) },
      });
      return;
    } catch (err) {
      if (statusOf(err) !== 409 || attempt >= 5)
        throw new PluginError(`cannot write ${kind} ${namespace}/${name}: ${apiMessage(err)}`);
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Each account's streams restored: a runtime's into the account the operator gives it here, once it has. */
async function restoreData(
  c: Connection,
  a: Archive,
  opts: NatsOptions & { force: boolean; timeoutMs: number },
  say: Say,
  failures: string[],
): Promise<void> {
  const m = a.manifest;
  const keys = m.install.natsAccountSecret
    ? await readSecret(c, m.install.operatorNamespace, m.install.natsAccountSecret)
    : undefined;
  const issuer = keys ? issuerOfSecret(keys) : undefined;
  const ca = await readSecret(c, m.install.operatorNamespace, m.install.caSecret);
  const caPem = ca?.data?.["ca.crt"] ? Buffer.from(ca.data["ca.crt"], "base64").toString() : undefined;
  const groups = new Map<string, Manifest["streams"]>();
  for (const s of m.streams) {
    const key = s.owner ? `${s.owner.kind}/${s.owner.namespace}/${s.owner.name}` : "";
    groups.set(key, [...(groups.get(key) ?? []), s]);
  }
  for (const [, list] of groups) {
    const owner = list[0]!.owner;
    let account = issuer?.accountKey ?? "";
    if (owner) {
      const deadline = Date.now() + opts.timeoutMs;
      let found: string | undefined;
      while (found === undefined) {
        const obj = (await orAbsent(
          () =>
            c.custom.getNamespacedCustomObject({
              group: GROUP,
              version: VERSION,
              namespace: owner.namespace,
              plural: PLURAL[owner.kind],
              name: owner.name,
            }),
          label(owner),
        )) as KubernetesObject | undefined;
        if (obj) found = await runtimeAccount(c, issuer, obj);
        if (found !== undefined) break;
        if (Date.now() > deadline) break;
        await sleep(1_000);
      }
      if (found === undefined) {
        failures.push(`${label(owner)}: the operator gave it no NATS credential within ${opts.timeoutMs / 1000} s`);
        continue;
      }
      account = found;
    }
    const { nc, jsm } = await natsIn(opts, issuer, account, caPem);
    try {
      for (const s of list) {
        const what = `stream ${s.stream} of ${owner ? label(owner) : "the shared account"}`;
        try {
          const outcome = await restoreOne(nc, jsm, a, s, opts.force);
          say(`${what}: ${outcome}`);
        } catch (err) {
          failures.push(`${what}: ${(err as Error).message}`);
        }
      }
    } finally {
      await nc.close();
    }
  }
}

/** One stream put back: restored when absent or never written to; left when it already holds the archive's; else refused without force. */
async function restoreOne(
  nc: NatsConnection,
  jsm: JetStreamManager,
  a: Archive,
  s: Manifest["streams"][number],
  force: boolean,
): Promise<string> {
  const snapshot: StreamSnapshot = {
    meta: JSON.parse(a.files.get(s.meta)!.toString("utf8")),
    data: a.files.get(s.data)!,
  };
  if (snapshot.meta?.config?.name !== s.stream) throw new Error(`${s.meta} is not the snapshot of ${s.stream}`);
  for (let attempt = 0; ; attempt++) {
    const info = await jsm.streams.info(s.stream).catch((err) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    if (info) {
      const { messages, last_seq } = info.state;
      if (messages === s.messages && last_seq === s.lastSeq && last_seq > 0)
        return `already holds the archive's ${messages} messages`;
      if (last_seq > 0 && !force)
        throw new Error(`exists with ${messages} messages (last sequence ${last_seq}); --force replaces it`);
      // Empty since it was made (by the operator or a runtime before the restore), or replaced on --force.
      await jsm.streams.delete(s.stream).catch((err) => {
        if (!isNotFound(err)) throw err;
      });
    }
    try {
      const state = await restoreStream(nc, snapshot);
      return `restored, ${state.messages} messages`;
    } catch (err) {
      // Made again between the delete and the restore: once more.
      if (attempt >= 3 || !/already in use|exists/i.test((err as Error).message)) throw err;
    }
  }
}
