// What a failed end-to-end test says of the containers the kubelet restarted: a restart takes
// the earlier container's log with it from `kubectl logs`, and with it the reason of a failure.
import type { ControlPlane } from "./controlplane.ts";

type Obj = Record<string, any>;

/**
 * Every container of the cluster that was restarted: its pod, restart count, how its last run
 * ended (reason, exit code, start and end), and the tail of that run's log (`logs --previous`).
 * "no container restarted" when there was none; a failed read is said, never thrown.
 */
export function restartedContainers(cp: Pick<ControlPlane, "json" | "kubectl">, tail = 40): string {
  let pods: Obj[];
  try {
    pods = cp.json(["get", "pods", "-A"]).items;
  } catch (err) {
    return `--- restarted containers: ${(err as Error).message}`;
  }
  const parts: string[] = [];
  for (const pod of pods) {
    for (const c of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
      if (!c.restartCount) continue;
      const { namespace, name } = pod.metadata;
      const last = c.lastState?.terminated ?? {};
      let log: string;
      try {
        log = cp.kubectl(["-n", namespace, "logs", name, "-c", c.name, "--previous", `--tail=${tail}`]);
      } catch (err) {
        log = (err as Error).message;
      }
      parts.push(
        `--- ${namespace}/${name} ${c.name}: restarted ${c.restartCount}×; its last run ` +
          `${last.reason ?? "?"} (exit ${last.exitCode ?? "?"}) ${last.startedAt ?? "?"} – ${last.finishedAt ?? "?"}\n${log}`,
      );
    }
  }
  return parts.length ? parts.join("\n") : "--- no container restarted";
}
