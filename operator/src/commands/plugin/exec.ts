// `kubectl ifp send|tail|redrive`: the runtime's own `ifp` command, run in the runtime container of one of
// the Agent's ready pods over the API server's pods/exec (the Exec client of
// @kubernetes/client-node, a WebSocket; no kubectl spawned). In the pod, `ifp` reaches the Agent's
// local API on the loopback: the runtime signs with the Agent's key and stores the message in its
// outbox before the 202, the inbox watch reads what it accepts, and dead letters go back into the
// outbox. No key, token or message leaves the cluster but what `ifp` prints.
// docs/kubectl-plugin.md.
import { PassThrough, Writable } from "node:stream";
import { AuthorizationV1Api, Exec, type V1Pod, type V1Status } from "@kubernetes/client-node";
import { selectorLabels } from "../../reconcile/names.ts";
import { apiMessage, type Connection, GROUP, PluginError, statusOf, VERSION } from "./kube.ts";

/** The runtime's container in an Agent's pod (concerns/workload/workload.ts). */
export const RUNTIME_CONTAINER = "runtime";
/**
 * The runtime image's node and the compiled `ifp` command in it (runtime/Dockerfile: the
 * distroless node at /nodejs/bin/node, WORKDIR /app, the compiled runtime/ under it). The image has
 * no shell: the command is run as these two paths and its arguments, never through sh.
 */
export const IMAGE_NODE = "/nodejs/bin/node";
export const IMAGE_IFP = "/app/runtime/bin/ifp.js";
/** The local API's loopback port when spec.localApi.port is not set (runtime/src/resources/agent.ts). */
const DEFAULT_LOCAL_API_PORT = 8081;

export interface RuntimePod {
  pod: string;
  namespace: string;
  /** The local API in the pod: http://127.0.0.1:<spec.localApi.port>. */
  localApi: string;
}

function isReady(p: V1Pod): boolean {
  if (p.metadata?.deletionTimestamp || p.status?.phase !== "Running") return false;
  return !!p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
}

function whyNotReady(p: V1Pod): string {
  if (p.metadata?.deletionTimestamp) return "terminating";
  const waiting = p.status?.containerStatuses?.find((s) => s.state?.waiting)?.state?.waiting;
  const ready = p.status?.conditions?.find((c) => c.type === "Ready");
  return [p.status?.phase ?? "Unknown", waiting?.reason, ready?.status === "True" ? "" : "not ready"]
    .filter(Boolean)
    .join(", ");
}

/** One ready pod of the Agent with the runtime container, and where its local API listens. */
export async function runtimePod(c: Connection, namespace: string, name: string): Promise<RuntimePod> {
  let agent: { spec?: { localApi?: { port?: number } } };
  try {
    agent = (await c.custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: "agents",
      name,
    })) as typeof agent;
  } catch (err) {
    if (statusOf(err) === 404)
      throw new PluginError(
        `agent ${JSON.stringify(name)} not found in namespace ${namespace} (kubectl get agents.ifp.dev -n ${namespace})`,
      );
    throw new PluginError(`cannot read agent ${name} in ${namespace}: ${apiMessage(err)}`);
  }
  const labelSelector = Object.entries(selectorLabels({ metadata: { name } } as Parameters<typeof selectorLabels>[0]))
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
  let pods: V1Pod[];
  try {
    pods = (await c.core.listNamespacedPod({ namespace, labelSelector })).items;
  } catch (err) {
    throw new PluginError(`cannot list the pods of agent ${name} in ${namespace}: ${apiMessage(err)}`);
  }
  if (!pods.length)
    throw new PluginError(
      `agent ${name} in ${namespace} has no pods (kubectl ifp describe agent ${name} -n ${namespace} shows its Deployment and conditions)`,
    );
  const ready = pods.filter(isReady).sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""));
  if (!ready.length)
    throw new PluginError(
      `no ready pod of agent ${name} in ${namespace}: ${pods.map((p) => `${p.metadata?.name} (${whyNotReady(p)})`).join(", ")}`,
    );
  const withRuntime = ready.find((p) => p.spec?.containers.some((k) => k.name === RUNTIME_CONTAINER));
  if (!withRuntime)
    throw new PluginError(
      `pod ${ready[0]!.metadata?.name} of agent ${name} has no container ${JSON.stringify(RUNTIME_CONTAINER)} (it has ${ready[0]!.spec?.containers.map((k) => k.name).join(", ")})`,
    );
  const port = agent.spec?.localApi?.port ?? DEFAULT_LOCAL_API_PORT;
  return { pod: withRuntime.metadata!.name!, namespace, localApi: `http://127.0.0.1:${port}` };
}

/**
 * Whether the kubeconfig's user may exec into the pod, asked of the API server before trying: a
 * refusal is said in those words rather than as a failed WebSocket upgrade. The exec is a
 * WebSocket, a GET, which the API server authorizes as `get` on pods/exec (and, from Kubernetes
 * 1.35, `create` as well, the verb kubectl's older SPDY exec needed): both are asked for.
 */
export async function checkExec(c: Connection, target: RuntimePod): Promise<void> {
  const auth = c.kc.makeApiClient(AuthorizationV1Api);
  const review = async (verb: string) => {
    const r = await auth.createSelfSubjectAccessReview({
      body: {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SelfSubjectAccessReview",
        spec: {
          resourceAttributes: {
            namespace: target.namespace,
            verb,
            resource: "pods",
            subresource: "exec",
            name: target.pod,
          },
        },
      },
    });
    return { verb, allowed: r.status?.allowed, reason: r.status?.reason };
  };
  let answers: Awaited<ReturnType<typeof review>>[];
  try {
    answers = await Promise.all([review("create"), review("get")]);
  } catch {
    // An API server that does not answer reviews: the exec itself says.
    return;
  }
  const denied = answers.filter((a) => a.allowed === false);
  if (denied.length)
    throw new PluginError(
      `you may not exec into pod ${target.pod} in ${target.namespace} (${denied.map((a) => a.verb).join(" and ")} on pods/exec)${denied[0]!.reason ? `: ${denied[0]!.reason}` : ""}; kubectl ifp send, tail and redrive run ifp in the Agent's pod`,
    );
}

/** A writable that hands each chunk on and is never ended by the Exec client. */
function forward(write: (chunk: Buffer) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      write(chunk);
      done();
    },
  });
}

/** The exit code in an exec's final Status (0 on Success, the NonZeroExitCode cause otherwise). */
export function exitCodeOf(status: V1Status | undefined): number | undefined {
  if (!status) return undefined;
  if (status.status === "Success") return 0;
  const code = status.details?.causes?.find((c) => c.reason === "ExitCode")?.message;
  return code !== undefined && /^\d+$/.test(code) ? Number(code) : undefined;
}

/**
 * Run `ifp ARGS` in the pod's runtime container; its stdout and stderr are written here as they
 * come. Resolves with its exit code. `stdin`: keep the command's standard input open until the
 * returned promise settles or `stop` is called (`ifp tail --stop-on-eof` ends with it).
 */
export async function execIfp(
  c: Connection,
  target: RuntimePod,
  args: string[],
  io: { out: (b: Buffer) => void; err: (b: Buffer) => void; stdin?: boolean; stop?: AbortSignal },
): Promise<number> {
  const stdin = io.stdin ? new PassThrough() : null;
  let status: V1Status | undefined;
  let socket: Awaited<ReturnType<Exec["exec"]>>;
  try {
    socket = await new Exec(c.kc).exec(
      target.namespace,
      target.pod,
      RUNTIME_CONTAINER,
      [IMAGE_NODE, IMAGE_IFP, ...args],
      forward(io.out),
      forward(io.err),
      stdin,
      false,
      (s) => {
        status = s;
      },
    );
  } catch (err) {
    throw new PluginError(`cannot exec into pod ${target.pod} in ${target.namespace}: ${execError(err)}`);
  }
  return new Promise<number>((resolve) => {
    const onStop = () => socket.close();
    io.stop?.addEventListener("abort", onStop, { once: true });
    socket.on("close", () => {
      io.stop?.removeEventListener("abort", onStop);
      stdin?.end();
      if (io.stop?.aborted) return resolve(0);
      const code = exitCodeOf(status);
      if (code === undefined && status?.message) io.err(Buffer.from(`kubectl ifp: ${status.message}\n`));
      resolve(code ?? 1);
    });
  });
}

/** A failed WebSocket upgrade in a reader's words: the API server's status, for RBAC the right it asks for. */
function execError(err: unknown): string {
  const message = (err as { message?: string })?.message ?? String(err);
  const code = /Unexpected server response: (\d+)/.exec(message)?.[1];
  if (code === "403") return "the API server refused it (403): your user needs get and create on pods/exec";
  if (code === "404") return "the pod is gone (404); try again";
  return code ? `the API server answered ${code} (is the pod's node reachable from the API server?)` : message;
}
