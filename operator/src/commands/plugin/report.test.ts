import { describe, expect, it } from "vitest";
import { isInstallPod } from "./report.ts";

const operator = {
  metadata: { name: "ifp-ifp-operator", namespace: "ifp-system" },
  spec: {
    selector: { matchLabels: { "app.kubernetes.io/name": "ifp-operator", "app.kubernetes.io/instance": "ifp" } },
  },
};
const pod = (namespace: string, labels: Record<string, string>) => ({ metadata: { name: "p", namespace, labels } });
const release = { "app.kubernetes.io/name": "ifp-operator", "app.kubernetes.io/instance": "ifp" };

describe("the pods whose logs a report holds", () => {
  it("are the chart's release pods (operator, NATS, hooks) by the operator Deployment's selector", () => {
    expect(isInstallPod(pod("ifp-system", { ...release, "app.kubernetes.io/component": "operator" }), operator)).toBe(
      true,
    );
    expect(isInstallPod(pod("ifp-system", { ...release, "app.kubernetes.io/component": "nats" }), operator)).toBe(true);
  });

  it("and the runtimes, wherever they run", () => {
    expect(isInstallPod(pod("team", { "app.kubernetes.io/name": "ifp-runtime" }), operator)).toBe(true);
    expect(isInstallPod(pod("team", { "app.kubernetes.io/part-of": "ifp-operator" }), undefined)).toBe(true);
  });

  it("not another release's pods, the same labels in another namespace, or anything without the operator found", () => {
    expect(isInstallPod(pod("ifp-system", { ...release, "app.kubernetes.io/instance": "other" }), operator)).toBe(
      false,
    );
    expect(isInstallPod(pod("team", release), operator)).toBe(false);
    expect(isInstallPod(pod("ifp-system", release), undefined)).toBe(false);
    expect(isInstallPod(pod("ifp-system", {}), { ...operator, spec: { selector: { matchLabels: {} } } })).toBe(false);
  });
});
