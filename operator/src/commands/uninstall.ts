// `ifp-operator prepare-uninstall`: the chart's pre-delete hook. `helm uninstall` deletes the
// operator's Deployment, then at once its RBAC and ServiceAccount, without waiting for the pods:
// an operator stopping after that can neither tell that it is being uninstalled nor update an
// Agent or Relay, so its finalizers would stay and every later deletion would wait for ever.
// Run before Helm deletes anything, with the operator's own ServiceAccount, this deletes the
// Deployment (foreground: it stays, being deleted, until its pods are gone) and waits for it,
// so that the operator stops while it still may act and releases its finalizers itself
// (manager.ts); then it releases whatever still holds one (no replica was leading, one was
// killed), and only then does Helm delete the rest.
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Logger } from "pino";
import {
  AGENT_FINALIZER,
  hasFinalizer,
  releaseAllFinalizers,
  STREAM_FINALIZER,
  type FinalizerRelease,
} from "../reconcile/finalizers.ts";
import { ApiException } from "@kubernetes/client-node";
import { errorMessage, isStatus, type Kube } from "../kube/client.ts";

export interface PrepareUninstallOptions {
  kube: Kube;
  /** The operator's own Deployment. */
  deployment: { namespace: string; name: string };
  /** The namespaces the operator watches; empty: all. */
  namespaces: string[];
  /** How long to wait for the Deployment (and so the operator's pods) to be gone before releasing anyway. */
  timeoutMs: number;
  log: Logger;
  pollMs?: number;
}

export interface PrepareUninstallResult {
  /** Whether the operator's Deployment was gone within the timeout. */
  deploymentGone: boolean;
  /** Finalizers this pass released (those the operator released as it stopped are not among them). */
  released: FinalizerRelease[];
  /** Agents and Relays (kind namespace/name) that still hold one of the operator's finalizers. */
  held: string[];
}

const KINDS = ["Agent", "Relay"] as const;
const FINALIZER = { Agent: AGENT_FINALIZER, Relay: STREAM_FINALIZER } as const;

/**
 * `call`, again after a second while the API server answers for now (429: a CRD's storage still
 * initializing, say; 5xx; no answer), until `deadline`; a refusal (403, 404, 409, 422) at once.
 */
async function retrying<T>(
  what: string,
  call: () => Promise<T>,
  deadline: number,
  log: Logger,
  pollMs: number,
): Promise<T> {
  for (;;) {
    try {
      return await call();
    } catch (err) {
      const code = err instanceof ApiException ? err.code : undefined;
      const passing = code === undefined || code === 429 || code >= 500;
      if (!passing || Date.now() >= deadline) throw err;
      log.warn({ err: errorMessage(err) }, `${what}; trying again`);
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }
}

async function listAll(kube: Kube, kind: (typeof KINDS)[number], namespaces: string[]): Promise<KubernetesObject[]> {
  const out: KubernetesObject[] = [];
  for (const ns of namespaces.length ? namespaces : [undefined]) {
    const list = await kube.objects.list<KubernetesObject>("ifp.dev/v1alpha1", kind, ns);
    for (const item of list.items)
      out.push({ ...item, apiVersion: item.apiVersion ?? "ifp.dev/v1alpha1", kind: item.kind ?? kind });
  }
  return out;
}

export async function prepareUninstall(opts: PrepareUninstallOptions): Promise<PrepareUninstallResult> {
  const { kube, deployment, log } = opts;
  const pollMs = opts.pollMs ?? 1000;
  const ref = `${deployment.namespace}/${deployment.name}`;
  const deadline = Date.now() + opts.timeoutMs;
  const retry = <T>(what: string, call: () => Promise<T>) => retrying(what, call, deadline, log, pollMs);
  try {
    await retry("deleting the operator's Deployment", () =>
      kube.objects.delete(
        { apiVersion: "apps/v1", kind: "Deployment", metadata: deployment },
        undefined,
        undefined,
        undefined,
        undefined,
        "Foreground",
      ),
    );
    log.info({ deployment: ref }, "deleting the operator's Deployment; its pods release their finalizers as they stop");
  } catch (err) {
    if (!isStatus(err, 404)) throw err;
  }
  let deploymentGone = false;
  for (;;) {
    if (
      !(await retry("reading the operator's Deployment", () =>
        kube.read("apps/v1", "Deployment", deployment.namespace, deployment.name),
      ))
    ) {
      deploymentGone = true;
      break;
    }
    if (Date.now() >= deadline) {
      log.warn(
        { deployment: ref, timeoutMs: opts.timeoutMs },
        "the operator's Deployment is still there; releasing the finalizers anyway",
      );
      break;
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
  // Listing gets a bound of its own: the wait above may have used the whole timeout.
  const listDeadline = Date.now() + Math.max(30_000, deadline - Date.now());
  const list = (kind: (typeof KINDS)[number]) =>
    retrying(`listing ${kind}s`, () => listAll(kube, kind, opts.namespaces), listDeadline, log, pollMs);
  const lists = { Agent: await list("Agent"), Relay: await list("Relay") };
  // No NATS here: what was not cleaned up stays in JetStream, and each Event says what.
  const released = await releaseAllFinalizers({
    kube,
    caches: { list: <T extends KubernetesObject>(kind: string) => lists[kind as keyof typeof lists] as T[] },
    jsm: undefined,
    log,
  });
  const held: string[] = [];
  for (const kind of KINDS) {
    for (const obj of await list(kind))
      if (hasFinalizer(obj, FINALIZER[kind])) held.push(`${kind} ${obj.metadata?.namespace}/${obj.metadata?.name}`);
  }
  if (held.length) log.error({ held }, "finalizers still held");
  else log.info({ released: released.length, deploymentGone }, "no finalizer of the operator's is left");
  return { deploymentGone, released, held };
}
