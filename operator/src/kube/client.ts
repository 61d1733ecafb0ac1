// The operator's calls to the API server. Every write goes through here and is counted, so that
// a steady state can be shown to make none.
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
import { EventRecorder, type EventType } from "../../../runtime/src/kube/events.ts";
import { FIELD_MANAGER } from "./metadata.ts";

export function isStatus(err: unknown, code: number): boolean {
  return err instanceof ApiException && err.code === code;
}

export { errorMessage } from "../../../runtime/src/util/errors.ts";

const ref = (obj: KubernetesObject) => ({
  kind: obj.kind,
  namespace: obj.metadata?.namespace,
  name: obj.metadata?.name,
});

export class Kube {
  readonly objects: KubernetesObjectApi;
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  private readonly onWrite: (verb: string, kind: string) => void;

  constructor(kc: KubeConfig, log: Logger, onWrite: (verb: string, kind: string) => void = () => {}) {
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.core = kc.makeApiClient(CoreV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.events = new EventRecorder(kc, "ifp-operator", log);
    this.log = log;
    this.onWrite = onWrite;
  }

  /** Server-side apply with the operator's one field manager, taking ownership of our fields. */
  async apply<T extends KubernetesObject>(obj: T, existed: boolean, differs?: string): Promise<T> {
    this.onWrite("apply", obj.kind ?? "?");
    const out = await this.objects.patch(obj, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    this.log.info(
      { ...ref(obj), ...(differs ? { field: differs } : {}) },
      `${existed ? "Updated" : "Created"} ${obj.kind}`,
    );
    return out as T;
  }

  /** The object as the API server has it now, or undefined. */
  async read<T extends KubernetesObject>(
    apiVersion: string,
    kind: string,
    namespace: string,
    name: string,
  ): Promise<T | undefined> {
    try {
      return (await this.objects.read({ apiVersion, kind, metadata: { name, namespace } })) as T;
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  /** Create, or leave alone what exists (Secrets that must never be overwritten): the created object, or undefined. */
  async createIfAbsent<T extends KubernetesObject>(obj: T): Promise<T | undefined> {
    try {
      this.onWrite("create", obj.kind ?? "?");
      const out = (await this.objects.create(obj, undefined, undefined, FIELD_MANAGER)) as T;
      this.log.info(ref(obj), `Created ${obj.kind}`);
      return out;
    } catch (err) {
      if (isStatus(err, 409)) return undefined;
      throw err;
    }
  }

  /** Replace with optimistic concurrency (the object's resourceVersion); 409 when it moved on. */
  async replace<T extends KubernetesObject>(obj: T): Promise<T> {
    this.onWrite("update", obj.kind ?? "?");
    const out = (await this.objects.replace(obj, undefined, undefined, FIELD_MANAGER)) as T;
    this.log.info(ref(obj), `Updated ${obj.kind}`);
    return out;
  }

  /** Delete a child that is no longer wanted; one already gone is fine. */
  async remove(obj: KubernetesObject): Promise<void> {
    this.onWrite("delete", obj.kind ?? "?");
    try {
      await this.objects.delete({
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        metadata: { name: obj.metadata?.name, namespace: obj.metadata?.namespace },
      });
      this.log.info(ref(obj), `Deleted ${obj.kind}`);
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
  }

  /** PUT /status of one of our custom resources. */
  async replaceStatus(plural: string, obj: KubernetesObject & { status?: unknown }): Promise<void> {
    this.onWrite("status", obj.kind ?? "?");
    await this.custom.replaceNamespacedCustomObjectStatus({
      group: "ifp.dev",
      version: "v1alpha1",
      namespace: obj.metadata!.namespace!,
      plural,
      name: obj.metadata!.name!,
      body: obj,
      fieldManager: FIELD_MANAGER,
    });
  }

  /** Whether the API server serves a custom resource (for example cert-manager's certificates) in a namespace. */
  async serves(group: string, version: string, plural: string, namespace: string): Promise<boolean> {
    try {
      await this.custom.listNamespacedCustomObject({ group, version, namespace, plural, limit: 1 });
      return true;
    } catch (err) {
      if (isStatus(err, 404)) return false;
      throw err;
    }
  }

  /** A Kubernetes Event on `obj`, for what changed and what failed. Failure to record one is logged, not thrown. */
  async event(obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<void> {
    this.onWrite("event", "Event");
    await this.events.record(obj, type, reason, message);
  }
}
