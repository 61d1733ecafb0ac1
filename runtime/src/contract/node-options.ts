// The NODE_OPTIONS of a runtime container, its V8 heap bounded by the container's memory limit,
// as the operator renders it for Agents and Relays.
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

/**
 * What each event loop beside the first (spec.runtime.workers) adds to the default memory of an
 * agent's container, MiB: its heap and the modules loaded again measured 70–90 MiB of peak RSS
 * under the inbox benchmark (docs/benchmarks.md), so the limit grows by 128 and the request by 64.
 */
export const MEMORY_PER_LOOP_MIB = { request: 64, limit: 128 };

/** The default memory of a runtime container serving `loops` event loops: request and limit. */
export function defaultRuntimeMemory(loops = 1): { request: string; limit: string } {
  const more = Math.max(0, loops - 1);
  const limit = memoryBytes(DEFAULT_RUNTIME_MEMORY_LIMIT)! / MIB + more * MEMORY_PER_LOOP_MIB.limit;
  return { request: `${128 + more * MEMORY_PER_LOOP_MIB.request}Mi`, limit: `${limit}Mi` };
}

/** The two modes of a runtime container. */
export type RuntimeMode = "agent" | "relay";

/**
 * Semi-space of V8's young generation, MiB, by mode: most of a busy runtime's peak is young
 * objects in flight. A relay carries the traffic of many agents and spent a fifth of its CPU
 * collecting garbage with 4 MiB; with 16 MiB it does about a tenth more per core for some
 * 20 MiB more of peak memory (docs/benchmarks.md). An agent's inbox gained nothing measurable
 * from more, so it keeps its memory.
 */
const SEMI_SPACE_MIB: Record<RuntimeMode, number> = { agent: 4, relay: 16 };
/** The smallest old generation rendered, MiB. */
const MIN_OLD_SPACE_MIB = 64;
const MIB = 1024 * 1024;

/**
 * NODE_OPTIONS for a runtime container with a memory limit of `limitBytes`: an old generation of
 * a quarter of the limit (what V8 picks itself within such a limit; the rest is for the young
 * generation, code, and the TLS and NATS buffers outside the heap) and the mode's semi-spaces,
 * each at most a sixteenth of the limit. With `loops` event loops (spec.runtime.workers) each
 * has a heap of its own under the same flags, so each gets its share: the heaps together are
 * bounded as one loop's is. Undefined without a limit.
 */
export function runtimeNodeOptions(
  limitBytes: number | undefined,
  mode: RuntimeMode = "agent",
  loops = 1,
): string | undefined {
  if (!limitBytes || !Number.isFinite(limitBytes) || limitBytes <= 0) return undefined;
  const share = limitBytes / Math.max(1, loops);
  const oldSpace = Math.max(MIN_OLD_SPACE_MIB, Math.floor(share / 4 / MIB));
  const semiSpace = Math.max(1, Math.min(SEMI_SPACE_MIB[mode], Math.floor(share / 16 / MIB)));
  return `--max-old-space-size=${oldSpace} --max-semi-space-size=${semiSpace}`;
}

/** Bytes of a Kubernetes memory quantity ("512Mi", "1G", "1e9", 536870912), rounded up; undefined for what is not a positive quantity. */
export function memoryBytes(q: string | number | undefined): number | undefined {
  const parsed = q === undefined ? undefined : parseQuantity(q);
  if (!parsed || parsed.negative || parsed.nanos === 0n) return undefined;
  return Number((parsed.nanos + NANO - 1n) / NANO);
}

/**
 * MALLOC_ARENA_MAX of a runtime container, as the operator renders it and the benchmarks start
 * the runtime: glibc gives the threads of a process up to eight malloc arenas per core, each
 * keeping memory freed into it (V8's helper threads, libuv's thread pool); two held an agent's peak RSS under bench:inbox about 10 MiB lower at no measured cost in
 * CPU (docs/benchmarks.md). The operator's own container gets the same from the chart
 * (mallocArenaMax).
 */
export const RUNTIME_MALLOC_ARENA_MAX = 2;

/** NODE_OPTIONS of a runtime container of each mode with the default resources. */
export const DEFAULT_RUNTIME_NODE_OPTIONS: Record<RuntimeMode, string> = {
  agent: runtimeNodeOptions(memoryBytes(DEFAULT_RUNTIME_MEMORY_LIMIT), "agent")!,
  relay: runtimeNodeOptions(memoryBytes(DEFAULT_RUNTIME_MEMORY_LIMIT), "relay")!,
};
