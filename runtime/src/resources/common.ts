// The schema parts the Agent and Relay resources share: API group and version, URLs, durations,
// keys, selectors, quantities and byte sizes, the deployment settings of a runtime's pod (with
// the containers, volumes and security settings it may take), TLS, network and exposure.
import { isIP } from "node:net";
import { z } from "zod";
import { bytesOf, bytesQuantity } from "./quantity.ts";

export const GROUP = "ifp.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;

const DURATION_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION_RE = /^(\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/;
const DURATION_PART_RE = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;

/** A CEL rule the API server checks, for what zod's checks cannot say in a JSON schema. */
export interface CelRule {
  rule: string;
  message: string;
}

/**
 * Metadata that puts CEL rules on a schema's node of the generated CRD
 * (`x-kubernetes-validations`), as kube-rs attaches them to fields: `.meta(cel(rule))`.
 */
export function cel(...rules: CelRule[]): { "x-kubernetes-validations": CelRule[] } {
  return { "x-kubernetes-validations": rules };
}

/** The name becomes the Service's name and a label value: a DNS-1035 label. On the resource's root. */
const RESOURCE_NAME_RULE: CelRule = {
  rule: "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
  message:
    "metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters): it names the runtime's Service",
};

/**
 * An https URL. zod's protocol check becomes only `format: uri` in the JSON schema; the
 * scheme is checked by CEL.
 */
export const HttpsUrl = z
  .url({ protocol: /^https$/ })
  .meta(cel({ rule: "self.startsWith('https://')", message: "must be an https:// URL" }));

/** An http or https URL (the agent's own handler and notification endpoints). */
export const HttpUrl = z.url({ protocol: /^https?$/ }).meta(
  cel({
    rule: "self.startsWith('https://') || self.startsWith('http://')",
    message: "must be an http:// or https:// URL",
  }),
);

/** Milliseconds of a Go-style duration string ("168h", "1m30s", "250ms"), the form Kubernetes and CEL use. */
export function parseDuration(text: string): number {
  if (!DURATION_RE.test(text))
    throw new Error(`invalid duration ${JSON.stringify(text)} (use forms like 30s, 5m, 168h)`);
  let ms = 0;
  for (const [, value, unit] of text.matchAll(DURATION_PART_RE)) ms += Number(value) * DURATION_UNITS[unit!]!;
  return ms;
}

/** A Go-style duration string, e.g. `168h` or `1m30s`. */
export const Duration = z.string().regex(DURATION_RE, "must be a duration such as 30s, 5m or 168h");

/** base64url (no padding) of a raw 32-byte Ed25519 public key. */
export const Ed25519PublicKey = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/, "must be the base64url (no padding) encoding of a raw 32-byte Ed25519 public key");

export const TrustedKey = z.object({
  keyId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[^#\s]+$/, "must not contain '#' or white space")
    .describe("The key's id, as the agent's signatures name it"),
  publicKey: Ed25519PublicKey.describe("base64url (no padding) of the raw 32-byte Ed25519 public key"),
  status: z
    .enum(["active", "retired", "revoked"])
    .default("active")
    .describe("active and retired keys are accepted; revoked keys are refused"),
});
export type TrustedKey = z.infer<typeof TrustedKey>;

/** A Kubernetes label selector (metav1.LabelSelector): every matchLabels pair and every expression must hold. */
export const LabelSelector = z.object({
  matchLabels: z
    .record(z.string().max(317), z.string().max(63))
    .optional()
    .describe("Labels that must be present with these values"),
  matchExpressions: z
    .array(
      z.object({
        key: z.string().min(1).max(317).describe("The label's key"),
        operator: z.enum(["In", "NotIn", "Exists", "DoesNotExist"]).describe("In, NotIn, Exists or DoesNotExist"),
        values: z.array(z.string().max(63)).max(64).optional().describe("The values for In and NotIn"),
      }),
    )
    .max(16)
    .optional()
    .describe("Expressions on labels, all of which must hold"),
});
export type LabelSelector = z.infer<typeof LabelSelector>;

/** Whether `labels` satisfy `selector` ({} selects everything). */
export function selectorMatches(selector: LabelSelector, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(l, e.key);
    const inValues = has && (e.values ?? []).includes(l[e.key]!);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

export const AgentId = z.string().min(1).max(512).regex(/^\S+$/, "must not contain white space");

/** spec.logLevel: the runtime's log level (its IFP_LOG_LEVEL). */
export const LogLevel = z
  .enum(["fatal", "error", "warn", "info", "debug", "trace"])
  .describe(
    "Log level of the runtime's JSON logs (default info); debug adds a line per message, naming it and never its body",
  );

// ---- spec.deployment: pod settings of the runtime's Deployment ----------------------------
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
/** Preserve the fields the schema does not name: the object is a Kubernetes core type. */
const PASS_THROUGH = { "x-kubernetes-preserve-unknown-fields": true } as const;
const passThrough = <T extends z.core.$ZodLooseShape>(shape: T, description: string) =>
  z.looseObject(shape).meta({ ...PASS_THROUGH, description });
/** A list whose items are told apart by `name`: the API server refuses two of a name. */
const byName = { "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] } as const;

/** A resource quantity ("500m", "1.5Gi", 2): a string or a whole number, as in Kubernetes' own CRDs. */
export const QUANTITY_RE = /^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(\d+(\.\d*)?|\.\d+)))?$/;
export const Quantity = z
  .any()
  .refine(
    (v) => (typeof v === "string" && QUANTITY_RE.test(v)) || (typeof v === "number" && Number.isInteger(v)),
    "must be a quantity such as 500m, 128Mi or 2 (a string, or a whole number)",
  )
  .meta({ "x-kubernetes-int-or-string": true, pattern: QUANTITY_RE.source });
/** The most bytes a size field takes where no smaller bound applies: 1 PiB, inside a safe integer and an int64. */
export const MAX_BYTE_SIZE = 2 ** 50;
/**
 * A size written as a string: a whole number with a binary (Ki, Mi, Gi, Ti, Pi, Ei) or decimal
 * (k, M, G, T, P, E) suffix or a positive exponent, as a Kubernetes quantity writes them ("64Mi",
 * "500k", "2e6"; "1.5Mi" is written 1536Ki). No backslash, so that CEL and the API server read
 * the same pattern.
 */
export const BYTE_SIZE_RE = /^[0-9]+([KMGTPE]i|[kMGTPE]|[eE][+]?[0-9]+)?$/;
const BYTE_SIZE_MAX_LENGTH = 32;

/**
 * A size in bytes: a whole number (67108864) or a quantity ("64Mi", "1Gi", "500k", "2M"), from
 * `min` to `max` bytes, or -1 where `none` allows it. The API server refuses anything else at
 * apply (int-or-string, the pattern and a CEL rule, which also refuses fractions of a byte and
 * what overflows an int64); the parse gives bytes (quantity.ts bytesOf), so everything past it
 * (flags, the manifest, stream configs, account limits, status) sees a number. Give its default
 * with `.prefault()`, which the CRD shows (a `.default()` after a transform is not in it).
 */
export function ByteSize({ min, max = MAX_BYTE_SIZE, none = false }: { min: number; max?: number; none?: boolean }) {
  const message = `must be a whole number of bytes, or one with a binary (Ki, Mi, Gi, …) or decimal (k, M, G, …) suffix, from ${bytesQuantity(min)} to ${bytesQuantity(max)}${none ? ", or -1 for none" : ""}`;
  const inRange = (v: string) => `${v} >= ${min} && ${v} <= ${max}`;
  const rule = `type(self) == int ? (${inRange("self")}${none ? " || self == -1" : ""}) : (isQuantity(self) && quantity(self).isInteger() && ${inRange("quantity(self).asInteger()")})`;
  return z
    .any()
    .transform((v, ctx) => {
      if (none && v === -1) return -1;
      const bytes = typeof v === "number" || (typeof v === "string" && BYTE_SIZE_RE.test(v)) ? bytesOf(v) : undefined;
      if (bytes !== undefined && bytes >= min && bytes <= max) return bytes;
      ctx.addIssue({ code: "custom", message, input: v });
      return z.NEVER;
    })
    .meta({
      "x-kubernetes-int-or-string": true,
      pattern: BYTE_SIZE_RE.source,
      maxLength: BYTE_SIZE_MAX_LENGTH,
      ...cel({ rule, message }),
    });
}

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

/**
 * A rule of the "restricted" Pod Security Standard on one node of spec.deployment: the same check
 * as CEL in the API server (the CRD) and in zod (the operator's own parse), with one message.
 */
interface Guard<T> {
  rule: string;
  ok: (v: T) => boolean;
  path: (string | number)[];
  message: string;
}
function guarded<S extends z.ZodType>(schema: S, guards: Guard<z.output<S>>[]): S {
  return schema.meta(cel(...guards.map(({ rule, message }) => ({ rule, message })))).superRefine((v, ctx) => {
    for (const g of guards)
      if (!g.ok(v as z.output<S>)) ctx.addIssue({ code: "custom", path: g.path, message: g.message });
  }) as unknown as S;
}

const RESTRICTED = "the restricted Pod Security Standard";
/** Profiles (seccomp, AppArmor) restricted allows. */
export const ALLOWED_PROFILE_TYPES = ["RuntimeDefault", "Localhost"] as const;
/** The one capability restricted lets a container add. */
export const ALLOWED_CAPABILITY = "NET_BIND_SERVICE";
/** SELinux types baseline allows (user and role must stay unset). */
export const ALLOWED_SELINUX_TYPES = [
  "",
  "container_t",
  "container_init_t",
  "container_kvm_t",
  "container_engine_t",
] as const;
/** The sysctls baseline calls safe (namespaced, isolated from the node and other pods). */
export const SAFE_SYSCTLS = [
  "kernel.shm_rmid_forced",
  "net.ipv4.ip_local_port_range",
  "net.ipv4.ip_unprivileged_port_start",
  "net.ipv4.tcp_syncookies",
  "net.ipv4.ping_group_range",
  "net.ipv4.ip_local_reserved_ports",
  "net.ipv4.tcp_keepalive_time",
  "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_keepalive_intvl",
  "net.ipv4.tcp_keepalive_probes",
] as const;
/** The volume types restricted allows; any other reaches the node or its network storage. */
export const ALLOWED_VOLUME_TYPES = [
  "configMap",
  "secret",
  "emptyDir",
  "projected",
  "downwardAPI",
  "persistentVolumeClaim",
  "ephemeral",
  "csi",
] as const;
/** The other volume types of Kubernetes (named in the schema so that the API server's CEL sees and refuses them). */
export const FORBIDDEN_VOLUME_TYPES = [
  "hostPath",
  "gcePersistentDisk",
  "awsElasticBlockStore",
  "gitRepo",
  "nfs",
  "iscsi",
  "glusterfs",
  "rbd",
  "flexVolume",
  "cinder",
  "cephfs",
  "flocker",
  "fc",
  "azureFile",
  "vsphereVolume",
  "quobyte",
  "azureDisk",
  "photonPersistentDisk",
  "portworxVolume",
  "scaleIO",
  "storageos",
  "image",
] as const;
const celList = (items: readonly string[]) => `[${items.map((i) => `'${i}'`).join(", ")}]`;

const ProfileType = (what: string) =>
  passThrough(
    { type: z.string().describe(`${ALLOWED_PROFILE_TYPES.join(" or ")}`) },
    `${what} profile: ${ALLOWED_PROFILE_TYPES.join(" or ")} (${RESTRICTED})`,
  );
const SeLinuxOptions = passThrough(
  {
    type: z
      .string()
      .optional()
      .describe(`One of ${ALLOWED_SELINUX_TYPES.filter(Boolean).join(", ")}`),
    user: z.string().optional().describe("Must stay unset"),
    role: z.string().optional().describe("Must stay unset"),
  },
  "SELinux options: a container type, no user or role",
);
const WindowsOptions = passThrough(
  { hostProcess: z.boolean().optional().describe("Must not be true") },
  "Windows options; never a host process",
);

type SecurityContextIn = {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  seccompProfile?: { type: string };
  appArmorProfile?: { type: string };
  seLinuxOptions?: { type?: string; user?: string; role?: string };
  windowsOptions?: { hostProcess?: boolean };
};
const profileOk = (p: { type: string } | undefined) =>
  !p || (ALLOWED_PROFILE_TYPES as readonly string[]).includes(p.type);
const seLinuxOk = (o: SecurityContextIn["seLinuxOptions"]) =>
  !o || ((!o.type || (ALLOWED_SELINUX_TYPES as readonly string[]).includes(o.type)) && !o.user && !o.role);

/** What the pod's and a container's security context share: never root, no weaker profile, no host process. */
function commonGuards<T extends SecurityContextIn>(): Guard<T>[] {
  return [
    {
      rule: "!has(self.runAsNonRoot) || self.runAsNonRoot",
      ok: (s) => s.runAsNonRoot !== false,
      path: ["runAsNonRoot"],
      message: "runAsNonRoot cannot be false: the runtime's pod runs as non-root",
    },
    {
      rule: "!has(self.runAsUser) || self.runAsUser != 0",
      ok: (s) => s.runAsUser !== 0,
      path: ["runAsUser"],
      message: "runAsUser cannot be 0 (root): the runtime's pod runs as non-root",
    },
    {
      rule: `!has(self.seccompProfile) || self.seccompProfile.type in ${celList(ALLOWED_PROFILE_TYPES)}`,
      ok: (s) => profileOk(s.seccompProfile),
      path: ["seccompProfile", "type"],
      message: `seccompProfile.type must be ${ALLOWED_PROFILE_TYPES.join(" or ")} (${RESTRICTED}); Unconfined is refused`,
    },
    {
      rule: `!has(self.appArmorProfile) || self.appArmorProfile.type in ${celList(ALLOWED_PROFILE_TYPES)}`,
      ok: (s) => profileOk(s.appArmorProfile),
      path: ["appArmorProfile", "type"],
      message: `appArmorProfile.type must be ${ALLOWED_PROFILE_TYPES.join(" or ")} (${RESTRICTED}); Unconfined is refused`,
    },
    {
      rule: `!has(self.seLinuxOptions) || ((!has(self.seLinuxOptions.type) || self.seLinuxOptions.type in ${celList(ALLOWED_SELINUX_TYPES)}) && (!has(self.seLinuxOptions.user) || self.seLinuxOptions.user == '') && (!has(self.seLinuxOptions.role) || self.seLinuxOptions.role == ''))`,
      ok: (s) => seLinuxOk(s.seLinuxOptions),
      path: ["seLinuxOptions"],
      message: `seLinuxOptions may set only a type of ${ALLOWED_SELINUX_TYPES.filter(Boolean).join(", ")} and no user or role (${RESTRICTED})`,
    },
    {
      rule: "!has(self.windowsOptions) || !has(self.windowsOptions.hostProcess) || !self.windowsOptions.hostProcess",
      ok: (s) => s.windowsOptions?.hostProcess !== true,
      path: ["windowsOptions", "hostProcess"],
      message: `windowsOptions.hostProcess cannot be true (${RESTRICTED})`,
    },
  ];
}

const securityContextShape = {
  runAsNonRoot: z.boolean().optional().describe("Must not be false: the pod runs as non-root"),
  runAsUser: z.number().int().min(0).optional().describe("The UID to run as; never 0"),
  seccompProfile: ProfileType("Seccomp").optional(),
  appArmorProfile: ProfileType("AppArmor").optional(),
  seLinuxOptions: SeLinuxOptions.optional(),
  windowsOptions: WindowsOptions.optional(),
};

/** A container's security context as restricted allows it; the operator adds what restricted requires (pod.ts). */
const ContainerSecurityContext = guarded(
  passThrough(
    {
      ...securityContextShape,
      privileged: z.boolean().optional().describe("Must not be true"),
      allowPrivilegeEscalation: z.boolean().optional().describe("Must not be true; defaults to false"),
      capabilities: passThrough(
        {
          add: z.array(z.string()).max(64).optional().describe(`Only ${ALLOWED_CAPABILITY}`),
          drop: z.array(z.string()).max(64).optional().describe("Must include ALL; defaults to [ALL]"),
        },
        "Capabilities: all dropped, at most NET_BIND_SERVICE added",
      ).optional(),
      procMount: z.string().optional().describe("Default only"),
    },
    `Container security context (${RESTRICTED}); defaults to runAsNonRoot, seccomp RuntimeDefault, allowPrivilegeEscalation false and all capabilities dropped`,
  ),
  [
    ...commonGuards(),
    {
      rule: "!has(self.privileged) || !self.privileged",
      ok: (s) => s.privileged !== true,
      path: ["privileged"],
      message: `privileged cannot be true (${RESTRICTED})`,
    },
    {
      rule: "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
      ok: (s) => s.allowPrivilegeEscalation !== true,
      path: ["allowPrivilegeEscalation"],
      message: `allowPrivilegeEscalation cannot be true (${RESTRICTED})`,
    },
    {
      rule: `!has(self.capabilities) || !has(self.capabilities.add) || self.capabilities.add.all(c, c == '${ALLOWED_CAPABILITY}')`,
      ok: (s) => (s.capabilities?.add ?? []).every((c) => c === ALLOWED_CAPABILITY),
      path: ["capabilities", "add"],
      message: `capabilities.add may hold only ${ALLOWED_CAPABILITY} (${RESTRICTED})`,
    },
    {
      rule: "!has(self.capabilities) || !has(self.capabilities.drop) || self.capabilities.drop.exists(c, c == 'ALL')",
      ok: (s) => !s.capabilities?.drop || s.capabilities.drop.includes("ALL"),
      path: ["capabilities", "drop"],
      message: `capabilities.drop must include ALL (${RESTRICTED}); leave it out to get [ALL]`,
    },
    {
      rule: "!has(self.procMount) || self.procMount == 'Default'",
      ok: (s) => s.procMount === undefined || s.procMount === "Default",
      path: ["procMount"],
      message: `procMount must be Default (${RESTRICTED})`,
    },
  ],
);

/** The pod's security context as restricted allows it, merged over the operator's default. */
const PodSecurityContext = guarded(
  passThrough(
    {
      ...securityContextShape,
      sysctls: z
        .array(passThrough({ name: z.string().describe("A safe sysctl") }, "A sysctl"))
        .max(32)
        .optional()
        .describe(`Only the safe sysctls: ${SAFE_SYSCTLS.join(", ")}`),
    },
    `Pod security context (${RESTRICTED}), merged over the default (runAsNonRoot, the operator's UID and GID, seccomp RuntimeDefault)`,
  ),
  [
    ...commonGuards(),
    {
      rule: `!has(self.sysctls) || self.sysctls.all(s, s.name in ${celList(SAFE_SYSCTLS)})`,
      ok: (s) => (s.sysctls ?? []).every((x) => (SAFE_SYSCTLS as readonly string[]).includes(x.name)),
      path: ["sysctls"],
      message: `sysctls may set only the safe ones (${SAFE_SYSCTLS.join(", ")})`,
    },
  ],
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

/** The agents a relay serves or an agent trusts, with keys trusted out of band. */
export const KnownAgent = z.object({
  agentId: AgentId.describe("The agent's IFP-5 identifier"),
  keys: z.array(TrustedKey).min(1).describe("The agent's public signing keys"),
});

/** A key of a ConfigMap or Secret in the resource's namespace holding PEM CA certificates. */
const TrustKeyRef = z.object({
  name: z
    .string()
    .min(1)
    .max(253)
    .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, "must be the name of an object in the resource's namespace")
    .describe("The object's name, in the resource's namespace"),
  key: z
    .string()
    .min(1)
    .max(253)
    .regex(/^[-._a-zA-Z0-9]+$/, "must be a ConfigMap or Secret key")
    .default("ca.crt")
    .describe("The key holding the PEM certificates"),
});

/** One entry of spec.tls.trust: a ConfigMap's or a Secret's key with PEM CA certificates. */
export const TrustSource = z
  .object({
    configMapRef: TrustKeyRef.optional().describe("A ConfigMap's key with PEM CA certificates"),
    secretRef: TrustKeyRef.optional().describe("A Secret's key with PEM CA certificates"),
  })
  .refine(
    (t) => !!t.configMapRef !== !!t.secretRef,
    "each spec.tls.trust entry takes exactly one of configMapRef and secretRef",
  )
  .meta(
    cel({
      rule: "has(self.configMapRef) != has(self.secretRef)",
      message: "each spec.tls.trust entry takes exactly one of configMapRef and secretRef",
    }),
  );

export const TlsSpec = z
  .object({
    secretName: z.string().min(1).optional().describe("Secret of type kubernetes.io/tls with tls.crt and tls.key"),
    issuerRef: z
      .object({
        name: z.string().min(1).describe("The issuer's name"),
        kind: z.string().default("Issuer").describe("Issuer (in the resource's namespace) or ClusterIssuer"),
        group: z.string().default("cert-manager.io").describe("The issuer's API group"),
      })
      .optional()
      .describe("cert-manager issuer that signs the serving certificate"),
    dnsNames: z
      .array(z.string().min(1))
      .optional()
      .describe("DNS names of the serving certificate, besides the Service's own"),
    trust: z
      .array(TrustSource)
      .max(16)
      .optional()
      .describe(
        "extra CAs this runtime trusts for its outbound calls, besides the system roots and the install's CA bundle",
      ),
  })
  .meta(
    cel({
      rule: "!(has(self.secretName) && has(self.issuerRef))",
      message: "spec.tls takes secretName or issuerRef, not both",
    }),
  );

/** Object metadata as far as the runtime reads it from a rendered manifest. */
export const ObjectMeta = z.looseObject({
  name: z.string().min(1).optional(),
  namespace: z.string().optional(),
  creationTimestamp: z.string().optional(),
  generation: z.number().optional(),
  annotations: z.record(z.string(), z.string()).optional(),
  labels: z.record(z.string(), z.string()).optional(),
});

/** A resource of this API group: apiVersion, kind, metadata and its spec, its name a DNS-1035 label. */
export function resource<K extends string, S extends z.ZodType>(kind: K, spec: S) {
  return z
    .object({
      apiVersion: z.literal(API_VERSION),
      kind: z.literal(kind),
      metadata: ObjectMeta.prefault({}),
      spec,
    })
    .meta(cel(RESOURCE_NAME_RULE));
}

/**
 * A DNS name as a host header carries it: lower-case labels of letters, digits and '-', no
 * scheme, port, path or wildcard (it becomes the default https base URL).
 */
const DNS_NAME = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$";
const DNS_NAME_MESSAGE = "must be a DNS name such as agent.example.com (lower case; no scheme, port, path or wildcard)";
export const DnsName = z
  .string()
  .min(1)
  .max(253)
  // A CEL rule rather than a pattern, so that the API server answers with the message.
  .refine((s) => new RegExp(DNS_NAME).test(s), DNS_NAME_MESSAGE)
  .meta(cel({ rule: `self.matches('${DNS_NAME.replaceAll("\\", "\\\\")}')`, message: DNS_NAME_MESSAGE }));

/** An IP address or a CIDR block ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"). */
export function isCidrOrIp(text: string): boolean {
  const [addr, bits, ...rest] = text.split("/");
  if (rest.length || !addr) return false;
  const family = isIP(addr);
  if (!family) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

const Cidr = z
  .string()
  .max(64)
  .refine(isCidrOrIp, "must be an IP address or a CIDR block such as 10.0.0.0/8")
  .meta(
    cel({ rule: "isCIDR(self) || isIP(self)", message: "must be an IP address or a CIDR block such as 10.0.0.0/8" }),
  );

/**
 * spec.network: which special addresses outbound requests to peers may reach. Peer discovery,
 * delivery to an inbox or a peer's relay, the agent's relays, and a relay's webhook push go only
 * to https URLs whose address, after DNS resolution, is public, or inside one of these blocks.
 */
export const NetworkSpec = z.object({
  allowPrivateTargets: z
    .array(Cidr)
    .max(64)
    .default([])
    .describe(
      "IP addresses or CIDR blocks of loopback, private, link-local or other special addresses that peers, relays and webhooks may resolve to (e.g. 10.0.0.0/8 for peers inside the cluster); the operator adds the cluster's own networks",
    ),
});
export type NetworkSpec = z.infer<typeof NetworkSpec>;

/** Annotations the user adds to a child; the project's own prefix is kept for the operator. */
const ChildAnnotations = z
  .record(z.string().max(317), z.string())
  .refine(
    (a) => Object.keys(a).every((k) => !k.startsWith("ifp.dev/")),
    "annotations under ifp.dev/ belong to the operator",
  )
  .meta(
    cel({
      rule: "self.all(k, !k.startsWith('ifp.dev/'))",
      message: "annotations under ifp.dev/ belong to the operator",
    }),
  );

/** spec.expose: how the runtime is reached from outside the cluster (docs/exposure.md). */
export const ExposeSpec = z.object({
  service: z
    .object({
      type: z.enum(["ClusterIP", "NodePort", "LoadBalancer"]).default("ClusterIP").describe("The Service's type"),
      annotations: ChildAnnotations.optional().describe("Added to the Service, e.g. a cloud load balancer's settings"),
      loadBalancerClass: z
        .string()
        .min(1)
        .max(253)
        .optional()
        .describe("Only with type LoadBalancer; cannot change once set"),
      externalTrafficPolicy: z
        .enum(["Cluster", "Local"])
        .optional()
        .describe("Local keeps the client's source address (NodePort and LoadBalancer)"),
    })
    .meta(
      cel(
        {
          rule: "!has(self.loadBalancerClass) || self.type == 'LoadBalancer'",
          message: "spec.expose.service.loadBalancerClass needs type LoadBalancer",
        },
        {
          rule: "!has(self.externalTrafficPolicy) || self.type != 'ClusterIP'",
          message: "spec.expose.service.externalTrafficPolicy needs type NodePort or LoadBalancer",
        },
      ),
    )
    .optional()
    .describe("The runtime's Service (always created, port https 443)"),
  ingress: z
    .object({
      className: z.string().min(1).max(253).optional().describe("spec.ingressClassName of the Ingress"),
      host: DnsName.describe("The public host name; spec.baseUrl defaults to https://<host>"),
      annotations: ChildAnnotations.optional().describe(
        "Added to the Ingress: the controller's settings, e.g. that the backend speaks HTTPS",
      ),
      tlsSecretName: z
        .string()
        .min(1)
        .max(253)
        .optional()
        .describe(
          "Secret the ingress controller terminates TLS with for host; omit for passthrough or the controller's default certificate",
        ),
    })
    .optional()
    .describe("An Ingress (networking.k8s.io/v1) to the Service's https port"),
  gateway: z
    .object({
      parentRefs: z
        .array(
          z.object({
            name: z.string().min(1).max(253).describe("The Gateway's name"),
            namespace: z
              .string()
              .min(1)
              .max(63)
              .optional()
              .describe("The Gateway's namespace; defaults to the resource's"),
            sectionName: z.string().min(1).max(253).optional().describe("The Gateway listener to attach to"),
          }),
        )
        .min(1)
        .max(32)
        .describe("The Gateways (and listeners) the route attaches to"),
      hostname: DnsName.describe(
        "The public host name; spec.baseUrl defaults to https://<hostname> unless ingress.host is set",
      ),
      mode: z
        .enum(["passthrough", "terminate"])
        .describe(
          "passthrough: a TLSRoute, the runtime terminates TLS; terminate: an HTTPRoute and a BackendTLSPolicy, the Gateway re-encrypts to the runtime",
        ),
    })
    .optional()
    .describe("A Gateway API route (needs the Gateway API CRDs)"),
  trustedProxies: z
    .array(Cidr)
    .max(64)
    .optional()
    .describe(
      "Addresses (CIDR blocks) of proxies in front of the runtime whose X-Forwarded-For is believed for per-address limits",
    ),
});
export type ExposeSpec = z.infer<typeof ExposeSpec>;

/** The public host spec.expose gives the runtime: the Ingress's, else the Gateway route's. */
export function exposedHost(
  expose: { ingress?: { host: string }; gateway?: { hostname: string } } | undefined,
): string | undefined {
  return expose?.ingress?.host ?? expose?.gateway?.hostname;
}

/** The https base URL: the one given, else https://<exposed host>, else undefined. */
export function defaultBaseUrl(
  given: string | undefined,
  expose: Parameters<typeof exposedHost>[0],
): string | undefined {
  if (given) return given;
  const host = exposedHost(expose);
  return host ? `https://${host}` : undefined;
}
