// spec.deployment (the runtime's pod settings) as zod reads it: what it accepts, and each refusal
// with its message. The same rules run as CEL in the API server (operator/test/pod.test.ts).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Agent } from "./agent.ts";
import { DeploymentSettings } from "./common.ts";
import { Relay } from "./relay.ts";

const full = {
  sidecars: [{ name: "app", image: "example/app:1", ports: [{ containerPort: 8080 }], resources: { requests: { cpu: "0.5", memory: "64Mi" }, limits: { cpu: 1 } }, securityContext: { readOnlyRootFilesystem: true } }],
  initContainers: [{ name: "migrate", image: "example/app:1", command: ["migrate"] }],
  resources: { requests: { cpu: "100m", memory: "256Mi" }, limits: { memory: "1Gi" } },
  env: [{ name: "LOG_FORMAT", value: "json" }, { name: "FROM_SECRET", valueFrom: { secretKeyRef: { name: "s", key: "k" } } }],
  volumes: [{ name: "data", emptyDir: { sizeLimit: "1Gi" } }],
  volumeMounts: [{ name: "data", mountPath: "/data" }],
  imagePullSecrets: [{ name: "regcred" }],
  nodeSelector: { "kubernetes.io/os": "linux" },
  tolerations: [{ key: "dedicated", operator: "Equal", value: "ifp", effect: "NoSchedule" }],
  affinity: { nodeAffinity: {} },
  topologySpreadConstraints: [{ maxSkew: 1, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "ScheduleAnyway" }],
  securityContext: { fsGroup: 2000, runAsUser: 1000 },
  priorityClassName: "high",
  podAnnotations: { "example.com/team": "a" },
  podLabels: { team: "a", "example.com/tier": "backend" },
};
const issues = (d: unknown) => {
  const r = DeploymentSettings.safeParse(d);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("spec.deployment", () => {
  it("accepts every pod setting, keeping the Kubernetes fields it does not name", () => {
    const d = DeploymentSettings.parse(full);
    expect(d).toEqual(full);
    for (const [R, spec] of [[Agent, { agentId: "a" }], [Relay, { url: "https://r.example" }]] as const) {
      const r = R.parse({ apiVersion: "ifp.dev/v1alpha1", kind: R === Agent ? "Agent" : "Relay", spec: { ...spec, deployment: full } });
      expect(r.spec.deployment).toEqual(full);
    }
  });

  it("accepts the example of docs/operator.md", () => {
    const doc = readFileSync(new URL("../../../docs/operator.md", import.meta.url), "utf8");
    const section = doc.slice(doc.indexOf("## The application beside its agent"));
    const example = parse(/```yaml\n([\s\S]*?)```/.exec(section)![1]!);
    const agent = Agent.parse(example);
    expect(agent.spec.deployment?.sidecars?.map((c) => c.name)).toEqual(["app"]);
    expect(agent.spec.deployment?.podLabels).toEqual({ team: "payments" });
  });

  it("is optional", () => {
    expect(Agent.parse({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", spec: { agentId: "a" } }).spec.deployment).toBeUndefined();
  });

  const sidecar = (name: string, extra: object = {}) => ({ name, image: "i", ...extra });
  const refusals: [string, unknown, RegExp][] = [
    ["a container without an image", { sidecars: [{ name: "app" }] }, /sidecars.0.image/],
    ["a container name that is not a DNS label", { sidecars: [sidecar("App_1")] }, /sidecars.0.name: a container's name must be a DNS-1123 label/],
    ["a sidecar named runtime", { sidecars: [sidecar("runtime")] }, /sidecars.0.name: container name 'runtime' is the runtime's own/],
    ["an init container named runtime", { initContainers: [sidecar("runtime")] }, /initContainers.0.name: container name 'runtime' is the runtime's own/],
    ["two sidecars of a name", { sidecars: [sidecar("app"), sidecar("app")] }, /sidecars: container name 'app' is used twice/],
    ["a sidecar and an init container of a name", { sidecars: [sidecar("app")], initContainers: [sidecar("app")] }, /used by both a sidecar and an init container/],
    ...["manifest", "tls", "tmp", "signing", "nats", "trust", "local-api"].map((v): [string, unknown, RegExp] => [`the runtime's volume ${v}`, { volumes: [{ name: v, emptyDir: {} }] }, /volumes.0.name: volume name is one of the runtime's own/]),
    ["two volumes of a name", { volumes: [{ name: "d", emptyDir: {} }, { name: "d", emptyDir: {} }] }, /volumes: volume name 'd' is used twice/],
    ["a volume without a name", { volumes: [{ emptyDir: {} }] }, /volumes.0.name/],
    ["a mount over /tmp", { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "/tmp" }] }, /mountPath cannot be \/tmp or under \/etc\/ifp/],
    ["a mount under /etc/ifp", { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "/etc/ifp/tls/x" }] }, /mountPath cannot be \/tmp or under \/etc\/ifp/],
    ["a relative mount path", { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "data" }] }, /mountPath must be absolute/],
    ["a mount of a volume that is not there", { volumeMounts: [{ name: "tls", mountPath: "/x" }] }, /volumeMounts.0.name: each of volumeMounts must name a volume of spec.deployment.volumes/],
    ["an IFP_ env name", { env: [{ name: "IFP_LOG_LEVEL", value: "debug" }] }, /env.0.name: env names starting with IFP_ are the runtime's own/],
    ["two env vars of a name", { env: [{ name: "A", value: "1" }, { name: "A", value: "2" }] }, /env: env name 'A' is used twice/],
    ["an env value that is not a string", { env: [{ name: "A", value: 1 }] }, /env.0.value/],
    ["a pod running as root by runAsNonRoot", { securityContext: { runAsNonRoot: false } }, /securityContext.runAsNonRoot: runAsNonRoot cannot be false/],
    ["a pod running as root by UID", { securityContext: { runAsUser: 0 } }, /securityContext.runAsUser: runAsUser cannot be 0/],
    ["a sidecar running as root", { sidecars: [sidecar("app", { securityContext: { runAsUser: 0 } })] }, /sidecars.0.securityContext.runAsUser: runAsUser cannot be 0/],
    ["an init container allowed to be root", { initContainers: [sidecar("init", { securityContext: { runAsNonRoot: false } })] }, /initContainers.0.securityContext.runAsNonRoot/],
    ["a bad quantity", { resources: { limits: { memory: "lots" } } }, /resources.limits.memory: must be a quantity/],
    ["a fractional number for a quantity", { resources: { requests: { cpu: 0.5 } } }, /resources.requests.cpu: must be a quantity/],
    ["a podLabel over the selector's name", { podLabels: { "app.kubernetes.io/name": "x" } }, /podLabels.app.kubernetes.io\/name: podLabels cannot set the labels the operator sets/],
    ["a podLabel over the selector's instance", { podLabels: { "app.kubernetes.io/instance": "other" } }, /podLabels cannot set the labels the operator sets/],
    ["a podLabel key that is not a label key", { podLabels: { "a b": "x" } }, /podLabels keys must be Kubernetes label keys/],
    ["a podLabel value that is not a label value", { podLabels: { a: "not ok" } }, /podLabels.a: a label value/],
    ["a podAnnotation over the config hash", { podAnnotations: { "ifp.dev/config-hash": "0" } }, /podAnnotations cannot use the prefix ifp.dev\//],
    ["a podAnnotation key that is not a key", { podAnnotations: { "/x": "y" } }, /podAnnotations keys must be Kubernetes annotation keys/],
    ["two pull secrets of a name", { imagePullSecrets: [{ name: "r" }, { name: "r" }] }, /imagePullSecret 'r' is named twice/],
    ["too many sidecars", { sidecars: Array.from({ length: 17 }, (_, i) => sidecar(`c${i}`)) }, /sidecars/],
  ];
  it.each(refusals)("refuses %s", (_name, input, message) => {
    const found = issues(input);
    expect(found.join("\n")).toMatch(message);
  });
});
