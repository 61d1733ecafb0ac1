import { describe, expect, it } from "vitest";
import { APPLIED_HASH, controlledBy, withAppliedHash } from "./apply.ts";
import { firstDifference } from "./subset.ts";

describe("applying children", () => {
  const child = {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "a", namespace: "n", annotations: { x: "1" } as Record<string, string> },
    data: { k: "v" },
  };
  it("stamps a hash of the child, stable for equal children and different for others", () => {
    const a = withAppliedHash(child);
    expect(a.metadata.annotations).toMatchObject({ x: "1", [APPLIED_HASH]: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(withAppliedHash({ ...child })).toEqual(a);
    expect(withAppliedHash({ ...child, data: { k: "w" } }).metadata.annotations[APPLIED_HASH]).not.toBe(
      a.metadata.annotations[APPLIED_HASH],
    );
    expect(child.metadata.annotations).toEqual({ x: "1" }); // not mutated
  });

  it("knows its own children by the controller reference's uid", () => {
    expect(
      controlledBy(
        {
          metadata: {
            ownerReferences: [{ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: "a", uid: "u", controller: true }],
          },
        },
        "u",
      ),
    ).toBe(true);
    expect(
      controlledBy(
        {
          metadata: {
            ownerReferences: [
              { apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: "a", uid: "other", controller: true },
            ],
          },
        },
        "u",
      ),
    ).toBe(false);
    expect(controlledBy({ metadata: {} }, "u")).toBe(false);
  });

  it("names the first field that differs, for the log", () => {
    expect(
      firstDifference(
        { spec: { replicas: 1, ports: [{ port: 443 }] } },
        { spec: { replicas: 3, ports: [{ port: 443 }] } },
      ),
    ).toBe("spec.replicas");
    expect(firstDifference({ spec: { ports: [{ port: 443 }] } }, { spec: { ports: [{ port: 80 }] } })).toBe(
      "spec.ports[0].port",
    );
    expect(firstDifference({ a: 1 }, { a: 1, b: 2 })).toBeUndefined();
  });
});
