// `kubectl ifp status`: the install's health at a glance — the operator, NATS, the install CA,
// and every Agent and Relay with what the operator wrote in its status (Ready, backlog, last error).
import { X509Certificate } from "node:crypto";
import { type Connection, listResources, must, type Obj, orAbsent } from "./kube.ts";
import { ago, table, until } from "./output.ts";
import { VERSION_LABEL } from "../../concerns/workload/workload.ts";
import { LEADER_VERSION_ANNOTATION } from "../leader.ts";

const PART_OF = "app.kubernetes.io/part-of=ifp-operator";

export interface Workload {
  namespace: string;
  name: string;
  replicas: number;
  readyReplicas: number;
  ready: boolean;
}

export interface ResourceLine {
  kind: "Agent" | "Relay";
  namespace: string;
  name: string;
  ready: string;
  reason?: string;
  message?: string;
  replicas?: number;
  readyReplicas?: number;
  backlog?: number;
  acceptedLastHour?: number;
  lastError?: string;
  lastErrorTime?: string;
  /** The version of the runtime image its Deployment runs (the label the operator gives its pods). */
  version?: string;
}

export interface StatusReport {
  operator?: Workload & { leader?: { holder: string; renewed?: string }; caSecret: string; version?: string };
  /** Why the operator could not be looked for (RBAC: a user of one namespace may not list Deployments everywhere). */
  operatorError?: string;
  nats?: Workload;
  installCa?: { namespace: string; secret: string; notAfter?: string; next?: string; error?: string };
  resources: ResourceLine[];
  /** Set when a runtime runs another version than the operator's. */
  versionWarning?: string;
}

const condition = (o: Obj, type: string) =>
  (o?.status?.conditions as { type: string; status: string; reason?: string; message?: string }[] | undefined)?.find(
    (c) => c.type === type,
  );

/** Pure: one line of the table from an Agent or Relay as the API server returned it. */
export function resourceLine(kind: "Agent" | "Relay", o: Obj): ResourceLine {
  const ready = condition(o, "Ready");
  const s = o.status ?? {};
  return {
    kind,
    namespace: o.metadata.namespace,
    name: o.metadata.name,
    ready: ready?.status ?? "Unknown",
    ...(ready?.reason ? { reason: ready.reason } : {}),
    ...(ready?.message ? { message: ready.message } : {}),
    ...(typeof s.replicas === "number" ? { replicas: s.replicas } : {}),
    ...(typeof s.readyReplicas === "number" ? { readyReplicas: s.readyReplicas } : {}),
    ...(typeof s.summary?.backlog === "number" ? { backlog: s.summary.backlog } : {}),
    ...(typeof s.summary?.acceptedLastHour === "number" ? { acceptedLastHour: s.summary.acceptedLastHour } : {}),
    ...(s.summary?.lastError ? { lastError: s.summary.lastError } : {}),
    ...(s.summary?.lastErrorTime ? { lastErrorTime: s.summary.lastErrorTime } : {}),
  };
}

function workload(d: Obj): Workload {
  const replicas = d.spec?.replicas ?? 1;
  const readyReplicas = d.status?.readyReplicas ?? 0;
  return {
    namespace: d.metadata.namespace,
    name: d.metadata.name,
    replicas,
    readyReplicas,
    ready: readyReplicas >= replicas,
  };
}

/** The operator's Deployment: the one labelled as the chart labels it, in `namespace` or anywhere. */
export async function findOperator(c: Connection, namespace?: string): Promise<Obj | undefined> {
  const labelSelector = `${PART_OF},app.kubernetes.io/component=operator`;
  const list = (await must(
    () =>
      namespace
        ? c.apps.listNamespacedDeployment({ namespace, labelSelector })
        : c.apps.listDeploymentForAllNamespaces({ labelSelector }),
    "the operator's Deployment",
  )) as { items: Obj[] };
  return list.items[0];
}

/** The operator's flag `--name=value` as its Deployment passes it. */
export function operatorFlag(deployment: Obj, name: string): string | undefined {
  const args: string[] = (deployment?.spec?.template?.spec?.containers ?? []).flatMap(
    (c: { args?: string[] }) => c.args ?? [],
  );
  const prefix = `--${name}=`;
  return args.find((a) => a.startsWith(prefix))?.slice(prefix.length);
}

function certNotAfter(pem: string | undefined): string | undefined {
  if (!pem) return undefined;
  return new Date(new X509Certificate(pem).validTo).toISOString();
}

export async function collectStatus(
  c: Connection,
  opts: { namespace?: string; operatorNamespace?: string },
): Promise<StatusReport> {
  const report: StatusReport = { resources: [] };
  let dep: Obj | undefined;
  try {
    dep = await findOperator(c, opts.operatorNamespace);
  } catch (err) {
    report.operatorError = (err as Error).message;
  }
  if (dep) {
    const ns = dep.metadata.namespace as string;
    const caSecret = operatorFlag(dep, "ca-secret") ?? "ifp-operator-ca";
    report.operator = await operatorStatus(c, dep, caSecret);
    const nats = await natsStatus(c, ns);
    if (nats) report.nats = nats;
    report.installCa = await installCaStatus(c, ns, caSecret);
  }
  report.resources = await resourceLines(c, opts.namespace);
  const warning = versionWarning(report);
  if (warning) report.versionWarning = warning;
  return report;
}

/** Pure: which runtimes run a version other than the operator's, as one line; undefined when all agree or it is unknown. */
export function versionWarning(r: Pick<StatusReport, "operator" | "resources">): string | undefined {
  const want = r.operator?.version;
  if (!want) return undefined;
  const other = r.resources.filter((l) => l.version !== undefined && l.version !== want);
  if (!other.length) return undefined;
  const named = other.map((l) => `${l.kind.toLowerCase()} ${l.namespace}/${l.name} ${l.version}`);
  return `${other.length} of ${r.resources.length} runtimes run another version than the operator's ${want}: ${named.join(", ")}`;
}

/** The operator's Deployment, its install CA's Secret, and the leader of its Lease when one holds it. */
async function operatorStatus(c: Connection, dep: Obj, caSecret: string): Promise<StatusReport["operator"]> {
  const lease = await orAbsent(
    () => c.coordination.readNamespacedLease({ name: "ifp-operator", namespace: dep.metadata.namespace }),
    "the leader Lease",
  ).catch(() => undefined);
  const holder = lease?.spec?.holderIdentity;
  // The version the leader writes on its Lease, else the one the chart labels its pods with.
  const version: string | undefined =
    (holder && lease?.metadata?.annotations?.[LEADER_VERSION_ANNOTATION]) ||
    dep.spec?.template?.metadata?.labels?.[VERSION_LABEL];
  return {
    ...workload(dep),
    caSecret,
    ...(version ? { version } : {}),
    ...(holder
      ? {
          leader: {
            holder,
            ...(lease?.spec?.renewTime ? { renewed: new Date(lease.spec.renewTime).toISOString() } : {}),
          },
        }
      : {}),
  };
}

/** The chart's NATS StatefulSet beside the operator, if it installed one. */
async function natsStatus(c: Connection, ns: string): Promise<Workload | undefined> {
  const nats = (await must(
    () =>
      c.apps.listNamespacedStatefulSet({
        namespace: ns,
        labelSelector: `${PART_OF},app.kubernetes.io/component=nats`,
      }),
    "NATS's StatefulSet",
  )) as { items: Obj[] };
  return nats.items[0] ? workload(nats.items[0]) : undefined;
}

/**
 * The install CA's expiry, and the next CA's when one is published. The CA's certificate is
 * public (every runtime's trust bundle holds it); only its expiry is shown.
 */
async function installCaStatus(c: Connection, ns: string, caSecret: string): Promise<StatusReport["installCa"]> {
  try {
    const secret = await orAbsent(
      () => c.core.readNamespacedSecret({ name: caSecret, namespace: ns }),
      "the install CA",
    );
    const data = secret?.data ?? {};
    const pem = (k: string) => (data[k] ? Buffer.from(data[k], "base64").toString("utf8") : undefined);
    return secret
      ? {
          namespace: ns,
          secret: caSecret,
          ...(pem("ca.crt") ? { notAfter: certNotAfter(pem("ca.crt")) } : {}),
          ...(pem("next.crt") ? { next: certNotAfter(pem("next.crt")) } : {}),
        }
      : { namespace: ns, secret: caSecret, error: "not found" };
  } catch (err) {
    return { namespace: ns, secret: caSecret, error: (err as Error).message };
  }
}

/**
 * The version of each runtime Deployment's pods, by namespace/kind/name: the label the operator
 * renders from the runtime image. Without the right to list Deployments there, none.
 */
async function runtimeVersions(c: Connection, namespace: string | undefined): Promise<Map<string, string>> {
  const labelSelector = "app.kubernetes.io/name=ifp-runtime,app.kubernetes.io/managed-by=ifp-operator";
  const list = (await (namespace
    ? c.apps.listNamespacedDeployment({ namespace, labelSelector })
    : c.apps.listDeploymentForAllNamespaces({ labelSelector })
  ).catch(() => ({ items: [] }))) as { items: Obj[] };
  const versions = new Map<string, string>();
  for (const d of list.items) {
    const labels = d.spec?.template?.metadata?.labels ?? {};
    const [kind, name, version] = [
      labels["app.kubernetes.io/component"],
      labels["app.kubernetes.io/instance"],
      labels[VERSION_LABEL],
    ];
    if (kind && name && version) versions.set(`${d.metadata.namespace}/${kind}/${name}`, version);
  }
  return versions;
}

/** Every Agent and Relay (of `namespace`, or everywhere), by namespace, kind and name. */
async function resourceLines(c: Connection, namespace: string | undefined): Promise<ResourceLine[]> {
  const lines: ResourceLine[] = [];
  const versions = await runtimeVersions(c, namespace);
  for (const kind of ["Agent", "Relay"] as const)
    for (const o of await listResources(c, kind, namespace)) {
      const line = resourceLine(kind, o);
      const version = versions.get(`${line.namespace}/${kind.toLowerCase()}/${line.name}`);
      lines.push(version ? { ...line, version } : line);
    }
  return lines.sort(
    (a, b) => a.namespace.localeCompare(b.namespace) || a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name),
  );
}

/** Pure: the report as people read it. */
export function renderStatus(r: StatusReport, now = Date.now()): string {
  const out: string[] = [];
  const o = r.operator;
  if (o) {
    const leader = o.leader
      ? `leader ${o.leader.holder}${o.leader.renewed ? ` (renewed ${ago(o.leader.renewed, now)})` : ""}`
      : "no leader";
    const version = o.version ? `  version ${o.version}` : "";
    out.push(`Operator:    ${o.namespace}/${o.name}  ${o.readyReplicas}/${o.replicas} ready${version}  ${leader}`);
  } else if (r.operatorError)
    out.push(`Operator:    unknown (${r.operatorError}; --operator-namespace NS looks in one namespace)`);
  else out.push("Operator:    not found (no Deployment labelled app.kubernetes.io/component=operator)");
  if (r.nats)
    out.push(`NATS:        ${r.nats.namespace}/${r.nats.name}  ${r.nats.readyReplicas}/${r.nats.replicas} ready`);
  else if (o) out.push("NATS:        not installed by the chart (nats.install=false: an external server)");
  const ca = r.installCa;
  if (ca) {
    const what = ca.error
      ? `unknown (${ca.error})`
      : ca.notAfter
        ? `expires ${ca.notAfter} (${until(ca.notAfter, now)})${ca.next ? `; next CA published, expires ${ca.next}` : ""}`
        : "no certificate yet";
    out.push(`Install CA:  ${ca.namespace}/${ca.secret}  ${what}`);
  }
  out.push("");
  if (!r.resources.length) {
    out.push("No Agents or Relays.");
    return `${out.join("\n")}\n`;
  }
  out.push(
    table(
      ["NAMESPACE", "KIND", "NAME", "READY", "REASON", "PODS", "VERSION", "BACKLOG", "ACCEPTED 1H", "LAST ERROR"],
      r.resources.map((l) => [
        l.namespace,
        l.kind,
        l.name,
        l.ready,
        l.reason ?? "",
        l.replicas === undefined ? "" : `${l.readyReplicas ?? 0}/${l.replicas}`,
        l.version ?? "",
        l.backlog === undefined ? "" : String(l.backlog),
        l.acceptedLastHour === undefined ? "" : String(l.acceptedLastHour),
        l.lastError ? `${l.lastError}${l.lastErrorTime ? ` (${ago(l.lastErrorTime, now)})` : ""}` : "",
      ]),
    ),
  );
  if (r.versionWarning) out.push("", `Warning: ${r.versionWarning}`);
  return `${out.join("\n")}\n`;
}
