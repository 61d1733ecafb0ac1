// spec.deployment (the runtime's pod settings) as zod reads it: what it accepts, and each refusal
// with its message. The same rules run as CEL in the API server (operator/test/workload/pod.test.ts).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Agent } from "./agent.ts";
import { DeploymentSettings } from "./deployment.ts";
import { Relay } from "./relay.ts";

const full = {
  sidecars: [
    {
      name: "app",
      image: "example/app:1",
      ports: [{ containerPort: 8080 }],
      resources: { requests: { cpu: "0.5", memory: "64Mi" }, limits: { cpu: 1 } },
      securityContext: { readOnlyRootFilesystem: true },
    },
  ],
  initContainers: [{ name: "migrate", image: "example/app:1", command: ["migrate"] }],
  resources: { requests: { cpu: "100m", memory: "256Mi" }, limits: { memory: "1Gi" } },
  env: [
    { name: "LOG_FORMAT", value: "json" },
    { name: "FROM_SECRET", valueFrom: { secretKeyRef: { name: "s", key: "k" } } },
  ],
  volumes: [{ name: "data", emptyDir: { sizeLimit: "1Gi" } }],
  volumeMounts: [{ name: "data", mountPath: "/data" }],
  imagePullSecrets: [{ name: "regcred" }],
  nodeSelector: { "kubernetes.io/os": "linux" },
  tolerations: [{ key: "dedicated", operator: "Equal", value: "ifp", effect: "NoSchedule" }],
  affinity: { nodeAffinity: {} },
  topologySpreadConstraints: [
    { maxSkew: 1, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "ScheduleAnyway" },
  ],
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
    for (const [R, spec] of [
      [Agent, { agentId: "a" }],
      [Relay, { url: "https://r.example" }],
    ] as const) {
      const r = R.parse({
        apiVersion: "ifp.dev/v1alpha1",
        kind: R === Agent ? "Agent" : "Relay",
        spec: { ...spec, deployment: full },
      });
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
    expect(
      Agent.parse({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", spec: { agentId: "a" } }).spec.deployment,
    ).toBeUndefined();
  });

  const sidecar = (name: string, extra: object = {}) => ({ name, image: "i", ...extra });
  const refusals: [string, unknown, RegExp][] = [
    ["a container without an image", { sidecars: [{ name: "app" }] }, /sidecars.0.image/],
    [
      "a container name that is not a DNS label",
      { sidecars: [sidecar("App_1")] },
      /sidecars.0.name: a container's name must be a DNS-1123 label/,
    ],
    [
      "a sidecar named runtime",
      { sidecars: [sidecar("runtime")] },
      /sidecars.0.name: container name 'runtime' is the runtime's own/,
    ],
    [
      "an init container named runtime",
      { initContainers: [sidecar("runtime")] },
      /initContainers.0.name: container name 'runtime' is the runtime's own/,
    ],
    [
      "two sidecars of a name",
      { sidecars: [sidecar("app"), sidecar("app")] },
      /sidecars: container name 'app' is used twice/,
    ],
    [
      "a sidecar and an init container of a name",
      { sidecars: [sidecar("app")], initContainers: [sidecar("app")] },
      /used by both a sidecar and an init container/,
    ],
    ...["manifest", "tls", "tmp", "signing", "nats", "trust", "local-api"].map((v): [string, unknown, RegExp] => [
      `the runtime's volume ${v}`,
      { volumes: [{ name: v, emptyDir: {} }] },
      /volumes.0.name: volume name is one of the runtime's own/,
    ]),
    [
      "two volumes of a name",
      {
        volumes: [
          { name: "d", emptyDir: {} },
          { name: "d", emptyDir: {} },
        ],
      },
      /volumes: volume name 'd' is used twice/,
    ],
    ["a volume without a name", { volumes: [{ emptyDir: {} }] }, /volumes.0.name/],
    [
      "a mount over /tmp",
      { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "/tmp" }] },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a mount under /etc/ifp",
      { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "/etc/ifp/tls/x" }] },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a mount over the runtime's token",
      {
        volumes: [{ name: "d" }],
        volumeMounts: [{ name: "d", mountPath: "/var/run/secrets/kubernetes.io/serviceaccount" }],
      },
      /mountPath cannot be \/tmp, under \/etc\/ifp or under \/var\/run\/secrets\/kubernetes.io\/serviceaccount/,
    ],
    [
      "a relative mount path",
      { volumes: [{ name: "d" }], volumeMounts: [{ name: "d", mountPath: "data" }] },
      /mountPath must be absolute/,
    ],
    [
      "a mount of a volume that is not there",
      { volumeMounts: [{ name: "tls", mountPath: "/x" }] },
      /volumeMounts.0.name: each of volumeMounts must name a volume of spec.deployment.volumes/,
    ],
    [
      "an IFP_ env name",
      { env: [{ name: "IFP_LOG_LEVEL", value: "debug" }] },
      /env.0.name: env names starting with IFP_ are the runtime's own/,
    ],
    [
      "two env vars of a name",
      {
        env: [
          { name: "A", value: "1" },
          { name: "A", value: "2" },
        ],
      },
      /env: env name 'A' is used twice/,
    ],
    ["an env value that is not a string", { env: [{ name: "A", value: 1 }] }, /env.0.value/],
    [
      "a pod running as root by runAsNonRoot",
      { securityContext: { runAsNonRoot: false } },
      /securityContext.runAsNonRoot: runAsNonRoot cannot be false/,
    ],
    [
      "a pod running as root by UID",
      { securityContext: { runAsUser: 0 } },
      /securityContext.runAsUser: runAsUser cannot be 0/,
    ],
    [
      "a sidecar running as root",
      { sidecars: [sidecar("app", { securityContext: { runAsUser: 0 } })] },
      /sidecars.0.securityContext.runAsUser: runAsUser cannot be 0/,
    ],
    [
      "an init container allowed to be root",
      { initContainers: [sidecar("init", { securityContext: { runAsNonRoot: false } })] },
      /initContainers.0.securityContext.runAsNonRoot/,
    ],
    ["a bad quantity", { resources: { limits: { memory: "lots" } } }, /resources.limits.memory: must be a quantity/],
    [
      "a fractional number for a quantity",
      { resources: { requests: { cpu: 0.5 } } },
      /resources.requests.cpu: must be a quantity/,
    ],
    [
      "a podLabel over the selector's name",
      { podLabels: { "app.kubernetes.io/name": "x" } },
      /podLabels.app.kubernetes.io\/name: podLabels cannot set the labels the operator sets/,
    ],
    [
      "a podLabel over the selector's instance",
      { podLabels: { "app.kubernetes.io/instance": "other" } },
      /podLabels cannot set the labels the operator sets/,
    ],
    [
      "a podLabel key that is not a label key",
      { podLabels: { "a b": "x" } },
      /podLabels keys must be Kubernetes label keys/,
    ],
    ["a podLabel value that is not a label value", { podLabels: { a: "not ok" } }, /podLabels.a: a label value/],
    [
      "a podAnnotation over the config hash",
      { podAnnotations: { "ifp.dev/config-hash": "0" } },
      /podAnnotations cannot use the prefix ifp.dev\//,
    ],
    [
      "a podAnnotation key that is not a key",
      { podAnnotations: { "/x": "y" } },
      /podAnnotations keys must be Kubernetes annotation keys/,
    ],
    [
      "two pull secrets of a name",
      { imagePullSecrets: [{ name: "r" }, { name: "r" }] },
      /imagePullSecret 'r' is named twice/,
    ],
    ["too many sidecars", { sidecars: Array.from({ length: 17 }, (_, i) => sidecar(`c${i}`)) }, /sidecars/],
    // The restricted Pod Security Standard (the same rules run as CEL: operator/test/pod-policy/pod-security.test.ts).
    [
      "a privileged sidecar",
      { sidecars: [sidecar("app", { securityContext: { privileged: true } })] },
      /sidecars.0.securityContext.privileged: privileged cannot be true/,
    ],
    [
      "privilege escalation",
      { initContainers: [sidecar("i", { securityContext: { allowPrivilegeEscalation: true } })] },
      /initContainers.0.securityContext.allowPrivilegeEscalation: allowPrivilegeEscalation cannot be true/,
    ],
    [
      "an added capability",
      { sidecars: [sidecar("app", { securityContext: { capabilities: { add: ["NET_BIND_SERVICE", "SYS_ADMIN"] } } })] },
      /sidecars.0.securityContext.capabilities.add: capabilities.add may hold only NET_BIND_SERVICE/,
    ],
    [
      "a drop list without ALL",
      { sidecars: [sidecar("app", { securityContext: { capabilities: { drop: ["NET_RAW"] } } })] },
      /capabilities.drop must include ALL/,
    ],
    [
      "an Unconfined seccomp profile of a container",
      { sidecars: [sidecar("app", { securityContext: { seccompProfile: { type: "Unconfined" } } })] },
      /sidecars.0.securityContext.seccompProfile.type: seccompProfile.type must be RuntimeDefault or Localhost/,
    ],
    [
      "an Unconfined seccomp profile of the pod",
      { securityContext: { seccompProfile: { type: "Unconfined" } } },
      /securityContext.seccompProfile.type: seccompProfile.type must be/,
    ],
    [
      "an Unconfined AppArmor profile",
      { securityContext: { appArmorProfile: { type: "Unconfined" } } },
      /appArmorProfile.type must be/,
    ],
    [
      "an SELinux user",
      { sidecars: [sidecar("app", { securityContext: { seLinuxOptions: { user: "system_u" } } })] },
      /seLinuxOptions may set only a type/,
    ],
    [
      "an SELinux type of the host",
      { securityContext: { seLinuxOptions: { type: "spc_t" } } },
      /seLinuxOptions may set only a type/,
    ],
    [
      "an unmasked /proc",
      { sidecars: [sidecar("app", { securityContext: { procMount: "Unmasked" } })] },
      /procMount must be Default/,
    ],
    [
      "a Windows host process",
      { securityContext: { windowsOptions: { hostProcess: true } } },
      /windowsOptions.hostProcess cannot be true/,
    ],
    [
      "an unsafe sysctl",
      { securityContext: { sysctls: [{ name: "kernel.msgmax", value: "1" }] } },
      /securityContext.sysctls: sysctls may set only the safe ones/,
    ],
    [
      "a host port",
      { sidecars: [sidecar("app", { ports: [{ containerPort: 80, hostPort: 80 }] })] },
      /sidecars.0.ports.0.hostPort: ports\[\].hostPort cannot be set/,
    ],
    [
      "a probe of another host",
      { sidecars: [sidecar("app", { readinessProbe: { httpGet: { host: "10.0.0.1", port: 80 } } })] },
      /sidecars.0.readinessProbe.httpGet.host: readinessProbe.httpGet.host cannot name a host/,
    ],
    [
      "a hook of another host",
      { sidecars: [sidecar("app", { lifecycle: { preStop: { tcpSocket: { host: "169.254.169.254", port: 80 } } } })] },
      /lifecycle.preStop.tcpSocket.host cannot name a host/,
    ],
    [
      "a hostPath volume",
      { volumes: [{ name: "root", hostPath: { path: "/" } }] },
      /volumes.0.hostPath: a volume's type must be one of configMap, secret, emptyDir/,
    ],
    [
      "an nfs volume",
      { volumes: [{ name: "n", nfs: { server: "s", path: "/" } }] },
      /volumes.0.nfs: a volume's type must be one of/,
    ],
    [
      "a volume type the schema does not know",
      { volumes: [{ name: "n", futureHostThing: {} }] },
      /volumes.0.futureHostThing: a volume's type must be one of/,
    ],
    [
      "an AppArmor annotation that unconfines",
      { podAnnotations: { "container.apparmor.security.beta.kubernetes.io/app": "unconfined" } },
      /podAnnotations cannot set a seccomp profile .* or an AppArmor profile other than/,
    ],
    [
      "a seccomp annotation",
      { podAnnotations: { "seccomp.security.alpha.kubernetes.io/pod": "unconfined" } },
      /podAnnotations cannot set a seccomp profile/,
    ],
  ];
  it("accepts what the restricted standard allows: NET_BIND_SERVICE, Localhost profiles, container SELinux types, safe sysctls, the allowed volume types", () => {
    expect(
      issues({
        sidecars: [
          sidecar("app", {
            ports: [{ containerPort: 80, hostPort: 0 }],
            readinessProbe: { httpGet: { port: 80, host: "" } },
            securityContext: {
              capabilities: { add: ["NET_BIND_SERVICE"], drop: ["ALL"] },
              seccompProfile: { type: "Localhost", localhostProfile: "p.json" },
              seLinuxOptions: { type: "container_t", level: "s0:c1" },
              procMount: "Default",
              allowPrivilegeEscalation: false,
              privileged: false,
            },
          }),
        ],
        securityContext: {
          appArmorProfile: { type: "RuntimeDefault" },
          sysctls: [{ name: "net.ipv4.ip_unprivileged_port_start", value: "0" }],
        },
        volumes: [
          { name: "a", emptyDir: {} },
          { name: "b", configMap: { name: "c" } },
          { name: "c", secret: { secretName: "s" } },
          { name: "d", projected: { sources: [] } },
          { name: "e", downwardAPI: {} },
          { name: "f", persistentVolumeClaim: { claimName: "p" } },
          { name: "g", ephemeral: {} },
          { name: "h", csi: { driver: "d" } },
        ],
        podAnnotations: { "container.apparmor.security.beta.kubernetes.io/app": "runtime/default" },
      }),
    ).toEqual([]);
  });

  it.each(refusals)("refuses %s", (_name, input, message) => {
    const found = issues(input);
    expect(found.join("\n")).toMatch(message);
  });
});
