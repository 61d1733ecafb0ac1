import { describe, expect, it } from "vitest";
import { runtimeDeployment, runtimeImageVersion, VERSION_LABEL } from "./workload.ts";

const settings = {
  runtimeImage: `registry.example/ifp-runtime@sha256:${"a".repeat(64)}`,
  runtimeVersion: "0.3.0",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://n",
};

describe("runtimeImageVersion", () => {
  it("is the tag the image names, else --runtime-version for the install's own image", () => {
    expect(runtimeImageVersion("registry.example:5000/ifp/ifp-runtime:0.2.0", settings)).toBe("0.2.0");
    expect(runtimeImageVersion(`ifp-runtime:1.0.0-rc.1@sha256:${"b".repeat(64)}`, settings)).toBe("1.0.0-rc.1");
    expect(runtimeImageVersion(settings.runtimeImage, settings)).toBe("0.3.0");
    // Another image by digest alone, or a registry port without a tag: no version.
    expect(runtimeImageVersion(`other@sha256:${"c".repeat(64)}`, settings)).toBeUndefined();
    expect(runtimeImageVersion("registry.example:5000/ifp-runtime", settings)).toBeUndefined();
  });

  it("gives no version a label could not hold", () => {
    expect(runtimeImageVersion(`r:${"1".repeat(64)}`, settings)).toBeUndefined();
    expect(runtimeImageVersion("r:-x", settings)).toBeUndefined();
    expect(runtimeImageVersion(settings.runtimeImage, { ...settings, runtimeVersion: "a b" })).toBeUndefined();
  });

  it("labels the runtime's pods with it, and leaves the selector alone", () => {
    const owner = {
      apiVersion: "ifp.dev/v1alpha1",
      kind: "Agent",
      metadata: { name: "alice", namespace: "team", uid: "u" },
    };
    const d = runtimeDeployment({
      owner,
      replicas: 1,
      image: "r:0.2.0",
      settings,
      tlsSecret: "t",
      configHash: "h",
    } as never);
    expect(d.spec?.template.metadata?.labels?.[VERSION_LABEL]).toBe("0.2.0");
    expect(d.spec?.selector.matchLabels?.[VERSION_LABEL]).toBeUndefined();
    const unknown = runtimeDeployment({
      owner,
      replicas: 1,
      image: "r",
      settings,
      tlsSecret: "t",
      configHash: "h",
    } as never);
    expect(unknown.spec?.template.metadata?.labels).not.toHaveProperty(VERSION_LABEL);
  });
});

describe("runtimeDeployment on the install's NATS layout", () => {
  const args = (kind: "Agent" | "Relay", natsLayout?: "per-agent" | "isolated") =>
    runtimeDeployment({
      owner: { kind, metadata: { name: "alice", namespace: "team", uid: "u" } },
      mode: kind === "Agent" ? "agent" : "relay",
      replicas: 1,
      image: undefined,
      settings: { ...settings, ...(natsLayout ? { natsLayout } : {}) },
      tlsSecret: "t",
      configHash: "h",
    }).spec!.template.spec!.containers[0]!.args!;

  it("renders --nats-layout=isolated for an Agent of an isolated install only; a Relay keeps its own account", () => {
    expect(args("Agent", "isolated")).toContain("--nats-layout=isolated");
    expect(args("Agent", "per-agent").some((a) => a.startsWith("--nats-layout"))).toBe(false);
    expect(args("Agent").some((a) => a.startsWith("--nats-layout"))).toBe(false);
    expect(args("Relay", "isolated").some((a) => a.startsWith("--nats-layout"))).toBe(false);
  });
});

describe("runtimeDeployment with spec.runtime.workers", () => {
  const container = (kind: "Agent" | "Relay", workers?: number | "auto", pod?: unknown) =>
    runtimeDeployment({
      owner: { kind, metadata: { name: "alice", namespace: "team", uid: "u" } },
      mode: kind === "Agent" ? "agent" : "relay",
      replicas: 1,
      image: undefined,
      settings,
      tlsSecret: "t",
      configHash: "h",
      ...(workers === undefined ? {} : { workers }),
      ...(pod === undefined ? {} : { pod }),
    } as never).spec!.template.spec!.containers[0]!;
  const args = (kind: "Agent" | "Relay", workers?: number | "auto") => container(kind, workers).args!;
  const nodeOptions = (c: ReturnType<typeof container>) => c.env?.find((e) => e.name === "NODE_OPTIONS")?.value;

  it("renders --workers for an Agent that sets it, and nothing when it is unset", () => {
    expect(args("Agent", 4)).toContain("--workers=4");
    expect(args("Agent", "auto")).toContain("--workers=auto");
    expect(args("Agent").some((a) => a.startsWith("--workers"))).toBe(false);
    expect(args("Relay", 4).some((a) => a.startsWith("--workers"))).toBe(false);
  });

  it("raises the default memory by 64Mi requested and 128Mi of limit per loop beside the first, each loop's heap its share", () => {
    const memory = (c: ReturnType<typeof container>) => [c.resources?.requests?.memory, c.resources?.limits?.memory];
    expect(memory(container("Agent"))).toEqual(["128Mi", "512Mi"]);
    expect(nodeOptions(container("Agent"))).toBe("--max-old-space-size=128 --max-semi-space-size=4");
    expect(memory(container("Agent", 1))).toEqual(["128Mi", "512Mi"]);
    expect(memory(container("Agent", 2))).toEqual(["192Mi", "640Mi"]);
    expect(nodeOptions(container("Agent", 2))).toBe("--max-old-space-size=80 --max-semi-space-size=4");
    expect(memory(container("Agent", 4))).toEqual(["320Mi", "896Mi"]);
    expect(nodeOptions(container("Agent", 4))).toBe("--max-old-space-size=64 --max-semi-space-size=4");
    // "auto" without the user's resources has no CPU limit: one loop.
    expect(memory(container("Agent", "auto"))).toEqual(["128Mi", "512Mi"]);
    expect(memory(container("Relay", 4))).toEqual(["128Mi", "512Mi"]);
  });

  it("leaves the user's resources as given, and shares their memory limit among the loops (auto: the CPU limit's)", () => {
    const resources = { requests: { cpu: "2", memory: "512Mi" }, limits: { cpu: "4", memory: "2Gi" } };
    const auto = container("Agent", "auto", { resources });
    expect(auto.resources).toEqual(resources);
    expect(nodeOptions(auto)).toBe("--max-old-space-size=128 --max-semi-space-size=4");
    expect(nodeOptions(container("Agent", 2, { resources }))).toBe("--max-old-space-size=256 --max-semi-space-size=4");
    expect(nodeOptions(container("Agent", undefined, { resources }))).toBe(
      "--max-old-space-size=512 --max-semi-space-size=4",
    );
    const halfCpu = { limits: { cpu: "1500m", memory: "1Gi" } };
    expect(nodeOptions(container("Agent", "auto", { resources: halfCpu }))).toBe(
      "--max-old-space-size=256 --max-semi-space-size=4",
    );
  });
});
