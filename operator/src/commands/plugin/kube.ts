// The plugin's reads of the API server: the user's kubeconfig (KUBECONFIG, --kubeconfig,
// --context), the typed clients of @kubernetes/client-node, and errors in a reader's words.
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  NetworkingV1Api,
} from "@kubernetes/client-node";
import { apiMessage, PluginError } from "./errors.ts";

export { apiMessage, PluginError, UsageError } from "./errors.ts";

export const GROUP = "ifp.dev";
export const VERSION = "v1alpha1";

export interface Connection {
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
  custom: CustomObjectsApi;
  networking: NetworkingV1Api;
  coordination: CoordinationV1Api;
  /** The context's namespace, else "default". */
  defaultNamespace: string;
}

export function connect(opts: { kubeconfig?: string; context?: string }): Connection {
  const kc = new KubeConfig();
  try {
    if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
    else kc.loadFromDefault();
  } catch (err) {
    throw new PluginError(`cannot read the kubeconfig: ${(err as Error).message}`);
  }
  if (opts.context) {
    if (!kc.getContextObject(opts.context))
      throw new PluginError(`no context ${JSON.stringify(opts.context)} in the kubeconfig`);
    kc.setCurrentContext(opts.context);
  }
  const cluster = kc.getCurrentCluster();
  // Without any kubeconfig, client-node falls back to http://localhost:8080, as kubectl once did.
  if (!cluster || (!opts.kubeconfig && cluster.server === "http://localhost:8080"))
    throw new PluginError("no kubeconfig: set KUBECONFIG or pass --kubeconfig (and --context)");
  const defaultNamespace = kc.getContextObject(kc.getCurrentContext())?.namespace || "default";
  return {
    kc,
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    networking: kc.makeApiClient(NetworkingV1Api),
    coordination: kc.makeApiClient(CoordinationV1Api),
    defaultNamespace,
  };
}

/** The HTTP status of an API error, or undefined for anything else (a refused connection, …). */
export function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "number" ? code : undefined;
}

/** `read()`'s object, undefined when the API server says NotFound; Forbidden and others become PluginErrors. */
export async function orAbsent<T>(read: () => Promise<T>, what: string): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    if (statusOf(err) === 404) return undefined;
    throw new PluginError(`cannot read ${what}: ${apiMessage(err)}`);
  }
}

/** `read()`'s result, any failure a PluginError naming what was read. */
export async function must<T>(read: () => Promise<T>, what: string): Promise<T> {
  try {
    return await read();
  } catch (err) {
    throw new PluginError(`cannot read ${what}: ${apiMessage(err)}`);
  }
}

/** The namespace exists (a clear error when it does not, instead of an empty answer). */
export async function checkNamespace(c: Connection, namespace: string): Promise<void> {
  const ns = await orAbsent(() => c.core.readNamespace({ name: namespace }), `namespace ${namespace}`);
  if (!ns) throw new PluginError(`namespace ${JSON.stringify(namespace)} not found`);
}

export type Kind = "Agent" | "Relay";
export const PLURAL: Record<Kind, string> = { Agent: "agents", Relay: "relays" };

// biome-ignore lint/suspicious/noExplicitAny: the resources are read as the API server returns them
export type Obj = any;

/** The Agents or Relays of a namespace, or of every namespace. */
export async function listResources(c: Connection, kind: Kind, namespace: string | undefined): Promise<Obj[]> {
  const plural = PLURAL[kind];
  const list = (await must(
    () =>
      namespace
        ? c.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural })
        : c.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural }),
    `${plural}.${GROUP}${namespace ? ` in ${namespace}` : ""} (are the CRDs installed?)`,
  )) as { items: Obj[] };
  return list.items;
}
