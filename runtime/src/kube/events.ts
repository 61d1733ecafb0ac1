// Kubernetes Events, as the operator and the runtime record them on their resources.
import { accessSync } from "node:fs";
import { hostname } from "node:os";
import type { CoreV1Api, CoreV1Event, KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { errorMessage } from "../util/errors.ts";

export type EventType = "Normal" | "Warning";

/** The object an Event is about: a Kubernetes object, or one of our resources as a manifest gives it. */
export interface InvolvedObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; uid?: string };
}

/** Who records: `ifp-operator` or `ifp-runtime`; reported as `ifp.dev/<component>`. */
export interface EventSource {
  component: string;
  host: string;
}

/**
 * The core/v1 Event about `obj`: a name unique per call (`<object>.<ms hex><random>`), the
 * message cut at 1 KiB, first and last seen now, count 1.
 */
export function buildEvent(obj: InvolvedObject, type: EventType, reason: string, message: string, source: EventSource, now: Date, random = Math.random): CoreV1Event {
  const meta = obj.metadata ?? {};
  return {
    metadata: { name: `${meta.name}.${now.getTime().toString(16)}${Math.floor(random() * 0xffff).toString(16).padStart(4, "0")}`, namespace: meta.namespace },
    involvedObject: { apiVersion: obj.apiVersion, kind: obj.kind, name: meta.name, namespace: meta.namespace, uid: meta.uid },
    type,
    reason,
    message: message.slice(0, 1024),
    source: { component: source.component, host: source.host },
    reportingComponent: `ifp.dev/${source.component}`,
    reportingInstance: source.host,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}

/**
 * Records Events through the API server. Failing to record one is logged, never thrown.
 * The Kubernetes client (about 80 MiB of resident memory once loaded) is loaded with the first
 * Event, not at start: a runtime that records none never carries it.
 */
export class EventRecorder {
  private readonly kc: KubeConfig | (() => Promise<KubeConfig>);
  private api: Promise<CoreV1Api> | undefined;
  private readonly source: EventSource;
  private readonly log: Logger;

  constructor(kc: KubeConfig | (() => Promise<KubeConfig>), component: string, log: Logger) {
    this.kc = kc;
    this.source = { component, host: hostname() };
    this.log = log;
  }

  /**
   * With an explicit kubeconfig (which must be readable now), or in a pod (its service
   * account); elsewhere undefined: no Events.
   */
  static fromEnvironment(component: string, log: Logger, kubeconfig?: string): EventRecorder | undefined {
    if (kubeconfig) accessSync(kubeconfig);
    else if (!process.env.KUBERNETES_SERVICE_HOST) return undefined;
    const load = async () => {
      const { KubeConfig } = await import("@kubernetes/client-node");
      const kc = new KubeConfig();
      if (kubeconfig) kc.loadFromFile(kubeconfig);
      else kc.loadFromCluster();
      return kc;
    };
    return new EventRecorder(load, component, log);
  }

  private client(): Promise<CoreV1Api> {
    this.api ??= (async () => {
      const { CoreV1Api } = await import("@kubernetes/client-node");
      const kc = typeof this.kc === "function" ? await this.kc() : this.kc;
      return kc.makeApiClient(CoreV1Api);
    })();
    return this.api;
  }

  async record(obj: InvolvedObject, type: EventType, reason: string, message: string): Promise<void> {
    const namespace = obj.metadata?.namespace;
    if (!obj.metadata?.name || !namespace) return; // a manifest run outside the cluster: nothing to attach it to
    try {
      const api = await this.client();
      await api.createNamespacedEvent({ namespace, body: buildEvent(obj, type, reason, message, this.source, new Date()) });
    } catch (err) {
      this.log.warn({ err: errorMessage(err), reason }, "could not record an event");
    }
  }
}
