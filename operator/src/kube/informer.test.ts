import { describe, expect, it } from "vitest";
import { lean } from "./informer.ts";

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
