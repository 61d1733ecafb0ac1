import { describe, expect, it } from "vitest";
import { DIGEST_ABOVE, digestDataInPlace, digestedData } from "./digest.ts";
import { firstDifference, isSubset } from "./subset.ts";

const manifest = (name: string) => `kind: Agent\nmetadata: {name: ${name}}\n${"spec: {}\n".repeat(40)}`;
const configMap = (data: Record<string, string>) => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name: "a-manifest", namespace: "n" },
  data,
});

describe("a cached ConfigMap's long values", () => {
  it("are held as their digest, short ones as they are, and digesting twice changes nothing", () => {
    const cm = configMap({ "manifest.yaml": manifest("a"), short: "x" });
    const want = digestedData(cm);
    expect(want).not.toBe(cm);
    expect(cm.data["manifest.yaml"]).toBe(manifest("a"));
    expect(want.data["manifest.yaml"]).toMatch(/^sha256:[\w-]{43}$/);
    expect(want.data.short).toBe("x");
    const cached = structuredClone(cm);
    digestDataInPlace(cached);
    expect(cached).toEqual(want);
    expect(digestedData(want)).toEqual(want);
    expect(manifest("a").length).toBeGreaterThan(DIGEST_ABOVE);
  });

  it("compare as the values do: the same manifest is contained, another one is not", () => {
    const cached = digestedData(configMap({ "manifest.yaml": manifest("a") }));
    expect(isSubset(digestedData(configMap({ "manifest.yaml": manifest("a") })), cached)).toBe(true);
    const edited = digestedData(configMap({ "manifest.yaml": manifest("b") }));
    expect(isSubset(edited, cached)).toBe(false);
    expect(firstDifference(edited, cached)).toBe("data.manifest.yaml");
  });

  it("are only a ConfigMap's", () => {
    const secret = { ...configMap({ key: manifest("a") }), kind: "Secret" };
    expect(digestedData(secret)).toBe(secret);
  });
});
