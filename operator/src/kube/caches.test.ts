import { describe, expect, it } from "vitest";
import { byNamespace } from "./caches.ts";

describe("byNamespace", () => {
  it("puts each namespace's objects together, keeping their order within it and the namespaces' first-met order", () => {
    const o = (namespace: string, name: string) => ({ metadata: { namespace, name } });
    const made = [o("b", "1"), o("a", "2"), o("b", "3"), o("c", "4"), o("a", "5"), o("b", "6")];
    expect(byNamespace(made).map((x) => `${x.metadata.namespace}/${x.metadata.name}`)).toEqual([
      "b/1",
      "b/3",
      "b/6",
      "a/2",
      "a/5",
      "c/4",
    ]);
    expect(byNamespace([])).toEqual([]);
  });
});
