// spec.deployment: the pod settings of a runtime's Deployment — the application's containers,
// volumes, env, labels and annotations beside the runtime, its placement and resources — and the
// names the runtime's own pod keeps.
import { z } from "zod";
import { Quantity } from "./fields.ts";
import {
  ALLOWED_VOLUME_TYPES,
  ContainerSecurityContext,
  FORBIDDEN_VOLUME_TYPES,
  PodSecurityContext,
  RESTRICTED,
} from "./pod-security.ts";
import { PASS_THROUGH, byName, cel, passThrough } from "./schema.ts";

// Kubernetes core types (Container, Volume, ...) pass through as objects that keep unknown
// fields; the few keys the operator relies on are checked here and by CEL in the API server.

/** Names the runtime's own pod uses: refused for the user's containers and volumes. */
export const RUNTIME_CONTAINER = "runtime";
export const RUNTIME_VOLUMES = [
  "manifest",
  "tls",
  "tmp",
  "signing",
  "nats",
  "trust",
  "local-api",
  "introduction",
  "kube-api",
] as const;
/** Pod labels the operator sets (the first two select the pods): a user's podLabels may not set them. */
export const RUNTIME_POD_LABELS = [
  "app.kubernetes.io/name",
  "app.kubernetes.io/instance",
  "app.kubernetes.io/component",
  "app.kubernetes.io/part-of",
  "app.kubernetes.io/managed-by",
] as const;
/** Pod annotations under this prefix (the config hash among them) are the operator's. */
export const RUNTIME_ANNOTATION_PREFIX = "ifp.dev/";

const DNS_LABEL_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const _DNS_LABEL_CEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/** A label or annotation key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters. */
const META_KEY_RE =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const META_KEY_CEL =
  "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
const LABEL_VALUE_RE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;
const metaKeyOk = (k: string) =>
  k.length <= 316 &&
  META_KEY_RE.test(k) &&
  (k.split("/").pop() ?? "").length <= 63 &&
  (!k.includes("/") || k.indexOf("/") <= 253);
const META_KEY_RULE = `self.all(k, k.matches('${META_KEY_CEL}') && k.split('/')[k.split('/').size() - 1].size() <= 63)`;
/** A path the runtime container mounts itself, or under one. */
const RUNTIME_PATH_RE = /^\/(tmp|etc\/ifp|var\/run\/secrets\/kubernetes\.io\/serviceaccount)(\/|$)/;

const DnsLabel = (what: string) =>
  z
    .string()
    .min(1)
    .max(63)
    .regex(DNS_LABEL_RE, `${what} must be a DNS-1123 label (lower-case letters, digits and '-')`);
export const Resources = passThrough(
  {
    requests: z
      .record(z.string(), Quantity)
      .optional()
      .describe("Resources the scheduler reserves, e.g. cpu: 50m, memory: 128Mi"),
    limits: z
      .record(z.string(), Quantity)
      .optional()
      .describe("Most resources the container may use, e.g. memory: 512Mi"),
  },
  "Compute resources (Kubernetes ResourceRequirements)",
);

/** A probe's or lifecycle handler's target: never another host (the kubelet would reach it for the pod). */
type Handler = { httpGet?: { host?: unknown }; tcpSocket?: { host?: unknown } } | undefined;
const HANDLERS = ["livenessProbe", "readinessProbe", "startupProbe"] as const;
const handlerHosts = (c: Record<string, unknown>): string[] => {
  const out: string[] = [];
  const check = (h: Handler, path: string) => {
    for (const kind of ["httpGet", "tcpSocket"] as const) {
      const host = h?.[kind]?.host;
      if (host !== undefined && host !== "") out.push(`${path}.${kind}.host`);
    }
  };
  for (const p of HANDLERS) check(c[p] as Handler, p);
  const lifecycle = c.lifecycle as Record<string, Handler> | undefined;
  for (const h of ["postStart", "preStop"]) check(lifecycle?.[h], `lifecycle.${h}`);
  return out;
};

const RUNTIME_CONTAINER_MESSAGE = `container name '${RUNTIME_CONTAINER}' is the runtime's own; choose another`;
const HOST_PORT_MESSAGE = `ports[].hostPort cannot be set (${RESTRICTED}): a container is reached through the pod's address`;
export const Container = passThrough(
  {
    name: DnsLabel("a container's name").describe("The container's name, unique in the pod and never runtime"),
    image: z
      .string()
      .min(1)
      .describe("The container's image; on the install's allow-list (--allowed-images) when it has one"),
    resources: Resources.optional().describe("The container's compute resources"),
    ports: z
      .array(
        passThrough(
          { hostPort: z.number().int().optional().describe("Must stay unset (or 0)") },
          "A Kubernetes ContainerPort",
        ),
      )
      .max(64)
      .optional()
      .describe("The container's ports; no hostPort"),
    securityContext: ContainerSecurityContext.optional(),
  },
  "A Kubernetes Container",
)
  .meta(
    cel(
      { rule: `self.name != '${RUNTIME_CONTAINER}'`, message: RUNTIME_CONTAINER_MESSAGE },
      {
        rule: "!has(self.ports) || self.ports.all(p, !has(p.hostPort) || p.hostPort == 0)",
        message: HOST_PORT_MESSAGE,
      },
    ),
  )
  .superRefine((c, ctx) => {
    for (const [i, p] of (c.ports ?? []).entries())
      if (p.hostPort !== undefined && p.hostPort !== 0)
        ctx.addIssue({ code: "custom", path: ["ports", i, "hostPort"], message: HOST_PORT_MESSAGE });
    for (const path of handlerHosts(c))
      ctx.addIssue({
        code: "custom",
        path: path.split("."),
        message: `${path} cannot name a host (${RESTRICTED}): probes and hooks reach the pod itself`,
      });
  });

const RUNTIME_VOLUME_MESSAGE = `volume name is one of the runtime's own (${RUNTIME_VOLUMES.join(", ")}); choose another`;
const VOLUME_TYPE_MESSAGE = `a volume's type must be one of ${ALLOWED_VOLUME_TYPES.join(", ")} (${RESTRICTED}): hostPath and the others reach the node or storage outside the namespace's claims`;
export const Volume = passThrough(
  {
    name: DnsLabel("a volume's name").describe("The volume's name, unique in the pod and not one of the runtime's own"),
    ...Object.fromEntries(
      FORBIDDEN_VOLUME_TYPES.map((t) => [
        t,
        z
          .looseObject({})
          .meta({ ...PASS_THROUGH, description: "Refused" })
          .optional(),
      ]),
    ),
  },
  `A Kubernetes Volume of a type restricted allows (${ALLOWED_VOLUME_TYPES.join(", ")})`,
)
  .meta(
    cel(
      { rule: `!(self.name in [${RUNTIME_VOLUMES.map((v) => `'${v}'`).join(", ")}])`, message: RUNTIME_VOLUME_MESSAGE },
      { rule: FORBIDDEN_VOLUME_TYPES.map((t) => `!has(self.${t})`).join(" && "), message: VOLUME_TYPE_MESSAGE },
    ),
  )
  .superRefine((v, ctx) => {
    // Every key but the name is the volume's source: only the allowed types pass, whatever Kubernetes adds later.
    for (const k of Object.keys(v))
      if (k !== "name" && !(ALLOWED_VOLUME_TYPES as readonly string[]).includes(k))
        ctx.addIssue({ code: "custom", path: [k], message: VOLUME_TYPE_MESSAGE });
  });

const RUNTIME_PATH_MESSAGE =
  "mountPath cannot be /tmp, under /etc/ifp or under /var/run/secrets/kubernetes.io/serviceaccount: the runtime mounts its own files there";
export const VolumeMount = passThrough(
  {
    name: z.string().min(1).max(63).describe("A volume of spec.deployment.volumes"),
    mountPath: z
      .string()
      .min(1)
      .max(4096)
      .regex(/^\//, "mountPath must be absolute")
      .describe(
        "Where it is mounted in the runtime container; not /tmp, under /etc/ifp or under /var/run/secrets/kubernetes.io/serviceaccount",
      ),
  },
  "A Kubernetes VolumeMount of the runtime container",
).meta(
  cel({
    rule: "!self.mountPath.matches('^/(tmp|etc/ifp|var/run/secrets/kubernetes\\\\.io/serviceaccount)(/|$)')",
    message: RUNTIME_PATH_MESSAGE,
  }),
);

const IFP_ENV_MESSAGE = "env names starting with IFP_ are the runtime's own settings; the operator sets them";
export const EnvVar = passThrough(
  {
    name: z.string().min(1).max(4096).describe("The variable's name; not beginning IFP_"),
    value: z.string().optional().describe("The variable's value"),
    valueFrom: z
      .looseObject({})
      .meta(PASS_THROUGH)
      .optional()
      .describe("Where the value comes from (a Kubernetes EnvVarSource)"),
  },
  "A Kubernetes EnvVar of the runtime container",
).meta(cel({ rule: "!self.name.startsWith('IFP_')", message: IFP_ENV_MESSAGE }));

const LabelMap = (what: string, forbidden: string) =>
  z
    .record(
      z.string(),
      z
        .string()
        .max(63)
        .regex(
          LABEL_VALUE_RE,
          "a label value has at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
        ),
    )
    .meta({
      maxProperties: 64,
      ...cel(
        { rule: META_KEY_RULE, message: `${what} keys must be Kubernetes label keys` },
        {
          rule: forbidden,
          message: `${what} cannot set the labels the operator sets (${RUNTIME_POD_LABELS.join(", ")}): they select the runtime's pods`,
        },
      ),
    });

const POD_LABELS_RULE = `self.all(k, !(k in [${RUNTIME_POD_LABELS.map((l) => `'${l}'`).join(", ")}]))`;
const POD_ANNOTATIONS_MESSAGE = `podAnnotations cannot use the prefix ${RUNTIME_ANNOTATION_PREFIX}: the operator's own (such as ${RUNTIME_ANNOTATION_PREFIX}config-hash)`;

/** The annotations that once set seccomp and AppArmor profiles: only what restricted allows (the fields say the same). */
const SECCOMP_ANNOTATION_PREFIXES = [
  "seccomp.security.alpha.kubernetes.io/",
  "container.seccomp.security.alpha.kubernetes.io/",
];
const APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/";
const POD_PROFILE_ANNOTATIONS_RULE = `self.all(k, ${SECCOMP_ANNOTATION_PREFIXES.map((p) => `!k.startsWith('${p}')`).join(" && ")} && (!k.startsWith('${APPARMOR_ANNOTATION_PREFIX}') || self[k] == 'runtime/default' || self[k].startsWith('localhost/')))`;
const POD_PROFILE_ANNOTATIONS_MESSAGE = `podAnnotations cannot set a seccomp profile (${SECCOMP_ANNOTATION_PREFIXES.join(", ")}) or an AppArmor profile other than runtime/default or localhost/* (${APPARMOR_ANNOTATION_PREFIX}); use the securityContext fields`;
const profileAnnotationOk = (k: string, v: string) =>
  !SECCOMP_ANNOTATION_PREFIXES.some((p) => k.startsWith(p)) &&
  (!k.startsWith(APPARMOR_ANNOTATION_PREFIX) || v === "runtime/default" || v.startsWith("localhost/"));

const names = (items: { name: string }[] | undefined) => (items ?? []).map((i) => i.name);
const dupes = (list: string[]) => [...new Set(list.filter((n, i) => list.indexOf(n) !== i))];

export const DeploymentSettings = z
  .object({
    sidecars: z
      .array(Container)
      .max(16)
      .meta(byName)
      .optional()
      .describe(
        "Containers beside the runtime in its pod (the application): they reach the agent's local API and serve its handler on 127.0.0.1. Names are unique in the pod and never runtime",
      ),
    initContainers: z
      .array(Container)
      .max(16)
      .meta(byName)
      .optional()
      .describe(
        "Init containers of the runtime's pod (restartPolicy Always makes a native sidecar). Names are unique in the pod and never runtime",
      ),
    resources: Resources.optional().describe(
      "The runtime container's resources; replace the default (requests cpu 50m, memory 128Mi; limits memory 512Mi)",
    ),
    env: z
      .array(EnvVar)
      .max(128)
      .meta(byName)
      .optional()
      .describe(
        "More environment variables of the runtime container, after its own; names beginning IFP_ are the runtime's and refused",
      ),
    volumes: z
      .array(Volume)
      .max(64)
      .meta(byName)
      .optional()
      .describe(
        `More volumes of the pod, for the sidecars and the runtime container; not named ${RUNTIME_VOLUMES.join(", ")}`,
      ),
    volumeMounts: z
      .array(VolumeMount)
      .max(64)
      .optional()
      .describe(
        "More volume mounts of the runtime container, of volumes in spec.deployment.volumes; not at /tmp, under /etc/ifp or under /var/run/secrets/kubernetes.io/serviceaccount",
      ),
    imagePullSecrets: z
      .array(z.object({ name: z.string().min(1).max(253).describe("A Secret of the resource's namespace") }))
      .max(16)
      .meta(byName)
      .optional()
      .describe("More Secrets to pull the images with, after the operator's"),
    nodeSelector: z
      .record(z.string(), z.string())
      .optional()
      .describe("Node labels the runtime's pods must be scheduled on"),
    tolerations: z
      .array(z.looseObject({}).meta(PASS_THROUGH))
      .max(64)
      .optional()
      .describe("Taints the runtime's pods tolerate (Kubernetes Tolerations)"),
    affinity: z
      .looseObject({})
      .meta(PASS_THROUGH)
      .optional()
      .describe("Scheduling affinity of the runtime's pods (a Kubernetes Affinity)"),
    topologySpreadConstraints: z
      .array(z.looseObject({}).meta(PASS_THROUGH))
      .max(16)
      .optional()
      .describe("The runtime's pods carry app.kubernetes.io/name: ifp-runtime and app.kubernetes.io/instance: <name>"),
    securityContext: PodSecurityContext.optional(),
    priorityClassName: z.string().min(1).max(253).optional().describe("PriorityClass of the runtime's pods"),
    serviceAccountName: z
      .string()
      .min(1)
      .max(253)
      .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "serviceAccountName must be a DNS-1123 subdomain")
      .optional()
      .describe(
        "A ServiceAccount of the resource's namespace to run the pods under instead of the operator's <name>-runtime; it must carry the label ifp.dev/agent: <name> (ifp.dev/relay: <name>)",
      ),
    automountServiceAccountToken: z
      .boolean()
      .optional()
      .describe(
        "Mount the ServiceAccount's token into every container (the sidecars and init containers too); default false: only the agent runtime's container gets a token, its own projected one",
      ),
    podAnnotations: z
      .record(z.string(), z.string())
      .meta({
        maxProperties: 64,
        ...cel(
          { rule: META_KEY_RULE, message: "podAnnotations keys must be Kubernetes annotation keys" },
          { rule: `self.all(k, !k.startsWith('${RUNTIME_ANNOTATION_PREFIX}'))`, message: POD_ANNOTATIONS_MESSAGE },
          { rule: POD_PROFILE_ANNOTATIONS_RULE, message: POD_PROFILE_ANNOTATIONS_MESSAGE },
        ),
      })
      .optional()
      .describe(`Annotations added to the runtime's pods; not under ${RUNTIME_ANNOTATION_PREFIX}`),
    podLabels: LabelMap("podLabels", POD_LABELS_RULE)
      .optional()
      .describe("Labels added to the runtime's pods; not the ones the operator selects them by"),
  })
  .meta(
    cel(
      {
        rule: "!has(self.sidecars) || !has(self.initContainers) || self.sidecars.all(s, !self.initContainers.exists(i, i.name == s.name))",
        message: "a name is used by both a sidecar and an init container; container names are unique in a pod",
      },
      {
        rule: "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
        message: "each of volumeMounts must name a volume of spec.deployment.volumes",
      },
    ),
  )
  .superRefine((d, ctx) => {
    const issue = (path: (string | number)[], message: string) => ctx.addIssue({ code: "custom", path, message });
    for (const key of ["sidecars", "initContainers"] as const) {
      for (const [i, c] of (d[key] ?? []).entries())
        if (c.name === RUNTIME_CONTAINER) issue([key, i, "name"], RUNTIME_CONTAINER_MESSAGE);
      for (const n of dupes(names(d[key]))) issue([key], `container name '${n}' is used twice`);
    }
    for (const n of names(d.sidecars).filter((n) => names(d.initContainers).includes(n)))
      issue(
        ["initContainers"],
        `container name '${n}' is used by both a sidecar and an init container; container names are unique in a pod`,
      );
    for (const [i, v] of (d.volumes ?? []).entries())
      if ((RUNTIME_VOLUMES as readonly string[]).includes(v.name))
        issue(["volumes", i, "name"], RUNTIME_VOLUME_MESSAGE);
    for (const n of dupes(names(d.volumes))) issue(["volumes"], `volume name '${n}' is used twice`);
    d.volumeMounts?.forEach((m, i) => {
      if (RUNTIME_PATH_RE.test(m.mountPath)) issue(["volumeMounts", i, "mountPath"], RUNTIME_PATH_MESSAGE);
      if (!names(d.volumes).includes(m.name))
        issue(["volumeMounts", i, "name"], "each of volumeMounts must name a volume of spec.deployment.volumes");
    });
    for (const [i, e] of (d.env ?? []).entries())
      if (e.name.startsWith("IFP_")) issue(["env", i, "name"], IFP_ENV_MESSAGE);
    for (const n of dupes(names(d.env))) issue(["env"], `env name '${n}' is used twice`);
    for (const n of dupes(names(d.imagePullSecrets)))
      issue(["imagePullSecrets"], `imagePullSecret '${n}' is named twice`);
    for (const k of Object.keys(d.podLabels ?? {})) {
      if (!metaKeyOk(k)) issue(["podLabels", k], "podLabels keys must be Kubernetes label keys");
      if ((RUNTIME_POD_LABELS as readonly string[]).includes(k))
        issue(
          ["podLabels", k],
          `podLabels cannot set the labels the operator sets (${RUNTIME_POD_LABELS.join(", ")}): they select the runtime's pods`,
        );
    }
    for (const k of Object.keys(d.podAnnotations ?? {})) {
      if (!metaKeyOk(k)) issue(["podAnnotations", k], "podAnnotations keys must be Kubernetes annotation keys");
      if (k.startsWith(RUNTIME_ANNOTATION_PREFIX)) issue(["podAnnotations", k], POD_ANNOTATIONS_MESSAGE);
      if (!profileAnnotationOk(k, d.podAnnotations![k]!)) issue(["podAnnotations", k], POD_PROFILE_ANNOTATIONS_MESSAGE);
    }
  })
  .describe(
    "Pod settings of the runtime's Deployment: the application's containers beside the runtime, and the pod's placement and security",
  );
export type DeploymentSettings = z.infer<typeof DeploymentSettings>;
