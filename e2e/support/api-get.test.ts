// The tests' direct reads of the API server give what kubectl gives: the same objects and lists,
// NotFound where kubectl says it, and kubectl itself for everything they do not handle.
import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseGet } from "./api-get.ts";
import { KubectlError, startControlPlane, type ControlPlane } from "./controlplane.ts";

describe("parseGet", () => {
  it("takes the reads it answers", () => {
    expect(parseGet(["-n", "ns", "get", "agent", "alice", "-o", "json"])).toEqual({
      resource: "agent",
      name: "alice",
      namespace: "ns",
      allNamespaces: false,
      json: true,
    });
    expect(parseGet(["get", "pods/p1", "--namespace=x", "--request-timeout=5s", "-ojson"])).toMatchObject({
      resource: "pods",
      name: "p1",
      namespace: "x",
      timeoutMs: 5_000,
    });
    expect(parseGet(["get", "Events", "-A", "--field-selector", "reason=Created", "-l", "a=b"])).toMatchObject({
      resource: "events",
      allNamespaces: true,
      fieldSelector: "reason=Created",
      labelSelector: "a=b",
      json: false,
    });
  });

  it("leaves everything else to kubectl", () => {
    for (const args of [
      ["apply", "-f", "-"],
      ["get", "--raw", "/api"],
      ["get", "pods,services"],
      ["get", "pods", "-o", "jsonpath={.items}"],
      ["get", "pods", "a", "b"],
      ["get", "pods", "a", "-A"],
      ["get", "pods", "--ignore-not-found"],
      ["get", "pods/a", "b"],
      ["get"],
      ["-n"],
      ["get", "pods", "--request-timeout=soon"],
    ])
      expect(parseGet(args), args.join(" ")).toBeUndefined();
  });
});

describe("reads of a real API server", () => {
  let cp: ControlPlane;
  const viaKubectl = (args: string[]) => {
    const r = spawnSync("kubectl", ["--kubeconfig", cp.kubeconfig, ...args, "-o", "json"], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(r.stderr);
    return JSON.parse(r.stdout);
  };
  beforeAll(async () => {
    cp = await startControlPlane({ controllerManager: false });
    cp.kubectl(["create", "namespace", "reads"]);
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: ["a", "b"].map((name, i) => ({
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { name, namespace: "reads", labels: { n: String(i) } },
          data: { name },
        })),
      }),
    );
  }, 120_000);
  afterAll(async () => {
    await cp?.stop();
  });

  it("give what kubectl prints, for objects, lists, selectors and every name of a type", () => {
    const before = cp.directReads();
    const cases = [
      ["-n", "reads", "get", "configmap", "a"],
      ["-n", "reads", "get", "cm/b"],
      ["-n", "reads", "get", "configmaps"],
      ["get", "configmaps", "-n", "reads", "-l", "n=1"],
      ["get", "cm", "-A", "--field-selector", "metadata.name=a"],
      ["get", "namespace", "reads"],
      ["get", "deployments.apps", "-n", "reads"],
      ["get", "clusterrole", "cluster-admin"],
    ];
    for (const args of cases) expect(cp.json(args), args.join(" ")).toEqual(viaKubectl(args));
    expect(cp.directReads() - before, "reads answered without kubectl").toBe(cases.length);
    expect(JSON.parse(cp.kubectl(["-n", "reads", "get", "configmap", "a", "-o", "json"]))).toEqual(
      viaKubectl(["-n", "reads", "get", "configmap", "a"]),
    );
  });

  it("say NotFound as kubectl does, and leave an unknown type to kubectl's own error", () => {
    const before = cp.directReads();
    expect(cp.tryJson(["-n", "reads", "get", "configmap", "nothing"])).toBeUndefined();
    expect(cp.directReads()).toBe(before + 1);
    const err = (() => {
      try {
        cp.json(["-n", "reads", "get", "configmap", "nothing"]);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(KubectlError);
    expect((err as KubectlError).notFound).toBe(true);
    expect((err as Error).message).toMatch(/Error from server \(NotFound\): configmaps "nothing" not found/);
    expect(() => cp.tryJson(["get", "nosuchkind", "x"])).toThrow(/doesn't have a resource type "nosuchkind"/);
  });

  it("find a type that was made after the first read (a CRD installed later)", () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        metadata: { name: "widgets.reads.example" },
        spec: {
          group: "reads.example",
          names: { plural: "widgets", singular: "widget", kind: "Widget", shortNames: ["wd"] },
          scope: "Namespaced",
          versions: [
            {
              name: "v1",
              served: true,
              storage: true,
              schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
            },
          ],
        },
      }),
    );
    cp.kubectl(["wait", "--for=condition=Established", "--timeout=40s", "crd/widgets.reads.example"]);
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({ apiVersion: "reads.example/v1", kind: "Widget", metadata: { name: "w", namespace: "reads" } }),
    );
    for (const args of [
      ["-n", "reads", "get", "widget", "w"],
      ["-n", "reads", "get", "wd"],
      ["-n", "reads", "get", "widgets.reads.example", "w"],
    ])
      expect(cp.json(args), args.join(" ")).toEqual(viaKubectl(args));
  });
});
