// `kubectl ifp report`: a support bundle (tar.gz) of the install — the operator's and the
// runtimes' logs, the Agents, Relays, Deployments, Pods, ConfigMaps, Events and NetworkPolicies
// of the namespaces concerned, and the Secrets redacted to their names, types, label and
// annotation keys and data keys: never a value. managedFields are dropped from everything.
import { gzipSync } from "node:zlib";
import { type Connection, checkNamespace, listResources, type Obj, PluginError } from "./kube.ts";
import { collectStatus, findOperator, renderStatus, type StatusReport } from "./status.ts";

/** Pure: a Secret as the bundle holds it — what it is, never what it holds. */
export function redactSecret(s: Obj): Obj {
  const m = s.metadata ?? {};
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: m.name,
      namespace: m.namespace,
      ...(m.creationTimestamp ? { creationTimestamp: m.creationTimestamp } : {}),
      ...(m.labels ? { labels: m.labels } : {}),
      // Annotations may hold the data (kubectl's last-applied-configuration): their keys only.
      ...(m.annotations ? { annotationKeys: Object.keys(m.annotations).sort() } : {}),
      ...(m.ownerReferences
        ? { ownerReferences: m.ownerReferences.map((r: Obj) => ({ kind: r.kind, name: r.name })) }
        : {}),
    },
    type: s.type,
    dataKeys: Object.keys({ ...s.data, ...s.stringData }).sort(),
  };
}

/** Drops managedFields (noise) from an object of the API server. */
function trim(o: Obj): Obj {
  if (o?.metadata?.managedFields) {
    const { managedFields: _m, ...metadata } = o.metadata;
    return { ...o, metadata };
  }
  return o;
}

/** Pure: a POSIX ustar archive of `files` (path → content), each a regular file of mode 0644. */
export function tar(files: Map<string, Buffer>, mtime = Math.floor(Date.now() / 1000)): Buffer {
  const blocks: Buffer[] = [];
  for (const [path, content] of files) {
    const h = Buffer.alloc(512);
    let name = path;
    let prefix = "";
    if (Buffer.byteLength(name) > 100) {
      const cut = path.lastIndexOf("/", path.length - 1);
      prefix = path.slice(0, cut);
      name = path.slice(cut + 1);
      if (Buffer.byteLength(name) > 100 || Buffer.byteLength(prefix) > 155) throw new Error(`path too long: ${path}`);
    }
    h.write(name, 0, 100, "utf8");
    h.write("0000644\0", 100, "ascii");
    h.write("0000000\0", 108, "ascii");
    h.write("0000000\0", 116, "ascii");
    h.write(`${content.length.toString(8).padStart(11, "0")}\0`, 124, "ascii");
    h.write(`${mtime.toString(8).padStart(11, "0")}\0`, 136, "ascii");
    h.write("        ", 148, "ascii");
    h.write("0", 156, "ascii");
    h.write("ustar\0", 257, "ascii");
    h.write("00", 263, "ascii");
    h.write(prefix, 345, 155, "utf8");
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
    blocks.push(h, content, Buffer.alloc((512 - (content.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

const json = (o: unknown) => Buffer.from(`${JSON.stringify(o, null, 2)}\n`);
const items = (l: unknown) => ((l as { items?: Obj[] }).items ?? []) as Obj[];

/** Reads that fail (RBAC, a pod without logs) go into errors.txt instead of ending the report. */
async function attempt<T>(errors: string[], what: string, read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    const code = (err as { code?: number }).code;
    errors.push(`${what}: ${code ? `HTTP ${code} ` : ""}${(err as Error).message}`.slice(0, 500));
    return undefined;
  }
}

export interface ReportOptions {
  namespace?: string;
  operatorNamespace?: string;
  /** Lines of each container's log. */
  tailLines?: number;
}

/**
 * A pod of the install: a runtime (the operator's labels on it), or a pod of the chart's release —
 * the operator, NATS, a hook — whose labels hold the operator Deployment's selector (the chart's
 * name and instance; its pods carry no part-of label, since the selector cannot change on upgrade).
 */
export function isInstallPod(pod: Obj, operator: Obj | undefined): boolean {
  const labels: Record<string, string> = pod.metadata?.labels ?? {};
  if (labels["app.kubernetes.io/part-of"] === "ifp-operator" || labels["app.kubernetes.io/name"] === "ifp-runtime")
    return true;
  const selector: Record<string, string> = operator?.spec?.selector?.matchLabels ?? {};
  const keys = Object.keys(selector);
  return (
    keys.length > 0 &&
    operator?.metadata?.namespace === pod.metadata?.namespace &&
    keys.every((k) => labels[k] === selector[k])
  );
}

/** The bundle being written: a file added under `ifp-report/`, and the reads that failed (errors.txt). */
interface Bundle {
  errors: string[];
  add(path: string, content: Buffer): void;
}

/** The bundle's files, path → content, under `ifp-report/`. */
export async function collectReport(c: Connection, opts: ReportOptions): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  const bundle: Bundle = { errors: [], add: (path, content) => files.set(`ifp-report/${path}`, content) };
  if (opts.namespace) await checkNamespace(c, opts.namespace);
  const status = await collectStatus(c, { namespace: opts.namespace, operatorNamespace: opts.operatorNamespace });
  bundle.add("status.txt", Buffer.from(renderStatus(status)));
  bundle.add("status.json", json(status));
  const operator = await findOperator(c, opts.operatorNamespace).catch(() => undefined);
  const namespaces = reportNamespaces(operator, status, opts.namespace);
  const tailLines = opts.tailLines ?? 2000;
  for (const ns of namespaces) {
    const pods = await addResources(c, bundle, ns);
    await addLogs(c, bundle, ns, pods, operator, tailLines);
  }
  bundle.add("README.txt", readme(namespaces));
  bundle.add("errors.txt", Buffer.from(bundle.errors.length ? `${bundle.errors.join("\n")}\n` : "none\n"));
  return files;
}

/** The operator's namespace and the one asked for, or else every namespace with an Agent or Relay; sorted. */
function reportNamespaces(operator: Obj | undefined, status: StatusReport, namespace: string | undefined): string[] {
  const namespaces = new Set<string>();
  if (operator) namespaces.add(operator.metadata.namespace);
  if (namespace) namespaces.add(namespace);
  else for (const r of status.resources) namespaces.add(r.namespace);
  return [...namespaces].sort();
}

/**
 * A namespace's Agents, Relays and the objects around them, managedFields dropped, and its Secrets
 * redacted; the pods read, for their logs.
 */
async function addResources(c: Connection, bundle: Bundle, ns: string): Promise<Obj[]> {
  const dir = `namespaces/${ns}`;
  for (const kind of ["Agent", "Relay"] as const) {
    const list = await attempt(bundle.errors, `${ns} ${kind}s`, () => listResources(c, kind, ns));
    if (list) bundle.add(`${dir}/${kind.toLowerCase()}s.json`, json(list.map(trim)));
  }
  const reads: [string, () => Promise<unknown>][] = [
    ["deployments", () => c.apps.listNamespacedDeployment({ namespace: ns })],
    ["statefulsets", () => c.apps.listNamespacedStatefulSet({ namespace: ns })],
    ["pods", () => c.core.listNamespacedPod({ namespace: ns })],
    ["services", () => c.core.listNamespacedService({ namespace: ns })],
    ["configmaps", () => c.core.listNamespacedConfigMap({ namespace: ns })],
    ["events", () => c.core.listNamespacedEvent({ namespace: ns })],
    ["networkpolicies", () => c.networking.listNamespacedNetworkPolicy({ namespace: ns })],
  ];
  let pods: Obj[] = [];
  for (const [name, read] of reads) {
    const list = await attempt(bundle.errors, `${ns} ${name}`, read);
    if (!list) continue;
    if (name === "pods") pods = items(list);
    bundle.add(`${dir}/${name}.json`, json(items(list).map(trim)));
  }
  const secrets = await attempt(bundle.errors, `${ns} secrets`, () => c.core.listNamespacedSecret({ namespace: ns }));
  if (secrets) bundle.add(`${dir}/secrets.json`, json(items(secrets).map(redactSecret)));
  return pods;
}

/** Logs of the operator's pods, NATS's and the runtimes' (every container: the runtime and its sidecars). */
async function addLogs(
  c: Connection,
  bundle: Bundle,
  ns: string,
  pods: Obj[],
  operator: Obj | undefined,
  tailLines: number,
): Promise<void> {
  for (const pod of pods) {
    if (!isInstallPod(pod, operator)) continue;
    for (const container of (pod.spec?.containers ?? []) as { name: string }[]) {
      const log = await attempt(bundle.errors, `log of ${ns}/${pod.metadata.name} ${container.name}`, () =>
        c.core.readNamespacedPodLog({ namespace: ns, name: pod.metadata.name, container: container.name, tailLines }),
      );
      if (log !== undefined)
        bundle.add(`namespaces/${ns}/logs/${pod.metadata.name}/${container.name}.log`, Buffer.from(String(log)));
    }
  }
}

/** What the bundle is, when it was made and of which namespaces. */
function readme(namespaces: string[]): Buffer {
  return Buffer.from(
    [
      "kubectl ifp report",
      `made: ${new Date().toISOString()}`,
      `namespaces: ${namespaces.join(", ") || "(none)"}`,
      "Secrets are listed by name, type, label and annotation keys and data keys only: no value is in this bundle.",
      "",
    ].join("\n"),
  );
}

export async function writeReport(c: Connection, opts: ReportOptions): Promise<Buffer> {
  const files = await collectReport(c, opts);
  if (!files.size) throw new PluginError("nothing to report");
  return gzipSync(tar(files));
}
