import { NANO, parseQuantity } from "../resources/quantity.ts";

/**
 * The V8 heap of a runtime container, as the operator renders it (NODE_OPTIONS) and as the
 * benchmarks start the runtime. Left to itself, V8 sizes its heap from the memory it sees; in a
 * container that is the cgroup's limit, on a workstation the whole machine, and it lets the old
 * generation grow lazily towards that size before collecting. Written out, the bound holds
 * wherever the runtime runs.
 */

/** The runtime container's memory limit when an Agent or Relay sets no resources of its own. */
export const DEFAULT_RUNTIME_MEMORY_LIMIT = "512Mi";

/** Semi-space of V8's young generation, MiB: most of a busy runtime's peak is young objects in flight. */
const SEMI_SPACE_MIB = 4;
/** The smallest old generation rendered, MiB. */
const MIN_OLD_SPACE_MIB = 64;

/**
 * NODE_OPTIONS for a runtime container with a memory limit of `limitBytes`: an old generation of
 * a quarter of the limit (what V8 picks itself within such a limit; the rest is for the young
 * generation, code, and the TLS and NATS buffers outside the heap) and semi-spaces of 4 MiB.
 * Undefined without a limit.
 */
export function runtimeNodeOptions(limitBytes: number | undefined): string | undefined {
  if (!limitBytes || !Number.isFinite(limitBytes) || limitBytes <= 0) return undefined;
  const oldSpace = Math.max(MIN_OLD_SPACE_MIB, Math.floor(limitBytes / 4 / 1024 / 1024));
  return `--max-old-space-size=${oldSpace} --max-semi-space-size=${SEMI_SPACE_MIB}`;
}

/** Bytes of a Kubernetes memory quantity ("512Mi", "1G", "1e9", 536870912), rounded up; undefined for what is not a positive quantity. */
export function memoryBytes(q: string | number | undefined): number | undefined {
  const parsed = q === undefined ? undefined : parseQuantity(q);
  if (!parsed || parsed.negative || parsed.nanos === 0n) return undefined;
  return Number((parsed.nanos + NANO - 1n) / NANO);
}

/** NODE_OPTIONS of a runtime container with the default resources. */
export const DEFAULT_RUNTIME_NODE_OPTIONS = runtimeNodeOptions(memoryBytes(DEFAULT_RUNTIME_MEMORY_LIMIT))!;
