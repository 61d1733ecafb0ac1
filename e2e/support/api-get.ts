// `kubectl get … -o json` answered by the API server directly. Tests poll the API server many
// times a second; each kubectl is a process (~0.2 s of CPU on this machine) and, spawned
// synchronously, stops the test's own event loop and the operator running in it meanwhile. The
// simple reads (one resource type, by name or as a list, in a namespace or all, with label and
// field selectors) are one HTTPS GET instead, with the answer kubectl would print; anything else
// — and any answer but 200 or an object's NotFound — is left to kubectl itself.
import { createSyncFn } from "synckit";
import type { GetAnswer, GetCall } from "./api-get-worker.ts";

/** A `kubectl get` this module answers, parsed from kubectl's arguments. */
export interface GetRequest {
  resource: string;
  name?: string;
  namespace?: string;
  allNamespaces: boolean;
  labelSelector?: string;
  fieldSelector?: string;
  timeoutMs?: number;
  /** `-o json` was among the arguments (kubectl() calls carry it, json() adds it). */
  json: boolean;
}

const VALUE_FLAGS: Record<string, keyof GetRequest | "output"> = {
  "-n": "namespace",
  "--namespace": "namespace",
  "-l": "labelSelector",
  "--selector": "labelSelector",
  "--field-selector": "fieldSelector",
  "--request-timeout": "timeoutMs",
  "-o": "output",
  "--output": "output",
};

/** A kubectl duration (`5s`, `1m`, `500ms`, or seconds), in milliseconds; undefined if not one. */
function durationMs(text: string): number | undefined {
  const m = /^(\d+)(ms|s|m|h)?$/.exec(text);
  if (!m) return undefined;
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[m[2] ?? "s"]!;
  return Number(m[1]) * unit;
}

/** The read kubectl's arguments ask for, or undefined for any other command or a flag not handled here. */
export function parseGet(args: string[]): GetRequest | undefined {
  const positional: string[] = [];
  const req: GetRequest = { resource: "", allNamespaces: false, json: false };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "-A" || arg === "--all-namespaces") {
      req.allNamespaces = true;
      continue;
    }
    if (arg === "-ojson") {
      req.json = true;
      continue;
    }
    if (!arg.startsWith("-")) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const field = VALUE_FLAGS[flag];
    if (!field) return undefined;
    const value = eq > 0 ? arg.slice(eq + 1) : args[++i];
    if (value === undefined) return undefined;
    if (field === "output") {
      if (value !== "json") return undefined;
      req.json = true;
    } else if (field === "timeoutMs") {
      const ms = durationMs(value);
      if (ms === undefined) return undefined;
      req.timeoutMs = ms;
    } else (req as unknown as Record<string, string>)[field] = value;
  }
  if (positional[0] !== "get" || positional.length < 2 || positional.length > 3) return undefined;
  let [, resource, name] = positional as [string, string, string | undefined];
  if (resource.includes("/")) {
    if (name !== undefined) return undefined;
    [resource, name] = resource.split("/", 2) as [string, string];
  }
  if (!resource || resource.includes(",") || name === "") return undefined;
  if (name !== undefined && req.allNamespaces) return undefined;
  req.resource = resource.toLowerCase();
  if (name !== undefined) req.name = name;
  return req;
}

/** The object as kubectl prints it: without metadata.managedFields (its --show-managed-fields=false). */
function withoutManagedFields<T>(o: T): T {
  const metadata = (o as { metadata?: Record<string, unknown> }).metadata;
  if (metadata && "managedFields" in metadata) delete metadata.managedFields;
  return o;
}

/** One resource type as discovery describes it. */
interface ApiResource {
  /** `/api/v1` or `/apis/<group>/<version>` */
  base: string;
  apiVersion: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}

interface DiscoveredList {
  groupVersion: string;
  resources: { name: string; singularName?: string; namespaced: boolean; kind: string; shortNames?: string[] }[];
}

export interface ApiServerAccess {
  server: string;
  ca: string;
  cert: string;
  key: string;
}

type SyncGet = (call: GetCall) => GetAnswer;
let syncGet: SyncGet | undefined;
const getOnce = (): SyncGet =>
  (syncGet ??= createSyncFn<(call: GetCall) => Promise<GetAnswer>>(new URL("./api-get-worker.ts", import.meta.url), {
    tsRunner: "node",
    timeout: 120_000,
  }));

/** What a read gave: the value kubectl would have printed, or a NotFound kubectl would have said. */
export type ReadResult = { value: unknown } | { notFound: string };

export class ApiReads {
  private readonly access: ApiServerAccess;
  private byName: Map<string, ApiResource> | undefined;
  /** Reads answered here, not by kubectl. */
  served = 0;

  constructor(access: ApiServerAccess) {
    this.access = access;
  }

  /** The read's result, or undefined where kubectl has to answer (a command, type or answer not handled here). */
  read(req: GetRequest): ReadResult | undefined {
    try {
      const type = this.resolve(req.resource);
      if (!type) return undefined;
      const { status, body } = this.get(this.url(type, req), req.timeoutMs);
      if (status === 200) {
        this.served++;
        const value = JSON.parse(body) as { items?: Record<string, unknown>[] };
        if (req.name !== undefined) return { value: withoutManagedFields(value) };
        // kubectl prints a list as a List whose items carry their apiVersion and kind.
        const items = (value.items ?? []).map((o) =>
          withoutManagedFields({ apiVersion: type.apiVersion, kind: type.kind, ...o }),
        );
        return { value: { apiVersion: "v1", items, kind: "List", metadata: { resourceVersion: "" } } };
      }
      const answer = JSON.parse(body) as { reason?: string; message?: string; details?: { name?: string } };
      if (status === 404 && answer.reason === "NotFound" && answer.details?.name !== undefined) {
        this.served++;
        return { notFound: `Error from server (NotFound): ${answer.message}` };
      }
      // A type gone since discovery (a CRD deleted), or any other refusal: kubectl says it its way.
      this.byName = undefined;
      return undefined;
    } catch {
      return undefined;
    }
  }

  private url(type: ApiResource, req: GetRequest): string {
    const inNamespace = type.namespaced && !req.allNamespaces;
    const ns = inNamespace ? `/namespaces/${encodeURIComponent(req.namespace ?? "default")}` : "";
    const name = req.name !== undefined ? `/${encodeURIComponent(req.name)}` : "";
    const query = new URLSearchParams();
    if (req.labelSelector !== undefined) query.set("labelSelector", req.labelSelector);
    if (req.fieldSelector !== undefined) query.set("fieldSelector", req.fieldSelector);
    const q = query.size ? `?${query}` : "";
    return `${this.access.server}${type.base}${ns}/${type.plural}${name}${q}`;
  }

  private get(path: string, timeoutMs = 30_000): GetAnswer {
    const { ca, cert, key } = this.access;
    return getOnce()({ url: path, ca, cert, key, timeoutMs });
  }

  /** The type a kubectl resource name means, discovered again once when it is not (yet) known. */
  private resolve(resource: string): ApiResource | undefined {
    const known = this.byName?.get(resource);
    if (known) return known;
    this.byName = this.discover();
    return this.byName.get(resource);
  }

  /** Every name kubectl takes for a type, the core group's first, then the groups in the server's order. */
  private discover(): Map<string, ApiResource> {
    const lists: DiscoveredList[] = [this.json<DiscoveredList>("/api/v1")];
    const groups = this.json<{ groups: { preferredVersion: { groupVersion: string } }[] }>("/apis").groups;
    for (const g of groups) lists.push(this.json<DiscoveredList>(`/apis/${g.preferredVersion.groupVersion}`));
    const byName = new Map<string, ApiResource>();
    for (const list of lists) {
      const [group, version] = list.groupVersion.includes("/") ? list.groupVersion.split("/") : ["", list.groupVersion];
      const base = group ? `/apis/${list.groupVersion}` : "/api/v1";
      for (const r of list.resources) {
        if (r.name.includes("/")) continue;
        const type = { base, apiVersion: list.groupVersion, plural: r.name, kind: r.kind, namespaced: r.namespaced };
        const singular = r.singularName || r.kind.toLowerCase();
        const names = [r.name, singular, r.kind.toLowerCase(), ...(r.shortNames ?? [])];
        if (group) names.push(...[r.name, singular].flatMap((n) => [`${n}.${group}`, `${n}.${version}.${group}`]));
        for (const n of names) if (!byName.has(n)) byName.set(n, type);
      }
    }
    return byName;
  }

  private json<T>(path: string): T {
    const { status, body } = this.get(`${this.access.server}${path}`);
    if (status !== 200) throw new Error(`GET ${path}: ${status}`);
    return JSON.parse(body) as T;
  }
}
