import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { AgentSpec } from "../resources/agent.ts";
import { tempDir } from "../../test/support/fixtures.ts";
import { cpuLimit, workerCount } from "./workers.ts";

describe("spec.runtime.workers", () => {
  it("takes 1 to 64 or auto, and refuses anything else", () => {
    const parse = (workers: unknown) => AgentSpec.safeParse({ agentId: "a", runtime: { workers } }).success;
    for (const ok of [1, 2, 64, "auto"]) expect(parse(ok), String(ok)).toBe(true);
    for (const bad of [0, 65, 1.5, -1, "two", "", "4", null, true]) expect(parse(bad), String(bad)).toBe(false);
    expect(AgentSpec.parse({ agentId: "a" }).runtime).toBeUndefined();
  });

  it("is 1 unset; auto is the container's CPU limit, and 1 without one", () => {
    expect(workerCount(undefined, () => 8)).toBe(1);
    expect(workerCount(3, () => 8)).toBe(3);
    expect(workerCount("auto", () => 4)).toBe(4);
    expect(workerCount("auto", () => undefined)).toBe(1);
    expect(workerCount("auto", () => 500)).toBe(64);
    expect(() => workerCount(0)).toThrow(/whole number from 1 to 64/);
    expect(() => workerCount(65)).toThrow(/whole number from 1 to 64/);
  });

  it("reads the CPU limit from cgroup v2's cpu.max, rounded down, at least 1", () => {
    const dir = tempDir();
    const file = (text: string) => {
      const path = join(dir, `cpu.max.${Math.random()}`);
      writeFileSync(path, text);
      return path;
    };
    expect(cpuLimit(file("200000 100000\n"))).toBe(2);
    expect(cpuLimit(file("250000 100000\n"))).toBe(2);
    expect(cpuLimit(file("50000 100000\n"))).toBe(1);
    expect(cpuLimit(file("max 100000\n"))).toBeUndefined();
    expect(cpuLimit(join(dir, "missing"))).toBeUndefined();
  });
});
