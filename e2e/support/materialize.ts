import type { ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ControlPlane } from "./controlplane.ts";
import { describeExit, spawnProcess, type ManagedProcess } from "./process.ts";
import { waitFor } from "./wait.ts";

export interface LocalRuntime {
  name: string;
  proc: ChildProcess;
  process: ManagedProcess;
  args: string[];
  dir: string;
  output: () => string;
  /**
   * The URLs from the runtime's "agent listening" / "relay listening" log line (logged at info
   * level), so that it can listen on port 0; rejects when the runtime exits first.
   */
  listening(timeoutMs?: number): Promise<{ url: string; localApiUrl?: string }>;
  /** SIGTERM, SIGKILL after a grace period; bounded. */
  stop(): Promise<void>;
}

/** The `url` and `localApiUrl` of a runtime's "… listening" JSON log line in `log`, if there is one. */
export function listeningUrls(log: string): { url: string; localApiUrl?: string } | undefined {
  for (const line of log.split("\n")) {
    if (!line.includes('listening"')) continue;
    try {
      const entry = JSON.parse(line) as { msg?: string; url?: string; localApiUrl?: string };
      if (entry.url && /listening$/.test(entry.msg ?? "")) return { url: entry.url, localApiUrl: entry.localApiUrl };
    } catch {
      // Not a JSON line.
    }
  }
  return undefined;
}

/**
 * The options that run a runtime on loopback: its HTTPS and metrics listeners on these ports, its
 * local API on one the system picks (logged in its "listening" line).
 */
export function onLoopback(
  port: number,
  metricsPort: number,
): { rewriteArg: (a: string) => string; extraArgs: string[] } {
  return {
    rewriteArg: (a) =>
      a.startsWith("--port=")
        ? `--port=${port}`
        : a.startsWith("--metrics-port=")
          ? `--metrics-port=${metricsPort}`
          : a,
    extraArgs: ["--host=127.0.0.1", "--local-api-port=0"],
  };
}

/**
 * Run a runtime Deployment's container as a local process from exactly what the operator
 * rendered: its args and env, and the files of its ConfigMap and Secret volumes written where
 * the mounts put them (under `dir` instead of /, in args and env values alike). `rewrite` adjusts file contents and args for
 * loopback (cluster DNS names become localhost ports).
 */
export function runDeploymentLocally(
  cp: ControlPlane,
  namespace: string,
  deployment: string,
  dir: string,
  opts: {
    rewriteFile?: (path: string, text: string) => string;
    rewriteArg?: (arg: string) => string;
    extraArgs?: string[];
    env?: Record<string, string>;
  },
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
      files =
        JSON.parse(cp.kubectl(["-n", namespace, "get", "configmap", volume.configMap.name, "-o", "json"])).data ?? {};
    } else if (volume.secret) {
      const data =
        JSON.parse(cp.kubectl(["-n", namespace, "get", "secret", volume.secret.secretName, "-o", "json"])).data ?? {};
      files = Object.fromEntries(
        Object.entries(data).map(([k, v]) => [k, Buffer.from(v as string, "base64").toString()]),
      );
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
  const env = Object.fromEntries(
    (container.env ?? [])
      .filter((e: { value?: string }) => e.value !== undefined)
      .map((e: { name: string; value: string }) => [e.name, e.value.replace(/^\/etc\/ifp\//, `${root}/etc/ifp/`)]),
  );
  const p = spawnProcess(
    deployment,
    process.execPath,
    [new URL("../../runtime/bin/ifp-runtime.ts", import.meta.url).pathname, ...args],
    {
      env: { ...process.env, ...env, ...opts.env },
      logFile: join(root, "runtime.log"),
    },
  );
  return {
    name: deployment,
    proc: p.proc,
    process: p,
    args,
    dir: root,
    output: () => p.log(),
    async listening(timeoutMs = 30_000) {
      const died = p.exited.then((e) =>
        Promise.reject(new Error(`${deployment} ${describeExit(e)}:\n${p.log().slice(-4000)}`)),
      );
      died.catch(() => {});
      const found = waitFor(`${deployment} to log its URL`, () => listeningUrls(p.log()), timeoutMs, 50);
      found.catch(() => {});
      return Promise.race([died, found]);
    },
    async stop() {
      await p.stop();
    },
  };
}
