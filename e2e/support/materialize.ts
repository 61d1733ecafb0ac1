import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ControlPlane } from "./controlplane.ts";

export interface LocalRuntime {
  name: string;
  proc: ChildProcess;
  args: string[];
  dir: string;
  output: () => string;
}

/**
 * Run a runtime Deployment's container as a local process from exactly what the operator
 * rendered: its args and env, and the files of its ConfigMap and Secret volumes written where
 * the mounts put them (under `dir` instead of /). `rewrite` adjusts file contents and args for
 * loopback (cluster DNS names become localhost ports).
 */
export function runDeploymentLocally(
  cp: ControlPlane,
  namespace: string,
  deployment: string,
  dir: string,
  opts: { rewriteFile?: (path: string, text: string) => string; rewriteArg?: (arg: string) => string; extraArgs?: string[]; env?: Record<string, string> },
): LocalRuntime {
  const dep = JSON.parse(cp.kubectl(["-n", namespace, "get", "deployment", deployment, "-o", "json"]));
  const pod = dep.spec.template.spec;
  const container = pod.containers[0];
  const root = join(dir, deployment);
  for (const mount of container.volumeMounts ?? []) {
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name);
    const target = join(root, mount.mountPath);
    mkdirSync(target, { recursive: true });
    let files: Record<string, string> = {};
    if (volume.configMap) {
      files = JSON.parse(cp.kubectl(["-n", namespace, "get", "configmap", volume.configMap.name, "-o", "json"])).data ?? {};
    } else if (volume.secret) {
      const data = JSON.parse(cp.kubectl(["-n", namespace, "get", "secret", volume.secret.secretName, "-o", "json"])).data ?? {};
      files = Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v as string, "base64").toString()]));
    }
    const items: { key: string; path: string }[] | undefined = (volume.configMap ?? volume.secret)?.items;
    for (const [key, text] of Object.entries(files)) {
      const path = items ? items.find((i) => i.key === key)?.path : key;
      if (!path) continue;
      const file = join(target, path);
      writeFileSync(file, opts.rewriteFile ? opts.rewriteFile(file, text) : text, { mode: 0o600 });
    }
  }
  const args = (container.args as string[])
    .map((a) => a.replace(/=(\/etc\/ifp\/)/, `=${root}$1`))
    .map((a) => (opts.rewriteArg ? opts.rewriteArg(a) : a))
    .concat(opts.extraArgs ?? []);
  const env = Object.fromEntries((container.env ?? []).filter((e: { value?: string }) => e.value !== undefined).map((e: { name: string; value: string }) => [e.name, e.value]));
  let output = "";
  const proc = spawn(process.execPath, [new URL("../../runtime/bin/ifp-runtime.ts", import.meta.url).pathname, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env, ...opts.env },
  });
  proc.stdout!.on("data", (d: Buffer) => (output = (output + d).slice(-20_000)));
  proc.stderr!.on("data", (d: Buffer) => (output = (output + d).slice(-20_000)));
  return { name: deployment, proc, args, dir: root, output: () => output };
}
