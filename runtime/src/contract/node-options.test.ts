import { describe, expect, it } from "vitest";
import { DEFAULT_RUNTIME_NODE_OPTIONS, defaultRuntimeMemory, memoryBytes, runtimeNodeOptions } from "./node-options.ts";

describe("the runtime's V8 heap", () => {
  it("reads memory quantities as Kubernetes writes them", () => {
    expect(memoryBytes("512Mi")).toBe(512 * 2 ** 20);
    expect(memoryBytes("1Gi")).toBe(2 ** 30);
    expect(memoryBytes("1.5Gi")).toBe(1.5 * 2 ** 30);
    expect(memoryBytes("1G")).toBe(1e9);
    expect(memoryBytes("500k")).toBe(5e5);
    expect(memoryBytes("1e9")).toBe(1e9);
    expect(memoryBytes("536870912")).toBe(536870912);
    expect(memoryBytes(1024)).toBe(1024);
    for (const bad of ["", "lots", "-1Gi", "1Xi", "0", "Mi", undefined])
      expect(memoryBytes(bad), String(bad)).toBeUndefined();
  });

  it("gives the old generation a quarter of the limit (at least 64 MiB), an agent semi-spaces of 4 MiB and a relay of 16 MiB, each at most a sixteenth of the limit", () => {
    expect(DEFAULT_RUNTIME_NODE_OPTIONS).toEqual({
      agent: "--max-old-space-size=128 --max-semi-space-size=4",
      relay: "--max-old-space-size=128 --max-semi-space-size=16",
    });
    expect(runtimeNodeOptions(4 * 2 ** 30, "relay")).toBe("--max-old-space-size=1024 --max-semi-space-size=16");
    expect(runtimeNodeOptions(128 * 2 ** 20, "relay")).toBe("--max-old-space-size=64 --max-semi-space-size=8");
    expect(runtimeNodeOptions(16 * 2 ** 20, "relay")).toBe("--max-old-space-size=64 --max-semi-space-size=1");
    expect(runtimeNodeOptions(undefined, "relay")).toBeUndefined();
    expect(runtimeNodeOptions(4 * 2 ** 30)).toBe("--max-old-space-size=1024 --max-semi-space-size=4");
    expect(runtimeNodeOptions(64 * 2 ** 20)).toBe("--max-old-space-size=64 --max-semi-space-size=4");
    expect(runtimeNodeOptions(undefined)).toBeUndefined();
  });

  it("gives each of several event loops its share of the limit, and raises the default memory per loop", () => {
    expect(runtimeNodeOptions(2 * 2 ** 30, "agent", 4)).toBe("--max-old-space-size=128 --max-semi-space-size=4");
    expect(runtimeNodeOptions(128 * 2 ** 20, "agent", 2)).toBe("--max-old-space-size=64 --max-semi-space-size=4");
    expect(runtimeNodeOptions(32 * 2 ** 20, "agent", 2)).toBe("--max-old-space-size=64 --max-semi-space-size=1");
    expect(defaultRuntimeMemory()).toEqual({ request: "128Mi", limit: "512Mi" });
    expect(defaultRuntimeMemory(3)).toEqual({ request: "256Mi", limit: "768Mi" });
  });
});
