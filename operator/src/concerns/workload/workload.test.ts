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
  const args = (kind: "Agent" | "Relay", workers?: number | "auto") =>
    runtimeDeployment({
      owner: { kind, metadata: { name: "alice", namespace: "team", uid: "u" } },
      mode: kind === "Agent" ? "agent" : "relay",
      replicas: 1,
      image: undefined,
      settings,
      tlsSecret: "t",
      configHash: "h",
      ...(workers === undefined ? {} : { workers }),
    }).spec!.template.spec!.containers[0]!.args!;

  it("renders --workers for an Agent that sets it, and nothing when it is unset", () => {
    expect(args("Agent", 4)).toContain("--workers=4");
    expect(args("Agent", "auto")).toContain("--workers=auto");
    expect(args("Agent").some((a) => a.startsWith("--workers"))).toBe(false);
    expect(args("Relay", 4).some((a) => a.startsWith("--workers"))).toBe(false);
  });
});
