import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { toolPath } from "../tools/tools.ts";
import { freePort, waitFor } from "./ports.ts";
import { httpsRequest } from "./https.ts";
import { createCA } from "./tls.ts";

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
  /** The same, or undefined when kubectl fails (e.g. the object does not exist). */
  tryJson<T = any>(args: string[]): T | undefined;
  /** Start an extra component (kube-scheduler, kwok) with the admin kubeconfig. */
  startProcess(name: string, bin: string, args: string[]): ChildProcess;
  stop(): Promise<void>;
}

/**
 * A real Kubernetes control plane on loopback, as envtest runs it: etcd, kube-apiserver and
 * kube-controller-manager (garbage collection, Deployments → ReplicaSets) from the tool cache,
 * with a generated CA, serving and admin client certificates, a service-account signing key
 * and a kubeconfig. Optionally installs CRDs from files.
 */
export async function startControlPlane(opts: { crds?: string[]; controllerManager?: boolean } = {}): Promise<ControlPlane> {
  const dir = mkdtempSync(join(tmpdir(), "ifp-kube-"));
  const etcd = toolPath("etcd");
  const apiserver = toolPath("kubernetes", "kube-apiserver");
  const kcm = toolPath("kubernetes", "kube-controller-manager");
  const procs: { name: string; proc: ChildProcess; log: string[] }[] = [];

  const ca = await createCA("ifp-operator test cluster CA");
  const serving = await ca.issue({ commonName: "kube-apiserver", dnsNames: ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"], ips: ["127.0.0.1", "10.0.0.1"] });
  const admin = await ca.issue({ commonName: "admin", organization: "system:masters", client: true });
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

  const [etcdPort, etcdPeer, apiPort] = [await freePort(), await freePort(), await freePort()];
  const server = `https://127.0.0.1:${apiPort}`;
  const kubeconfig = file(
    "kubeconfig",
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "local", cluster: { server, "certificate-authority-data": Buffer.from(ca.cert).toString("base64") } }],
      users: [{ name: "admin", user: { "client-certificate-data": Buffer.from(admin.cert).toString("base64"), "client-key-data": Buffer.from(admin.key).toString("base64") } }],
      contexts: [{ name: "local", context: { cluster: "local", user: "admin", namespace: "default" } }],
      "current-context": "local",
    }),
  );

  const startProcess = (name: string, bin: string, args: string[]) => {
    const log: string[] = [];
    const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    const keep = (d: Buffer) => {
      log.push(d.toString());
      if (log.length > 200) log.splice(0, log.length - 200);
    };
    proc.stdout!.on("data", keep);
    proc.stderr!.on("data", keep);
    procs.push({ name, proc, log });
    return proc;
  };
  const died = () => procs.find((p) => p.proc.exitCode !== null);

  startProcess("etcd", etcd, [
    "--data-dir", join(dir, "etcd"),
    "--listen-client-urls", `http://127.0.0.1:${etcdPort}`,
    "--advertise-client-urls", `http://127.0.0.1:${etcdPort}`,
    "--listen-peer-urls", `http://127.0.0.1:${etcdPeer}`,
    "--initial-advertise-peer-urls", `http://127.0.0.1:${etcdPeer}`,
    "--initial-cluster", `default=http://127.0.0.1:${etcdPeer}`,
    "--unsafe-no-fsync",
    "--log-level", "warn",
  ]);
  startProcess("kube-apiserver", apiserver, [
    `--etcd-servers=http://127.0.0.1:${etcdPort}`,
    `--secure-port=${apiPort}`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--tls-cert-file=${tlsCert}`,
    `--tls-private-key-file=${tlsKey}`,
    `--client-ca-file=${caFile}`,
    "--authorization-mode=RBAC",
    "--service-cluster-ip-range=10.0.0.0/24",
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    `--service-account-key-file=${saPub}`,
    `--service-account-signing-key-file=${saKey}`,
    "--allow-privileged=true",
    "--disable-admission-plugins=ServiceAccount",
    `--cert-dir=${join(dir, "certs")}`,
    "--v=0",
  ]);
  const ready = async () => {
    const d = died();
    if (d) throw new Error(`${d.name} exited with ${d.proc.exitCode}: ${d.log.join("").slice(-3000)}`);
    const res = await httpsRequest(`${server}/readyz`, { ca: ca.cert, timeoutMs: 2000 }).catch(() => undefined);
    return res?.status === 200 || res?.status === 401 || res?.status === 403;
  };
  try {
    await waitFor("kube-apiserver to be ready", ready, 120_000, 250);
  } catch (err) {
    await stopAll();
    throw err;
  }

  const kubectl = (args: string[], input?: string) => {
    const r = spawnSync("kubectl", ["--kubeconfig", kubeconfig, ...args], { input, encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
    if (r.status !== 0) throw new Error(`kubectl ${args.join(" ")} failed: ${r.stderr || r.stdout}`);
    return r.stdout;
  };
  await waitFor("the default namespace and RBAC bootstrap", () => {
    try {
      kubectl(["get", "namespace", "default", "-o", "name"]);
      return true;
    } catch {
      return false;
    }
  }, 60_000, 250);

  // CRDs before the controller manager, so that its garbage collector discovers them at start
  // rather than at its next discovery resync (30 s later).
  if (opts.crds?.length) {
    try {
      kubectl(["apply", "--server-side", ...opts.crds.flatMap((f) => ["-f", f])]);
      kubectl(["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
    } catch (err) {
      await stopAll();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
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
      // What the tests rely on: garbage collection, Deployments → ReplicaSets → Pods, namespaces,
      // service accounts and their tokens.
      "--controllers=garbage-collector-controller,deployment-controller,replicaset-controller,statefulset-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,endpointslice-controller,pod-garbage-collector-controller",
      "--concurrent-gc-syncs=5",
      "--v=0",
    ]);
  }
  await new Promise((r) => setTimeout(r, 1000));
  const dead = died();
  if (dead) {
    await stopAll();
    throw new Error(`${dead.name} exited with ${dead.proc.exitCode}: ${dead.log.join("").slice(-3000)}`);
  }
  async function stopAll(): Promise<void> {
    for (const p of [...procs].reverse()) {
      if (p.proc.exitCode !== null) continue;
      await new Promise<void>((resolve) => {
        p.proc.once("exit", () => resolve());
        p.proc.kill("SIGTERM");
        setTimeout(() => p.proc.kill("SIGKILL"), 10_000).unref();
      });
    }
  }

  const json = <T,>(args: string[]): T => JSON.parse(kubectl([...args, "-o", "json"])) as T;
  return {
    server,
    kubeconfig,
    dir,
    ca: ca.cert,
    kubectl,
    json,
    tryJson<T>(args: string[]): T | undefined {
      try {
        return json<T>(args);
      } catch {
        return undefined;
      }
    },
    startProcess,
    async stop() {
      await stopAll();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
