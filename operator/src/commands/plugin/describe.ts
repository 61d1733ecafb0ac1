// `kubectl ifp describe agent|relay NAME`: what the operator renders for it, its keys and their
// states, its peers, and its NATS credential's expiry. Secrets are named with their keys, never
// their values; the NATS credential's JWT (public, signed by the account) is read for its expiry
// and the rest of the file dropped unread.
import { GROUP, type Connection, type Kind, must, type Obj, orAbsent, PLURAL, PluginError, VERSION } from "./kube.ts";
import { execIfp, runtimePod } from "./exec.ts";
import { ago, table, until } from "./output.ts";

export interface Child {
  kind: string;
  name: string;
  /** Secrets: the keys of data, never the values. */
  keys?: string[];
  /** Deployments: ready/replicas. */
  ready?: string;
}

export interface Description {
  kind: Kind;
  namespace: string;
  name: string;
  ready: { status: string; reason?: string; message?: string };
  conditions: { type: string; status: string; reason?: string; message?: string }[];
  agentId?: string;
  endpoint?: string;
  url?: string;
  replicas: { desired?: number; current?: number; ready?: number };
  children: Child[];
  signingKeys: {
    keyId: string;
    status: string;
    publicKey?: string;
    created?: string;
    retired?: string;
    revokeAt?: string;
    revoked?: string;
  }[];
  encryptionKey?: { keyId: string; publicKey: string };
  peers: { agentId: string; url?: string; keys: number }[];
  peerSelector?: unknown;
  /** An Agent's spec.outbound.resiliency: its outbound deliveries' breaker, cap and timeout per destination. */
  resiliency?: { failureThreshold?: number; coolDown?: string; maxInFlight?: number; timeout?: string };
  /** An Agent's destinations whose circuit is open or half-open, as one runtime pod's `ifp circuits` lists them; or why they cannot be read. */
  circuits?: Circuits | { error: string };
  stream?: unknown;
  natsCredential?: { secret: string; expires?: string; issued?: string; error?: string };
}

/** Pure: the expiry and issue time of a NATS `.creds` file's JWT; the seed part is never looked at. */
export function credsTimes(creds: string): { expires?: string; issued?: string } {
  const m = /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.-]+)\s*------END NATS USER JWT------/.exec(creds);
  if (!m) throw new Error("no user JWT in the credential");
  const payload = JSON.parse(Buffer.from(m[1]!.split(".")[1] ?? "", "base64url").toString("utf8")) as {
    exp?: number;
    iat?: number;
  };
  return {
    ...(payload.exp ? { expires: new Date(payload.exp * 1000).toISOString() } : {}),
    ...(payload.iat ? { issued: new Date(payload.iat * 1000).toISOString() } : {}),
  };
}

/** The local API's GET /circuits answer. */
export interface Circuits {
  total: number;
  circuits: { destination: string; state: string; failures: number; open_until?: string }[];
}

/** The circuits one ready runtime pod of the Agent lists (`ifp circuits` in its runtime container). */
async function circuitsOf(c: Connection, namespace: string, name: string): Promise<Circuits | { error: string }> {
  try {
    const pod = await runtimePod(c, namespace, name);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const code = await execIfp(c, pod, ["circuits", "--local-api", pod.localApi], {
      out: (b) => out.push(b),
      err: (b) => err.push(b),
    });
    const text = Buffer.concat(out).toString("utf8");
    if (code !== 0 || !text.startsWith("200 "))
      return {
        error: `ifp circuits in pod ${pod.pod} failed: ${Buffer.concat(err).toString("utf8").trim() || text.trim()}`,
      };
    return JSON.parse(text.slice(4)) as Circuits;
  } catch (e) {
    return { error: (e as Error).message };
  }
}

const items = (l: unknown) => ((l as { items?: Obj[] }).items ?? []) as Obj[];

export async function describeResource(
  c: Connection,
  kind: Kind,
  namespace: string,
  name: string,
): Promise<Description> {
  const plural = PLURAL[kind];
  const o = await orAbsent(
    () => c.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name }),
    `${kind} ${namespace}/${name}`,
  );
  if (!o) throw new PluginError(`${kind.toLowerCase()} ${JSON.stringify(name)} not found in namespace ${namespace}`);
  const r = o as Obj;
  const children = await childrenOf(c, namespace, name, r);
  const natsCredential = await natsCredentialOf(c, namespace, `${name}-nats`);
  const conditions = ((r.status?.conditions ?? []) as Description["conditions"]).map((x) => ({
    type: x.type,
    status: x.status,
    ...(x.reason ? { reason: x.reason } : {}),
    ...(x.message ? { message: x.message } : {}),
  }));
  const ready = conditions.find((x) => x.type === "Ready") ?? { status: "Unknown" };
  const keys = (r.status?.signingKeys ?? []) as Description["signingKeys"];
  const current = r.status?.signingKey;
  return {
    kind,
    namespace,
    name,
    ready,
    conditions,
    ...(r.spec?.agentId ? { agentId: r.spec.agentId } : {}),
    ...(r.status?.endpoint ? { endpoint: r.status.endpoint } : {}),
    ...(kind === "Relay" && r.spec?.url ? { url: r.spec.url } : {}),
    replicas: { desired: r.spec?.replicas, current: r.status?.replicas, ready: r.status?.readyReplicas },
    children: children.sort((a, b) => a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name)),
    signingKeys: keys.length
      ? keys
      : current
        ? [{ keyId: current.keyId, status: "active", publicKey: current.publicKey, created: current.created }]
        : [],
    ...(r.status?.encryptionKey ? { encryptionKey: r.status.encryptionKey } : {}),
    peers: ((kind === "Agent" ? r.spec?.peers : r.spec?.agents) ?? []).map((p: Obj) => ({
      agentId: p.agentId,
      ...(p.url ? { url: p.url } : {}),
      keys: (p.keys ?? []).length,
    })),
    ...(r.spec?.peerSelector ? { peerSelector: r.spec.peerSelector } : {}),
    ...(kind === "Agent" && r.spec?.outbound?.resiliency ? { resiliency: r.spec.outbound.resiliency } : {}),
    ...(kind === "Agent" ? { circuits: await circuitsOf(c, namespace, name) } : {}),
    ...(r.status?.stream ? { stream: r.status.stream } : {}),
    natsCredential,
  };
}

/** What the operator made for the resource (its labelled children), and the Secrets it names, with their keys (never values). */
async function childrenOf(c: Connection, namespace: string, name: string, r: Obj): Promise<Child[]> {
  const labelSelector = `app.kubernetes.io/instance=${name},app.kubernetes.io/managed-by=ifp-operator`;
  const [deps, svcs, cms, secrets, policies] = await Promise.all([
    must(() => c.apps.listNamespacedDeployment({ namespace, labelSelector }), "Deployments"),
    must(() => c.core.listNamespacedService({ namespace, labelSelector }), "Services"),
    must(() => c.core.listNamespacedConfigMap({ namespace, labelSelector }), "ConfigMaps"),
    orAbsent(() => c.core.listNamespacedSecret({ namespace, labelSelector }), "Secrets").catch(() => undefined),
    must(() => c.networking.listNamespacedNetworkPolicy({ namespace, labelSelector }), "NetworkPolicies"),
  ]);
  const children: Child[] = [
    ...items(deps).map((d) => ({
      kind: "Deployment",
      name: d.metadata.name,
      ready: `${d.status?.readyReplicas ?? 0}/${d.spec?.replicas ?? 0}`,
    })),
    ...items(svcs).map((s) => ({ kind: "Service", name: s.metadata.name })),
    ...items(cms).map((m) => ({ kind: "ConfigMap", name: m.metadata.name })),
    ...(secrets ? items(secrets) : []).map((s) => ({
      kind: "Secret",
      name: s.metadata.name,
      keys: Object.keys(s.data ?? {}).sort(),
    })),
    ...items(policies).map((p) => ({ kind: "NetworkPolicy", name: p.metadata.name })),
  ];
  // Secrets the resource names but the operator did not make (spec.signing.secretName, spec.tls.secretName).
  for (const ref of [r.status?.signingKey?.secretName, r.status?.tlsSecretName]) {
    if (!ref || children.some((ch) => ch.kind === "Secret" && ch.name === ref)) continue;
    const s = await orAbsent(() => c.core.readNamespacedSecret({ name: ref, namespace }), `Secret ${ref}`).catch(
      () => undefined,
    );
    children.push({ kind: "Secret", name: ref, keys: s ? Object.keys(s.data ?? {}).sort() : [] });
  }
  return children;
}

/** The resource's NATS credential: when it was issued and when it expires, or why it cannot be read. */
async function natsCredentialOf(
  c: Connection,
  namespace: string,
  natsSecret: string,
): Promise<Description["natsCredential"]> {
  try {
    const s = await orAbsent(
      () => c.core.readNamespacedSecret({ name: natsSecret, namespace }),
      `Secret ${natsSecret}`,
    );
    const creds = s?.data?.["nats.creds"];
    return creds
      ? { secret: natsSecret, ...credsTimes(Buffer.from(creds, "base64").toString("utf8")) }
      : { secret: natsSecret, error: s ? "no nats.creds in it" : "not found (no NATS accounts, or not issued yet)" };
  } catch (err) {
    return { secret: natsSecret, error: (err as Error).message };
  }
}

/** Pure: the description as people read it. */
export function renderDescription(d: Description, now = Date.now()): string {
  const out = [
    ...headerLines(d),
    ...conditionLines(d),
    ...childLines(d),
    ...(d.kind === "Agent" ? keyLines(d, now) : []),
    ...peerLines(d),
    ...(d.resiliency ? resiliencyLines(d.resiliency) : []),
    ...(d.circuits ? circuitLines(d.circuits) : []),
    ...(d.stream ? ["", `Stream:      ${JSON.stringify(d.stream)}`] : []),
    ...(d.natsCredential ? ["", natsCredentialLine(d.natsCredential, now)] : []),
  ];
  return `${out.join("\n")}\n`;
}

/** The resource's name, identity, address, readiness and replicas. */
function headerLines(d: Description): string[] {
  const out = [`${d.kind}:       ${d.namespace}/${d.name}`];
  if (d.agentId) out.push(`Agent ID:    ${d.agentId}`);
  if (d.endpoint) out.push(`Endpoint:    ${d.endpoint}`);
  if (d.url) out.push(`URL:         ${d.url}`);
  out.push(
    `Ready:       ${d.ready.status}${d.ready.reason ? ` ${d.ready.reason}` : ""}${d.ready.message ? ` — ${d.ready.message}` : ""}`,
  );
  out.push(
    `Replicas:    ${d.replicas.desired ?? "?"} desired, ${d.replicas.current ?? 0} running, ${d.replicas.ready ?? 0} ready`,
  );
  return out;
}

/** The conditions' table, when there are any. */
function conditionLines(d: Description): string[] {
  if (!d.conditions.length) return [];
  return [
    "",
    "Conditions:",
    indent(
      table(
        ["TYPE", "STATUS", "REASON", "MESSAGE"],
        d.conditions.map((x) => [x.type, x.status, x.reason ?? "", x.message ?? ""]),
      ),
    ),
  ];
}

/** What the operator renders for the resource: Deployments with their readiness, Secrets with their keys. */
function childLines(d: Description): string[] {
  return [
    "",
    "Renders:",
    d.children.length
      ? indent(
          table(
            ["KIND", "NAME", "DETAIL"],
            d.children.map((ch) => [
              ch.kind,
              ch.name,
              ch.ready ? `${ch.ready} ready` : ch.keys ? `keys: ${ch.keys.join(", ") || "(none)"}` : "",
            ]),
          ),
        )
      : "  nothing yet",
  ];
}

/** An Agent's signing keys with their states, and its encryption key. */
function keyLines(d: Description, now: number): string[] {
  return [
    "",
    "Signing keys:",
    d.signingKeys.length
      ? indent(
          table(
            ["KEY ID", "STATUS", "CREATED", "RETIRED", "REVOKE AT", "PUBLIC KEY"],
            d.signingKeys.map((k) => [
              k.keyId,
              k.status,
              k.created ?? "",
              k.retired ?? "",
              k.revokeAt ? `${k.revokeAt} (${until(k.revokeAt, now)})` : (k.revoked ?? ""),
              k.publicKey ?? "",
            ]),
          ),
        )
      : "  none published yet",
    `Encryption key: ${d.encryptionKey ? `${d.encryptionKey.keyId} ${d.encryptionKey.publicKey}` : "none (cannot receive encrypted messages)"}`,
  ];
}

/** An Agent's peers, or the Agents a Relay serves, and the selector that adds to them. */
function peerLines(d: Description): string[] {
  const out = [
    "",
    d.kind === "Agent" ? "Peers:" : "Agents served:",
    d.peers.length
      ? indent(
          table(
            ["AGENT ID", "URL", "KEYS"],
            d.peers.map((p) => [p.agentId, p.url ?? "", String(p.keys)]),
          ),
        )
      : "  none listed",
  ];
  if (d.peerSelector) out.push(`  and those of spec.peerSelector: ${JSON.stringify(d.peerSelector)}`);
  return out;
}

/** An Agent's per-destination resiliency (docs/reliability.md), and where each circuit's state is seen. */
function resiliencyLines(r: NonNullable<Description["resiliency"]>): string[] {
  return [
    "",
    `Outbound, per destination: the circuit opens after ${r.failureThreshold ?? "?"} failures in a row for ${r.coolDown ?? "?"}, then one probe; at most ${r.maxInFlight ?? "?"} in flight; ${r.timeout ?? "?"} per request`,
  ];
}

/** The destinations whose circuit is not closed, as one runtime pod sees them, or why they cannot be read. */
function circuitLines(c: NonNullable<Description["circuits"]>): string[] {
  if ("error" in c) return ["", `Circuits not closed: cannot be read (${c.error})`];
  if (c.total === 0) return ["", "Circuits not closed: none"];
  return [
    "",
    `Circuits not closed: ${c.total}${c.total > c.circuits.length ? ` (the ${c.circuits.length} opened last)` : ""}`,
    indent(
      table(
        ["DESTINATION", "STATE", "FAILURES", "OPEN UNTIL"],
        c.circuits.map((x) => [x.destination, x.state, String(x.failures), x.open_until ?? ""]),
      ),
    ),
  ];
}

/** The NATS credential's line: why it cannot be read, or when it expires and was issued. */
function natsCredentialLine(n: NonNullable<Description["natsCredential"]>, now: number): string {
  return `NATS credential: Secret ${n.secret}, ${
    n.error
      ? n.error
      : n.expires
        ? `expires ${n.expires} (${until(n.expires, now)})${n.issued ? `, issued ${ago(n.issued, now)}` : ""}`
        : "does not expire"
  }`;
}

const indent = (s: string) =>
  s
    .split("\n")
    .map((l) => `  ${l}`)
    .join("\n");
