// Namespaces' labels for spec.peerSelector.namespaceSelector, read from the API server when a
// selector needs them and kept a while.
import type { Logger } from "pino";
import { isStatus, type Kube } from "./client.ts";

/**
 * Namespaces' labels, read when a namespace selector needs them and kept for `ttlMs`; a
 * namespace that cannot be read (gone, or not granted) has only the label every namespace
 * carries, kubernetes.io/metadata.name.
 */
export class NamespaceLabels {
  private readonly known = new Map<string, { labels: Record<string, string>; at: number }>();
  private readonly kube: Kube;
  private readonly log: Logger;
  private readonly ttlMs: number;

  constructor(kube: Kube, log: Logger, ttlMs = 30_000) {
    this.kube = kube;
    this.log = log;
    this.ttlMs = ttlMs;
  }

  /** The labels of each namespace in `namespaces`, reading those not known or too old. */
  async load(namespaces: Iterable<string>, now = Date.now()): Promise<(namespace: string) => Record<string, string>> {
    for (const ns of new Set(namespaces)) {
      const k = this.known.get(ns);
      if (k && now - k.at < this.ttlMs) continue;
      let labels: Record<string, string> = { "kubernetes.io/metadata.name": ns };
      try {
        const obj = await this.kube.read("v1", "Namespace", "", ns);
        if (obj) labels = { ...obj.metadata?.labels, "kubernetes.io/metadata.name": ns };
      } catch (err) {
        if (!isStatus(err, 403)) throw err;
        if (!k)
          this.log.warn(
            { namespace: ns },
            "may not read the namespace's labels; spec.peerSelector.namespaceSelector sees only kubernetes.io/metadata.name",
          );
      }
      this.known.set(ns, { labels, at: now });
    }
    return (ns) => this.known.get(ns)?.labels ?? { "kubernetes.io/metadata.name": ns };
  }
}
