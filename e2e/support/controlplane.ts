import { spawnSync, type ChildProcess } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { toolPath } from "../tools/tools.ts";
import { freePort } from "./ports.ts";
import { consistently, waitFor } from "./wait.ts";
import { httpsRequest } from "./https.ts";
import { describeExit, releaseDir, spawnProcess, tempDir, type ManagedProcess } from "./process.ts";
import { createCA } from "./tls.ts";
import { ApiReads, parseGet } from "./api-get.ts";

/**
 * kubectl runs synchronously, which blocks the test's own timeout timer: a kubectl that hangs
 * is killed before the test's 60 s, so that the test fails with kubectl's error and its logs.
 */
const KUBECTL_TIMEOUT_MS = 45_000;

/** The API server's --service-cluster-ip-range (room for a Service per Agent of bench:operator's 1,000), and the `kubernetes` Service's address in it. */
export const SERVICE_CIDR = "10.0.0.0/20";
export const KUBERNETES_SERVICE_IP = "10.0.0.1";

/** The first address of an IPv4 range: where the API server puts the `kubernetes` Service. */
export function firstAddress(cidr: string): string {
  const [ip, bits] = cidr.split("/") as [string, string];
  const mask = bits === "0" ? 0 : (~0 << (32 - Number(bits))) >>> 0;
  const n = ((ip.split(".").reduce((a, o) => (a << 8) + Number(o), 0) & mask) >>> 0) + 1;
  return [24, 16, 8, 0].map((s) => (n >>> s) & 255).join(".");
}

/** A kubectl failure: its arguments, exit status and output. */
export class KubectlError extends Error {
  readonly args: string[];
  readonly status: number | null;
  readonly stderr: string;
  constructor(args: string[], status: number | null, stderr: string) {
    super(`kubectl ${args.join(" ")} failed (${status === null ? "no exit status" : `exit ${status}`}): ${stderr}`);
    this.args = args;
    this.status = status;
    this.stderr = stderr;
  }
  /** The API server answered that the object (or one of the objects) does not exist. */
  get notFound(): boolean {
    return /\(NotFound\)/.test(this.stderr);
  }
}

export interface ControlPlane {
  /** https://127.0.0.1:<port> */
  server: string;
  kubeconfig: string;
  dir: string;
  ca: string;
  /** kubectl against this control plane; throws with its stderr on failure. */
  kubectl(args: string[], input?: string): string;
  /** `kubectl … -o json`, parsed. */
  json<T = any>(args: string[]): T;
  /**
   * The same, or undefined when the API server answers NotFound. Any other failure (a broken
   * connection, a wrong resource type, a forbidden request) throws.
   */
  tryJson<T = any>(args: string[]): T | undefined;
  /** How many reads were answered by the API server directly rather than by a kubectl process (e2e/support/api-get.ts). */
  directReads(): number;
  /** Start an extra component (kube-scheduler, kwok) with the admin kubeconfig. */
  startProcess(name: string, bin: string, args: string[]): ChildProcess;
  /** The components and extra processes, with their logs (also in `<dir>/<name>.log`). */
  processes(): ManagedProcess[];
  /** Stop every process (SIGTERM, SIGKILL after a grace period) and delete `dir` (kept when a test of the file failed). */
  stop(): Promise<void>;
}

/**
 * A real Kubernetes control plane on loopback, as envtest runs it: etcd, kube-apiserver and
 * kube-controller-manager (garbage collection, Deployments → ReplicaSets) from the tool cache,
 * with a generated CA, serving and admin client certificates, a service-account signing key
 * and a kubeconfig. Optionally installs CRDs from files.
 *
 * Every process logs to a ring buffer (printed when a test fails) and to `<dir>/<name>.log`.
 * etcd and kube-apiserver cannot be told to pick their own ports and report them, so a start
 * that loses a port to another process (address already in use) is retried on new ports.
 */
export async function startControlPlane(
  opts: {
    crds?: string[];
    controllerManager?: boolean;
    /**
     * kube-controller-manager's client rate limit (`--kube-api-qps`, burst twice that); default its
     * own (20). A benchmark raises it to see past the Deployment controller's writes.
     */
    controllerManagerQps?: number;
    graceMs?: number;
    /**
     * The address the API server binds, advertises (the `kubernetes` Service's endpoint) and names
     * in its certificate; default 127.0.0.1. A real node's pods reach the API server through the
     * `kubernetes` Service only at an address of the host they can route to (its bridge address),
     * never at loopback.
     */
    address?: string;
    /**
     * The ServiceAccount admission plugin: pods get their service account's token, the cluster CA
     * and the namespace mounted, as in any cluster (a real node's pods talk to the API server
     * in-cluster). Off by default: on fake nodes nothing reads them.
     */
    serviceAccounts?: boolean;
    /**
     * The API server's --service-cluster-ip-range; default SERVICE_CIDR (4,094 Services). A real
     * node's slot has a range of its own (e2e/support/node.ts), so that two nodes' kube-proxies on
     * one host never program the same Service address; a benchmark of more Agents, each with a
     * Service, gives a wider one.
     */
    serviceCIDR?: string;
  } = {},
): Promise<ControlPlane> {
  const address = opts.address ?? "127.0.0.1";
  const serviceCIDR = opts.serviceCIDR ?? SERVICE_CIDR;
  const dir = tempDir("ifp-kube-");
  const etcd = toolPath("etcd");
  const apiserver = toolPath("kubernetes", "kube-apiserver");
  const kcm = toolPath("kubernetes", "kube-controller-manager");
  const procs: ManagedProcess[] = [];

  const startProcess = (name: string, bin: string, args: string[]) => {
    const p = spawnProcess(name, bin, args, { logFile: join(dir, `${name}.log`) });
    procs.push(p);
    return p.proc;
  };
  const died = () => procs.find((p) => p.exit);
  const deathOf = (p: ManagedProcess) => `${p.name} ${describeExit(p.exit)}: ${p.log().slice(-3000)}`;
  /** Rejects as soon as one of the processes started so far ends. */
  const whenOneDies = () => {
    const one = Promise.race(procs.map((p) => p.exited.then(() => Promise.reject(new Error(deathOf(p))))));
    one.catch(() => {});
    return one as Promise<never>;
  };
  async function stopAll(): Promise<void> {
    // Reverse order: the API server before etcd. Each stop is bounded.
    for (const p of [...procs].reverse()) await p.stop({ graceMs: opts.graceMs ?? 10_000 });
  }
  const fail = async (err: unknown): Promise<never> => {
    await stopAll();
    releaseDir(dir);
    throw err;
  };

  let server = "";
  let kubeconfig = "";
  let caCert = "";
  let reads: ApiReads | undefined;
  /** A simple `get … -o json` straight from the API server (e2e/support/api-get.ts), else kubectl's. */
  const kubectl = (args: string[], input?: string) => {
    const get = input === undefined && reads ? parseGet(args) : undefined;
    const read = get?.json ? reads!.read(get) : undefined;
    if (read && "notFound" in read) throw new KubectlError(args, 1, read.notFound);
    if (read) return `${JSON.stringify(read.value, null, 4)}\n`;
    return spawnKubectl(args, input);
  };
  const spawnKubectl = (args: string[], input?: string) => {
    const r = spawnSync("kubectl", ["--kubeconfig", kubeconfig, ...args], {
      input,
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
      timeout: KUBECTL_TIMEOUT_MS,
    });
    if (r.status !== 0) throw new KubectlError(args, r.status, r.error ? r.error.message : r.stderr || r.stdout);
    return r.stdout;
  };

  try {
    const ca = await createCA("ifp-operator test cluster CA");
    caCert = ca.cert;
    const serving = await ca.issue({
      commonName: "kube-apiserver",
      dnsNames: [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
      ],
      ips: [...new Set(["127.0.0.1", address, firstAddress(serviceCIDR)])],
    });
    const admin = await ca.issue({ commonName: "admin", organization: "system:masters", client: true });
    const adminKeys = { ca: ca.cert, cert: admin.cert, key: admin.key };
    const sa = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const file = (name: string, text: string) => {
      const p = join(dir, name);
      writeFileSync(p, text, { mode: 0o600 });
      return p;
    };
    const caFile = file("ca.crt", ca.cert);
    const caKey = file("ca.key", ca.key);
    const tlsCert = file("apiserver.crt", serving.cert);
    const tlsKey = file("apiserver.key", serving.key);
    const saKey = file("sa.key", sa.privateKey.export({ format: "pem", type: "pkcs8" }).toString());
    const saPub = file("sa.pub", sa.publicKey.export({ format: "pem", type: "spki" }).toString());

    const launch = async (attempt: number) => {
      const [etcdPort, etcdPeer, apiPort] = [await freePort(), await freePort(), await freePort()];
      server = `https://${address}:${apiPort}`;
      kubeconfig = file(
        "kubeconfig",
        stringify({
          apiVersion: "v1",
          kind: "Config",
          clusters: [
            {
              name: "local",
              cluster: { server, "certificate-authority-data": Buffer.from(ca.cert).toString("base64") },
            },
          ],
          users: [
            {
              name: "admin",
              user: {
                "client-certificate-data": Buffer.from(admin.cert).toString("base64"),
                "client-key-data": Buffer.from(admin.key).toString("base64"),
              },
            },
          ],
          contexts: [{ name: "local", context: { cluster: "local", user: "admin", namespace: "default" } }],
          "current-context": "local",
        }),
      );
      startProcess("etcd", etcd, [
        "--data-dir",
        join(dir, `etcd-${attempt}`),
        "--listen-client-urls",
        `http://127.0.0.1:${etcdPort}`,
        "--advertise-client-urls",
        `http://127.0.0.1:${etcdPort}`,
        "--listen-peer-urls",
        `http://127.0.0.1:${etcdPeer}`,
        "--initial-advertise-peer-urls",
        `http://127.0.0.1:${etcdPeer}`,
        "--initial-cluster",
        `default=http://127.0.0.1:${etcdPeer}`,
        "--unsafe-no-fsync",
        "--log-level",
        "warn",
      ]);
      startProcess("kube-apiserver", apiserver, [
        `--etcd-servers=http://127.0.0.1:${etcdPort}`,
        `--secure-port=${apiPort}`,
        `--bind-address=${address}`,
        `--advertise-address=${address}`,
        `--tls-cert-file=${tlsCert}`,
        `--tls-private-key-file=${tlsKey}`,
        `--client-ca-file=${caFile}`,
        "--authorization-mode=RBAC",
        `--service-cluster-ip-range=${serviceCIDR}`,
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        `--service-account-key-file=${saPub}`,
        `--service-account-signing-key-file=${saKey}`,
        "--allow-privileged=true",
        // Kubelets by address: node names are not in any resolver here (e2e/support/node.ts).
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        ...(opts.serviceAccounts ? [] : ["--disable-admission-plugins=ServiceAccount"]),
        `--cert-dir=${join(dir, "certs")}`,
        "--v=0",
      ]);
      const ready = async () => {
        const res = await httpsRequest(`${server}/readyz`, { ca: ca.cert, timeoutMs: 2000 }).catch(() => undefined);
        return res?.status === 200 || res?.status === 401 || res?.status === 403;
      };
      await Promise.race([whenOneDies(), waitFor("kube-apiserver to be ready", ready, 120_000, 250)]);
    };
    for (let attempt = 1; ; attempt++) {
      try {
        await launch(attempt);
        break;
      } catch (err) {
        if (!/address already in use/i.test((err as Error).message) || attempt >= 3) throw err;
        await stopAll();
        procs.splice(0);
      }
    }

    await waitFor(
      "the default namespace and RBAC bootstrap",
      () => {
        kubectl(["get", "namespace", "default", "-o", "name"]);
        return true;
      },
      60_000,
      250,
    );
    reads = new ApiReads({ server, ...adminKeys });

    // CRDs before the controller manager, so that its garbage collector discovers them at start
    // rather than at its next discovery resync (30 s later).
    if (opts.crds?.length) {
      kubectl(["apply", "--server-side", ...opts.crds.flatMap((f) => ["-f", f])]);
      // Every CRD Established; one just made may have no conditions yet, which `kubectl wait` fails on.
      await waitFor(
        "the CRDs to be Established",
        () =>
          (
            JSON.parse(kubectl(["get", "crd", "-o", "json"])).items as {
              status?: { conditions?: { type: string; status: string }[] };
            }[]
          ).every((c) => c.status?.conditions?.some((x) => x.type === "Established" && x.status === "True")),
        40_000,
        100,
      );
    }

    if (opts.controllerManager !== false) {
      startProcess("kube-controller-manager", kcm, [
        `--kubeconfig=${kubeconfig}`,
        `--authentication-kubeconfig=${kubeconfig}`,
        `--authorization-kubeconfig=${kubeconfig}`,
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        `--service-account-private-key-file=${saKey}`,
        `--root-ca-file=${caFile}`,
        `--cluster-signing-cert-file=${caFile}`,
        `--cluster-signing-key-file=${caKey}`,
        // What the tests rely on: garbage collection, Deployments → ReplicaSets → Pods, StatefulSets
        // and the binding of their claims to PersistentVolumes, a claim's deletion once no pod uses
        // it, namespaces, service accounts and their tokens.
        "--controllers=garbage-collector-controller,deployment-controller,replicaset-controller,statefulset-controller,persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,endpointslice-controller,pod-garbage-collector-controller",
        "--concurrent-gc-syncs=5",
        ...(opts.controllerManagerQps
          ? [`--kube-api-qps=${opts.controllerManagerQps}`, `--kube-api-burst=${opts.controllerManagerQps * 2}`]
          : []),
        "--v=0",
      ]);
    }
    // A component that fails on its flags or certificates exits within a moment of starting.
    // etcd and the API server have answered by now (readiness, the bootstrap namespace, the
    // CRDs): only the controller manager, which serves nothing to ask, is given that moment.
    const d = died();
    if (d) throw new Error(deathOf(d));
    if (opts.controllerManager !== false)
      await consistently(
        "every control-plane process to keep running",
        () => {
          const d = died();
          if (d) throw new Error(deathOf(d));
          return true;
        },
        1000,
        100,
      );
  } catch (err) {
    return fail(err);
  }

  const json = <T>(args: string[]): T => {
    const get = reads ? parseGet([...args, "-o", "json"]) : undefined;
    const read = get ? reads!.read(get) : undefined;
    if (read && "notFound" in read) throw new KubectlError(args, 1, read.notFound);
    if (read) return read.value as T;
    return JSON.parse(spawnKubectl([...args, "-o", "json"])) as T;
  };
  return {
    server,
    kubeconfig,
    dir,
    ca: caCert,
    kubectl,
    json,
    tryJson<T>(args: string[]): T | undefined {
      try {
        return json<T>(args);
      } catch (err) {
        if (err instanceof KubectlError && err.notFound) return undefined;
        throw err;
      }
    },
    directReads: () => reads?.served ?? 0,
    startProcess,
    processes: () => [...procs],
    async stop() {
      await stopAll();
      releaseDir(dir);
    },
  };
}
