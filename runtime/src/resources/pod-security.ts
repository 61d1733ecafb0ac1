// The restricted Pod Security Standard as spec.deployment's schema holds it: the allowed profiles,
// capability, SELinux types, sysctls and volume types, and the pod's and containers' security
// contexts, each rule checked by CEL in the API server and by zod in the operator alike.
import { z } from "zod";
import { cel, passThrough } from "./schema.ts";

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

export const RESTRICTED = "the restricted Pod Security Standard";
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
export const ContainerSecurityContext = guarded(
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
export const PodSecurityContext = guarded(
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
