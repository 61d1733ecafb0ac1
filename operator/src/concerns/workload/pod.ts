// Pure: the user's pod settings (spec.deployment) merged into the runtime's Deployment. The
// runtime container's own settings (image, args, probes, ports, security context, mounts, its
// IFP_* environment) always win; the user adds containers, volumes, environment and placement.
// Table-tested in pod.test.ts.
import type {
  V1Affinity,
  V1Container,
  V1Deployment,
  V1LocalObjectReference,
  V1PodSecurityContext,
  V1SecurityContext,
  V1Toleration,
  V1TopologySpreadConstraint,
  V1Volume,
} from "@kubernetes/client-node";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";
import {
  memoryBytes,
  RUNTIME_MALLOC_ARENA_MAX,
  runtimeNodeOptions,
  type RuntimeMode,
} from "../../../../runtime/src/contract/node-options.ts";
import { BINARY_SUFFIXES, NANO, parseQuantity } from "../../../../runtime/src/resources/quantity.ts";

/**
 * What a sidecar or init container gets unless it says otherwise: what the "restricted" Pod
 * Security Standard requires of every container. The schema refuses a container that asks for
 * less (allowPrivilegeEscalation true, a drop list without ALL, runAsNonRoot false, an Unconfined
 * profile); the runtime container has its own, with runAsNonRoot and seccomp from the pod.
 */
export const CONTAINER_SECURITY_DEFAULT: V1SecurityContext = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
  runAsNonRoot: true,
  seccompProfile: { type: "RuntimeDefault" },
};

const DECIMAL: Record<number, string> = {
  [-9]: "n",
  [-6]: "u",
  [-3]: "m",
  0: "",
  3: "k",
  6: "M",
  9: "G",
  12: "T",
  15: "P",
  18: "E",
};

/**
 * A resource quantity in the canonical form the API server stores ("1000m" → "1", "0.5" →
 * "500m", "1.5Gi" → "1536Mi", 2 → "2"), so that what the operator applies equals what it reads
 * back and a steady state writes nothing. Kubernetes' own rules: precision to 1n rounded up,
 * binary suffixes kept only for whole numbers of at least 1024, else the decimal suffixes.
 * Anything it cannot read is returned as it is (the API server then says what is wrong).
 */
export function canonicalQuantity(q: string | number): string {
  const parsed = parseQuantity(q);
  if (!parsed) return String(q);
  const { format } = parsed;
  let { nanos } = parsed;
  if (nanos === 0n) return "0";
  const minus = parsed.negative ? "-" : "";
  if (format === "binary" && nanos >= 1024n * NANO && nanos % NANO === 0n) {
    let v = nanos / NANO;
    let k = 0;
    while (v % 1024n === 0n && k < BINARY_SUFFIXES.length - 1) {
      v /= 1024n;
      k++;
    }
    return `${minus}${v}${BINARY_SUFFIXES[k]}`;
  }
  let e = -9;
  while (nanos % 10n === 0n) {
    nanos /= 10n;
    e++;
  }
  const r = ((e % 3) + 3) % 3;
  if (r === 1) {
    nanos *= 10n;
    e -= 1;
  } else if (r === 2) {
    nanos *= 100n;
    e -= 2;
  }
  if (format === "exponent") return `${minus}${nanos}${e === 0 ? "" : `e${e}`}`;
  const suffix = DECIMAL[e];
  return suffix === undefined ? `${minus}${nanos}e${e}` : `${minus}${nanos}${suffix}`;
}

type Loose = Record<string, unknown>;

/**
 * The event loops the runtime starts for spec.runtime.workers (as its --workers does): the
 * number, or for "auto" the container's CPU limit in whole CPUs (1 without one).
 */
export function eventLoops(workers: number | "auto" | undefined, cpuLimit?: string | number): number {
  if (workers === undefined) return 1;
  if (workers !== "auto") return workers;
  const cpu = cpuLimit === undefined ? undefined : parseQuantity(cpuLimit);
  if (!cpu || cpu.negative) return 1;
  return Math.min(64, Math.max(1, Number(cpu.nanos / NANO)));
}

/**
 * NODE_OPTIONS of the runtime container from its memory limit (runtimeNodeOptions): V8's heap
 * bounded to fit the container wherever it runs, shared by its event loops (`workers`), and
 * MALLOC_ARENA_MAX (RUNTIME_MALLOC_ARENA_MAX). Each is left out when the user's
 * spec.deployment.env sets it (which wins); NODE_OPTIONS also when the container has no memory
 * limit.
 */
export function withNodeHeap(deployment: V1Deployment, mode: RuntimeMode, workers?: number | "auto"): V1Deployment {
  const runtime = deployment.spec!.template.spec!.containers[0];
  const limits = runtime?.resources?.limits;
  const loops = eventLoops(workers, limits?.cpu as string | undefined);
  const options = runtimeNodeOptions(memoryBytes(limits?.memory), mode, loops);
  const withHeap = options ? withRuntimeEnv(deployment, "NODE_OPTIONS", options) : deployment;
  return withRuntimeEnv(withHeap, "MALLOC_ARENA_MAX", String(RUNTIME_MALLOC_ARENA_MAX));
}

/** The Deployment with `name` added to the runtime container's environment, unless it is set there already. */
function withRuntimeEnv(deployment: V1Deployment, name: string, value: string): V1Deployment {
  const pod = deployment.spec!.template.spec!;
  const [runtime, ...others] = pod.containers;
  if (!runtime || runtime.env?.some((e) => e.name === name)) return deployment;
  const env = [...(runtime.env ?? []), { name, value }];
  return {
    ...deployment,
    spec: {
      ...deployment.spec!,
      template: { ...deployment.spec!.template, spec: { ...pod, containers: [{ ...runtime, env }, ...others] } },
    },
  };
}

/**
 * The user's Kubernetes objects without what the API server would not store: nulls and empty
 * lists (every list of a pod is omitted when empty), a volume mount's readOnly false and an env
 * var's empty value (plain fields omitted when zero). What is applied then equals what is read
 * back. Nothing else is dropped: an empty object ({} of emptyDir) or a false of a pointer field
 * (allowPrivilegeEscalation) means something.
 */
export function tidy<T>(value: T): T {
  if (Array.isArray(value)) return value.map((v) => tidy(v)) as T;
  if (!value || typeof value !== "object") return value;
  const out: Loose = {};
  for (const [k, v] of Object.entries(value as Loose)) {
    if (v === null || v === undefined || (Array.isArray(v) && v.length === 0)) continue;
    out[k] = tidy(v);
  }
  for (const mount of (out.volumeMounts as Loose[] | undefined) ?? [])
    if (mount.readOnly === false) delete mount.readOnly;
  for (const env of (out.env as Loose[] | undefined) ?? []) if (env.value === "") delete env.value;
  return out as T;
}

/** requests and limits with canonical quantities; anything else of ResourceRequirements as it is. */
function canonicalResources<T>(resources: T): T {
  if (!resources || typeof resources !== "object") return resources;
  const r = { ...(resources as Loose) };
  for (const key of ["requests", "limits"]) {
    const q = r[key];
    if (q && typeof q === "object")
      r[key] = Object.fromEntries(
        Object.entries(q as Record<string, string | number>).map(([k, v]) => [k, canonicalQuantity(v)]),
      );
  }
  return r as T;
}

/**
 * A user's container: canonical quantities, and the restricted defaults under its own security
 * context; its capabilities keep what it adds, and drop ALL unless it says what it drops (the
 * schema has that include ALL).
 */
function userContainer(c: DeploymentSettings["sidecars"] & {}): V1Container[] {
  return c.map((container) => {
    const own = (container.securityContext ?? {}) as V1SecurityContext;
    return {
      ...(container as V1Container),
      ...(container.resources ? { resources: canonicalResources(container.resources) } : {}),
      securityContext: {
        ...CONTAINER_SECURITY_DEFAULT,
        ...own,
        capabilities: { ...own.capabilities, drop: own.capabilities?.drop ?? ["ALL"] },
      },
    };
  });
}

function userVolume(v: Loose): V1Volume {
  const emptyDir = v.emptyDir as Loose | undefined;
  if (
    emptyDir &&
    typeof emptyDir === "object" &&
    (typeof emptyDir.sizeLimit === "string" || typeof emptyDir.sizeLimit === "number")
  ) {
    return { ...v, emptyDir: { ...emptyDir, sizeLimit: canonicalQuantity(emptyDir.sizeLimit) } } as V1Volume;
  }
  return v as unknown as V1Volume;
}

const some = <T>(list: T[] | undefined): list is T[] => !!list && list.length > 0;
const someKeys = (map: Record<string, string> | undefined): map is Record<string, string> =>
  !!map && Object.keys(map).length > 0;

/**
 * The runtime container with the user's env (a name the user sets, an OTEL_* variable of
 * tracing.ts say, replaces the operator's), resources and volume mounts after its own.
 */
function withContainerSettings(runtime: V1Container, s: DeploymentSettings): V1Container {
  const env = s.env as { name: string }[] | undefined;
  return {
    ...runtime,
    ...(some(env)
      ? {
          env: [
            ...(runtime.env ?? []).filter((e) => !env.some((u) => u.name === e.name)),
            ...(env as V1Container["env"] & {}),
          ],
        }
      : {}),
    ...(s.resources ? { resources: canonicalResources(s.resources) as V1Container["resources"] } : {}),
    ...(some(s.volumeMounts)
      ? { volumeMounts: [...(runtime.volumeMounts ?? []), ...(s.volumeMounts as V1Container["volumeMounts"] & {})] }
      : {}),
  };
}

/**
 * The runtime Deployment with the user's pod settings. Without settings it is returned as it is.
 * The runtime container stays first and keeps what it has; the user's env and volumeMounts come
 * after its own; the user's resources replace its default; the pod security context is the
 * default with the user's keys over it, never allowing root; the operator's labels and
 * annotations win over podLabels and podAnnotations (the schema refuses those anyway).
 */
export function withPodSettings(deployment: V1Deployment, settings: DeploymentSettings | undefined): V1Deployment {
  if (!settings) return deployment;
  const s = tidy(settings);
  const template = deployment.spec!.template;
  const pod = template.spec!;
  const [runtime, ...others] = pod.containers;
  const runtimeContainer = withContainerSettings(runtime!, s);
  const pullSecrets: V1LocalObjectReference[] = [...(pod.imagePullSecrets ?? [])];
  for (const p of s.imagePullSecrets ?? [])
    if (!pullSecrets.some((q) => q.name === p.name)) pullSecrets.push({ name: p.name });
  const securityContext: V1PodSecurityContext = {
    ...pod.securityContext,
    ...(s.securityContext as V1PodSecurityContext | undefined),
    runAsNonRoot: true,
  };
  const labels = template.metadata?.labels ?? {};
  const annotations = template.metadata?.annotations ?? {};
  return {
    ...deployment,
    spec: {
      ...deployment.spec!,
      template: {
        ...template,
        metadata: {
          ...template.metadata,
          labels: { ...(s.podLabels ?? {}), ...labels },
          annotations: { ...(s.podAnnotations ?? {}), ...annotations },
        },
        spec: {
          ...pod,
          securityContext,
          ...(pullSecrets.length ? { imagePullSecrets: pullSecrets } : {}),
          ...(some(s.initContainers) ? { initContainers: userContainer(s.initContainers) } : {}),
          containers: [runtimeContainer, ...others, ...(some(s.sidecars) ? userContainer(s.sidecars) : [])],
          volumes: [...(pod.volumes ?? []), ...(s.volumes ?? []).map((v) => userVolume(v as Loose))],
          ...(someKeys(s.nodeSelector) ? { nodeSelector: s.nodeSelector } : {}),
          ...(some(s.tolerations) ? { tolerations: s.tolerations as V1Toleration[] } : {}),
          ...(s.affinity && Object.keys(s.affinity).length ? { affinity: s.affinity as V1Affinity } : {}),
          ...(some(s.topologySpreadConstraints)
            ? { topologySpreadConstraints: s.topologySpreadConstraints as unknown as V1TopologySpreadConstraint[] }
            : {}),
          ...(s.priorityClassName ? { priorityClassName: s.priorityClassName } : {}),
        },
      },
    },
  };
}
