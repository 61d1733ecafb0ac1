import { toolPath } from "../tools/tools.ts";
import type { ControlPlane } from "./controlplane.ts";
import { waitFor } from "./wait.ts";

/**
 * Nodes for the local control plane: kube-scheduler places pods, and kwok plays the kubelet
 * of fake nodes, so that Deployments get Running, Ready pods without any container runtime.
 */
export async function addFakeNodes(cp: ControlPlane, count = 1): Promise<void> {
  await startScheduler(cp);
  const stages = new URL("./kwok-stages.yaml", import.meta.url).pathname;
  cp.startProcess("kwok", toolPath("kwok"), [
    `--kubeconfig=${cp.kubeconfig}`,
    `--config=${stages}`,
    "--manage-all-nodes=true",
    "--node-ip=127.0.0.1",
    "--cidr=10.244.0.0/16",
    "--server-address=127.0.0.1:0",
  ]);
  for (let i = 0; i < count; i++) {
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Node",
        metadata: {
          name: `kwok-node-${i}`,
          annotations: { "node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake" },
          labels: { "kubernetes.io/hostname": `kwok-node-${i}`, type: "kwok" },
        },
        status: {
          allocatable: { cpu: "32", memory: "256Gi", pods: "110", "ephemeral-storage": "500Gi" },
          capacity: { cpu: "32", memory: "256Gi", pods: "110", "ephemeral-storage": "500Gi" },
        },
      }),
    );
  }
  await waitFor(
    "a Ready node",
    () =>
      /True/.test(
        cp.kubectl(["get", "nodes", "-o", 'jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}']),
      ),
    60_000,
    500,
  );
  // The API server taints new nodes not-ready; the node lifecycle controller that would lift
  // it is not part of this control plane, so lift it here.
  for (let i = 0; i < count; i++)
    cp.kubectl([
      "patch",
      "node",
      `kwok-node-${i}`,
      "--type=json",
      "-p",
      '[{"op":"replace","path":"/spec/taints","value":[]}]',
    ]);
}

/** kube-scheduler for the control plane, with its admin credentials. */
export async function startScheduler(cp: ControlPlane): Promise<void> {
  cp.startProcess("kube-scheduler", toolPath("kubernetes", "kube-scheduler"), [
    `--kubeconfig=${cp.kubeconfig}`,
    `--authentication-kubeconfig=${cp.kubeconfig}`,
    `--authorization-kubeconfig=${cp.kubeconfig}`,
    "--leader-elect=false",
    "--bind-address=127.0.0.1",
    // No serving port is needed (nothing probes it here); 0 turns it off, so no port can be taken.
    "--secure-port=0",
  ]);
}
