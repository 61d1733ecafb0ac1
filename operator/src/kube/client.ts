import { hostname } from "node:os";
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  type KubeConfig,
  type KubernetesObject,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { FIELD_MANAGER } from "../controllers/runtime.ts";

export function isStatus(err: unknown, code: number): boolean {
  return err instanceof ApiException && err.code === code;
}

export function errorMessage(err: unknown): string {
  if (err instanceof ApiException) {
    const body = err.body as { message?: string } | string | undefined;
    const msg = typeof body === "string" ? safeMessage(body) : body?.message;
    return `${err.code}: ${msg ?? err.message}`;
  }
  return (err as Error)?.message ?? String(err);
}

function safeMessage(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body;
  } catch {
    return body;
  }
}

/** The operator's writes to the API server, counted (a steady state should make none). */
export class Kube {
  readonly objects: KubernetesObjectApi;
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  private readonly log: Logger;
  private readonly onWrite: (verb: string, kind: string) => void;

  constructor(kc: KubeConfig, log: Logger, onWrite: (verb: string, kind: string) => void = () => {}) {
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.core = kc.makeApiClient(CoreV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.log = log;
    this.onWrite = onWrite;
  }

  /** Server-side apply with the operator's field manager, taking ownership of our fields. */
  async apply<T extends KubernetesObject>(obj: T): Promise<T> {
    this.onWrite("apply", obj.kind ?? "?");
    const out = await this.objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    this.log.info({ kind: obj.kind, namespace: obj.metadata?.namespace, name: obj.metadata?.name }, `Applied ${obj.kind}`);
    return out as T;
  }

  /** Create, or leave alone what exists (for Secrets that must never be overwritten). */
  async createIfAbsent<T extends KubernetesObject>(obj: T): Promise<boolean> {
    try {
      this.onWrite("create", obj.kind ?? "?");
      await this.objects.create(obj);
      this.log.info({ kind: obj.kind, namespace: obj.metadata?.namespace, name: obj.metadata?.name }, `Created ${obj.kind}`);
      return true;
    } catch (err) {
      if (isStatus(err, 409)) return false;
      throw err;
    }
  }

  async replaceStatus(plural: string, obj: KubernetesObject & { status?: unknown }): Promise<void> {
    this.onWrite("status", obj.kind ?? "?");
    await this.custom.replaceNamespacedCustomObjectStatus({
      group: "ifp.dev",
      version: "v1alpha1",
      namespace: obj.metadata!.namespace!,
      plural,
      name: obj.metadata!.name!,
      body: obj,
    });
  }

  async replace(plural: string, obj: KubernetesObject): Promise<void> {
    this.onWrite("update", obj.kind ?? "?");
    await this.custom.replaceNamespacedCustomObject({ group: "ifp.dev", version: "v1alpha1", namespace: obj.metadata!.namespace!, plural, name: obj.metadata!.name!, body: obj });
  }

  /** A Kubernetes Event on `obj`, for what changed and what failed. */
  async event(obj: KubernetesObject, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    const now = new Date();
    const meta = obj.metadata!;
    try {
      this.onWrite("event", "Event");
      await this.core.createNamespacedEvent({
        namespace: meta.namespace!,
        body: {
          metadata: { name: `${meta.name}.${now.getTime().toString(16)}${Math.floor(Math.random() * 0xffff).toString(16)}`, namespace: meta.namespace },
          involvedObject: { apiVersion: obj.apiVersion, kind: obj.kind, name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion },
          type,
          reason,
          message: message.slice(0, 1024),
          source: { component: "ifp-operator", host: hostname() },
          reportingComponent: "ifp.dev/ifp-operator",
          reportingInstance: hostname(),
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      });
    } catch (err) {
      this.log.warn({ err: errorMessage(err), reason }, "could not record an event");
    }
  }
}
