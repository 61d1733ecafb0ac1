import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { ObjectSerializer } from "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js";
import { describe, expect, it } from "vitest";
import { asParsed, lean } from "./informer.ts";
import { StringPool } from "./string-pool.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

describe("lean cached objects", () => {
  it("drops managedFields and keeps everything a controller reads", () => {
    const obj = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: {
        name: "a",
        namespace: "n",
        resourceVersion: "7",
        labels: { x: "y" },
        annotations: { k: "v" },
        managedFields: [{ manager: "ifp-operator", operation: "Apply" }],
      },
      data: { key: "value" },
    };
    const out = lean(obj);
    expect(out).toBe(obj);
    expect(out.metadata).toEqual({
      name: "a",
      namespace: "n",
      resourceVersion: "7",
      labels: { x: "y" },
      annotations: { k: "v" },
    });
    expect(out.data).toEqual({ key: "value" });
  });

  it("leaves an object without managedFields, or without metadata, as it is", () => {
    expect(lean({ metadata: { name: "b" } })).toEqual({ metadata: { name: "b" } });
    expect(lean({ kind: "X" })).toEqual({ kind: "X" });
  });
});

/** A Deployment as the API server returns it, with values of its own (`i`). */
const deployment = (i: number) => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: {
    name: `agent-${i}`,
    namespace: "n",
    uid: `uid-${i}`,
    resourceVersion: `${1000 + i}`,
    generation: 1,
    creationTimestamp: "2026-12-03T08:17:03Z",
    labels: { "app.kubernetes.io/instance": `agent-${i}`, "app.kubernetes.io/managed-by": "ifp-operator" },
    annotations: { "ifp.dev/applied-hash": `hash-${i}` },
    ownerReferences: [
      { apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: `agent-${i}`, uid: `owner-${i}`, controller: true },
    ],
    managedFields: [{ manager: "ifp-operator", operation: "Apply", time: "2026-12-03T08:17:03Z", fieldsV1: {} }],
  },
  spec: {
    replicas: 1,
    selector: { matchLabels: { "app.kubernetes.io/instance": `agent-${i}` } },
    template: {
      metadata: { labels: { "app.kubernetes.io/instance": `agent-${i}` } },
      spec: {
        volumes: [{ name: "tls", secret: { secretName: `agent-${i}-tls`, defaultMode: 420 } }],
        containers: [
          {
            name: "runtime",
            image: "registry.example/ifp-runtime:1",
            args: ["agent", `--name=agent-${i}`],
            ports: [{ name: "https", containerPort: 8443, protocol: "TCP" }],
            volumeMounts: [{ name: "tls", readOnly: true, mountPath: "/etc/ifp/tls" }],
            readinessProbe: { httpGet: { path: "/readyz", port: "https", scheme: "HTTPS" }, periodSeconds: 10 },
          },
        ],
      },
    },
  },
  status: {
    observedGeneration: 1,
    conditions: [
      { type: "Progressing", status: "True", lastUpdateTime: "2026-12-03T08:17:04Z", reason: "NewReplicaSetAvailable" },
    ],
  },
});

describe("a listed object", () => {
  it("is held as the API's JSON parses, as a watch event brings it: plain objects, times as the API writes them", () => {
    const typed = ObjectSerializer.deserialize(deployment(1), "V1Deployment", "");
    expect(typed.metadata.creationTimestamp).toBeInstanceOf(Date);
    const parsed = asParsed(typed);
    const { managedFields: _, ...metadata } = deployment(1).metadata;
    expect(parsed).toEqual({ ...deployment(1), metadata });
    expect(Object.getPrototypeOf(parsed.spec.template.spec.containers[0])).toBe(Object.prototype);
  });

  it("takes less heap than client-node's typed model of it", () => {
    // Each way once before it is measured, so that neither pays for code compiled on first use.
    const held = (make: (i: number) => unknown, n: number) => {
      const kept: unknown[] = [];
      gc();
      const before = process.memoryUsage().heapUsed;
      for (let i = 0; i < n; i++) kept.push(make(i));
      gc();
      expect(kept).toHaveLength(n);
      return process.memoryUsage().heapUsed - before;
    };
    const typed = (i: number) =>
      ObjectSerializer.deserialize(JSON.parse(JSON.stringify(deployment(i))), "V1Deployment", "");
    // A pool of each way's own: strings pooled by one would be free for the other.
    const pools = { typed: new StringPool(), parsed: new StringPool() };
    const ways = {
      typed: (i: number) => lean(typed(i), pools.typed),
      parsed: (i: number) => lean(asParsed(typed(i)), pools.parsed),
    };
    for (const way of Object.values(ways)) held(way, 200);
    const heap = { typed: held(ways.typed, 3000), parsed: held(ways.parsed, 3000) };
    expect(heap.parsed, JSON.stringify(heap)).toBeLessThan(heap.typed * 0.8);
  });
});
