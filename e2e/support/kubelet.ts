// The kubelet of one Node, and the Job controller of Helm's hook Jobs, played by the test for
// the chart's own pods on a control plane without a container runtime. A pod of the operator's
// image runs as a process of the test with the container's arguments and environment as the
// chart rendered them, authenticated as the pod's ServiceAccount by a token bound to the pod
// (what the kubelet mounts: it stops working once the pod or the ServiceAccount is gone), and
// it is stopped as the kubelet stops a container: SIGTERM once the pod is being deleted,
// SIGKILL after the pod's grace period, then the pod's final deletion.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { stringify } from "yaml";
import type { ControlPlane } from "./controlplane.ts";
import { spawnProcess, type ExitInfo, type ManagedProcess } from "./process.ts";

const run = promisify(execFile);

/**
 * What the images' entrypoints start, by the image's name without registry and tag (the same
 * image pushed to a registry of one's own): the operator's image runs `node operator/bin/ifp-operator.js`,
 * compiled from the source started here.
 */
const ENTRYPOINTS: Record<string, string[]> = {
  "ifp-operator": [process.execPath, "operator/bin/ifp-operator.ts"],
};

type Obj = Record<string, any>;

export interface RunningPod {
  namespace: string;
  name: string;
  process: ManagedProcess;
  /** Resolves once the container ended and the pod was finished with (deleted, or its phase set). */
  done: Promise<ExitInfo>;
}

export class Kubelet {
  private readonly cp: ControlPlane;
  readonly node: string;
  private stopped = false;
  private readonly pods: RunningPod[] = [];
  private readonly loops: Promise<void>[] = [];
  /** What went wrong in the watch loops: thrown by stop(). */
  private readonly errors: string[] = [];

  constructor(cp: ControlPlane, node = "test-node") {
    this.cp = cp;
    this.node = node;
  }

  private async kubectl(args: string[], input?: string): Promise<string> {
    const child = run("kubectl", ["--kubeconfig", this.cp.kubeconfig, ...args], {
      encoding: "utf8",
      timeout: 30_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    if (input !== undefined) child.child.stdin!.end(input);
    return (await child).stdout;
  }

  private async tryJson(args: string[]): Promise<Obj | undefined> {
    try {
      return JSON.parse(await this.kubectl([...args, "-o", "json"]));
    } catch (err) {
      if (/\(NotFound\)/.test(String((err as { stderr?: string }).stderr ?? err))) return undefined;
      throw err;
    }
  }

  /** The Node object pods are bound to (no kubelet reports on it; nothing needs it to). */
  async start(): Promise<void> {
    await this.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Node",
        metadata: { name: this.node, labels: { "kubernetes.io/hostname": this.node } },
      }),
    );
  }

  /**
   * Bind the pod to this node and run its one container until the pod is deleted (SIGTERM, then
   * SIGKILL after its grace period, then the final deletion), or until the container ends
   * (the pod's phase becomes Succeeded or Failed). `extraArgs` are appended to the container's
   * (ports of its own on this shared host).
   */
  async runPod(
    namespace: string,
    name: string,
    opts: { extraArgs?: string[]; onExit?: (exit: ExitInfo) => Promise<void> } = {},
  ): Promise<RunningPod> {
    const pod = (await this.tryJson(["-n", namespace, "get", "pod", name]))!;
    if (!pod) throw new Error(`no pod ${namespace}/${name} to run`);
    if (pod.spec.containers.length !== 1)
      throw new Error(`pod ${namespace}/${name} has ${pod.spec.containers.length} containers; this kubelet runs one`);
    const c = pod.spec.containers[0];
    const image = String(c.image)
      .replace(/:[^/:]+$/, "")
      .split("/")
      .pop()!;
    const entrypoint = c.command ?? ENTRYPOINTS[image];
    if (!entrypoint) throw new Error(`no entrypoint known for image ${c.image}`);
    await this.kubectl(
      ["create", "--raw", `/api/v1/namespaces/${namespace}/pods/${name}/binding`, "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Binding",
        metadata: { name, namespace },
        target: { apiVersion: "v1", kind: "Node", name: this.node },
      }),
    );
    // The ServiceAccount token the kubelet would project: bound to this pod.
    const sa = pod.spec.serviceAccountName ?? "default";
    const token = (
      await this.kubectl([
        "-n",
        namespace,
        "create",
        "token",
        sa,
        "--bound-object-kind=Pod",
        `--bound-object-name=${name}`,
        `--bound-object-uid=${pod.metadata.uid}`,
        "--duration=1h",
      ])
    ).trim();
    const kubeconfig = join(this.cp.dir, `pod-${namespace}-${name}.kubeconfig`);
    writeFileSync(
      kubeconfig,
      stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [
          {
            name: "in-cluster",
            cluster: {
              server: this.cp.server,
              "certificate-authority-data": Buffer.from(this.cp.ca).toString("base64"),
            },
          },
        ],
        users: [{ name: sa, user: { token } }],
        contexts: [{ name: "in-cluster", context: { cluster: "in-cluster", user: sa, namespace } }],
        "current-context": "in-cluster",
      }),
      { mode: 0o600 },
    );
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, KUBECONFIG: kubeconfig };
    for (const e of c.env ?? []) {
      if (e.value !== undefined) env[e.name] = e.value;
      else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") env[e.name] = name;
      else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace") env[e.name] = namespace;
      else throw new Error(`pod ${namespace}/${name}: env ${e.name} is not one this kubelet fills in`);
    }
    const [bin, ...pre] = entrypoint as string[];
    const proc = spawnProcess(
      `pod ${namespace}/${name}`,
      bin!,
      [...pre, ...(c.args ?? []), ...(opts.extraArgs ?? [])],
      { env, logFile: join(this.cp.dir, `pod-${namespace}-${name}.log`) },
    );

    const done = (async (): Promise<ExitInfo> => {
      for (;;) {
        if (proc.exit) {
          // The container ended on its own: the pod's phase says how.
          const exit = await proc.exited;
          const phase = exit.code === 0 ? "Succeeded" : "Failed";
          await this.kubectl([
            "-n",
            namespace,
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            JSON.stringify({ status: { phase } }),
          ]).catch(() => {});
          await opts.onExit?.(exit);
          return exit;
        }
        const now = this.stopped
          ? undefined
          : await this.tryJson(["-n", namespace, "get", "pod", name]).catch(() => pod);
        if (!now || now.metadata.uid !== pod.metadata.uid || now.metadata.deletionTimestamp) {
          const graceMs =
            Math.max(1, now?.metadata.deletionGracePeriodSeconds ?? pod.spec.terminationGracePeriodSeconds ?? 30) *
            1000;
          const exit = (await proc.stop({ signal: "SIGTERM", graceMs })) ?? (await proc.exited);
          if (now?.metadata.uid === pod.metadata.uid)
            await this.kubectl([
              "-n",
              namespace,
              "delete",
              "pod",
              name,
              "--grace-period=0",
              "--force",
              "--ignore-not-found",
            ]).catch(() => {});
          await opts.onExit?.(exit);
          return exit;
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const running = { namespace, name, process: proc, done };
    this.pods.push(running);
    return running;
  }

  /** Run the pods of the Deployment's ReplicaSets as they appear (selected by `selector`). */
  runPodsOf(namespace: string, selector: string, opts: { extraArgs?: string[] } = {}): RunningPod[] {
    const started: RunningPod[] = [];
    const seen = new Set<string>();
    this.loops.push(
      (async () => {
        while (!this.stopped) {
          const list = await this.tryJson(["-n", namespace, "get", "pods", "-l", selector]).catch(() => undefined);
          for (const p of list?.items ?? []) {
            if (seen.has(p.metadata.uid) || p.metadata.deletionTimestamp || p.spec.nodeName) continue;
            seen.add(p.metadata.uid);
            await this.runPod(namespace, p.metadata.name, opts).then(
              (pod) => started.push(pod),
              // A pod deleted before it was bound never runs.
              async (err) => {
                if (
                  (await this.tryJson(["-n", namespace, "get", "pod", p.metadata.name]).catch(() => p))?.metadata
                    .uid === p.metadata.uid
                )
                  this.errors.push(`pod ${namespace}/${p.metadata.name}: ${(err as Error).message}`);
              },
            );
          }
          await new Promise((r) => setTimeout(r, 200));
        }
      })(),
    );
    return started;
  }

  /**
   * The Job controller for Helm's hook Jobs in `namespace`: each new one gets a pod from its
   * template, run here; when the container ends, the Job is marked Complete (exit 0) or Failed.
   * Returns the pods run so far (a live list).
   */
  runHookJobs(namespace: string): RunningPod[] {
    const started: RunningPod[] = [];
    const seen = new Set<string>();
    this.loops.push(
      (async () => {
        while (!this.stopped) {
          const list = await this.tryJson(["-n", namespace, "get", "jobs"]).catch(() => undefined);
          for (const job of list?.items ?? []) {
            if (
              !job.metadata.annotations?.["helm.sh/hook"] ||
              seen.has(job.metadata.uid) ||
              job.status?.conditions?.length
            )
              continue;
            seen.add(job.metadata.uid);
            await this.runJob(job).then(
              (pod) => started.push(pod),
              (err) => this.errors.push(`job ${namespace}/${job.metadata.name}: ${(err as Error).message}`),
            );
          }
          await new Promise((r) => setTimeout(r, 200));
        }
      })(),
    );
    return started;
  }

  private async runJob(job: Obj): Promise<RunningPod> {
    const ns = job.metadata.namespace;
    const name = `${job.metadata.name}-${randomBytes(3).toString("hex")}`;
    const template = job.spec.template;
    await this.kubectl(
      ["create", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Pod",
        metadata: {
          name,
          namespace: ns,
          labels: {
            ...template.metadata?.labels,
            "batch.kubernetes.io/job-name": job.metadata.name,
            "job-name": job.metadata.name,
          },
          annotations: template.metadata?.annotations,
          ownerReferences: [
            {
              apiVersion: "batch/v1",
              kind: "Job",
              name: job.metadata.name,
              uid: job.metadata.uid,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        },
        spec: template.spec,
      }),
    );
    const startTime = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    await this.kubectl([
      "-n",
      ns,
      "patch",
      "job",
      job.metadata.name,
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({ status: { startTime, active: 1 } }),
    ]);
    return this.runPod(ns, name, {
      onExit: async (exit) => {
        const now = new Date(Math.max(Date.now(), Date.parse(startTime) + 1000)).toISOString().replace(/\.\d+Z$/, "Z");
        const condition = (type: string, reason: string) => ({
          type,
          status: "True",
          reason,
          message: reason,
          lastProbeTime: now,
          lastTransitionTime: now,
        });
        const status =
          exit.code === 0
            ? {
                active: 0,
                ready: 0,
                succeeded: 1,
                completionTime: now,
                conditions: [
                  condition("SuccessCriteriaMet", "CompletionsReached"),
                  condition("Complete", "CompletionsReached"),
                ],
              }
            : {
                active: 0,
                ready: 0,
                failed: 1,
                conditions: [
                  condition("FailureTarget", "BackoffLimitExceeded"),
                  condition("Failed", "BackoffLimitExceeded"),
                ],
              };
        await this.kubectl([
          "-n",
          ns,
          "patch",
          "job",
          job.metadata.name,
          "--subresource=status",
          "--type=merge",
          "-p",
          JSON.stringify({ status }),
        ]);
      },
    });
  }

  /** Stop watching, and stop every container still running (SIGTERM, then SIGKILL); throws what went wrong on the way. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.loops);
    await Promise.all(this.pods.map((p) => p.done.catch(() => undefined)));
    if (this.errors.length) throw new Error(`the test's kubelet failed:\n${this.errors.join("\n")}`);
  }
}
