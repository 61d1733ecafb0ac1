// A real Kubernetes node on this machine, joined to the local control plane
// (startControlPlane()): containerd, runc and the CNI plugins from Debian's packages, the
// kubelet and kube-proxy from the same Kubernetes module as the API server, and CoreDNS, all
// as processes of the test with their state under one temporary directory. Pods really run,
// on a bridge this module creates; see e2e/README.md for the facts it is built on.
//
// Two real nodes can run on a machine at once, each in a slot of its own (NODE_SLOTS, a lock in
// /run/lock each): its own bridge, pod subnet, Service range and directory, and kube-proxy in
// iptables mode in one and nftables mode in the other, so that neither rewrites the other's rules.
import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import type { BuiltImage } from "../images/build.ts";
import { installDebianPackages, isAlive, NODE_PACKAGES, toolPath } from "../tools/tools.ts";
import { firstAddress, SERVICE_CIDR, type ControlPlane } from "./controlplane.ts";
import { lockHolder, releaseDirLock, tryDirLock } from "./dir-lock.ts";
import { startScheduler } from "./nodes.ts";
import { freePort, waitFor } from "./ports.ts";
import { stopChild } from "./process.ts";

/**
 * A place for one real node on this machine. What is the host's differs between the slots: the
 * lock, the bridge and its pods' subnet (pods get no route beyond it and the Service range), the
 * control plane's Service range, the comment that marks the iptables rules this module adds, the
 * prefix of the node's directory, and kube-proxy's mode. Both modes are kube-proxy's own and
 * program the same Services; they keep their rules apart (iptables' KUBE-* chains, nftables'
 * `kube-proxy` table), and each kube-proxy is started with only its own mode's command on its
 * PATH, so that its start-up clean-up of the other mode's leftovers finds nothing to remove.
 */
interface NodeSlot {
  lock: string;
  bridge: string;
  subnet: { cidr: string; gateway: string; prefix: number };
  serviceCIDR: string;
  ruleComment: string;
  dirPrefix: string;
  proxyMode: "iptables" | "nftables";
  /** The commands kube-proxy may run in that mode (its PATH holds these alone). */
  proxyCommands: string[];
}
const NODE_SLOTS: NodeSlot[] = [
  {
    lock: "/run/lock/ifp-e2e-node",
    bridge: "ifpbr0",
    subnet: { cidr: "10.85.0.0/24", gateway: "10.85.0.1", prefix: 24 },
    serviceCIDR: SERVICE_CIDR,
    ruleComment: "ifp-e2e-node",
    dirPrefix: "ifp-node-",
    proxyMode: "iptables",
    proxyCommands: [
      "iptables",
      "iptables-save",
      "iptables-restore",
      "ip6tables",
      "ip6tables-save",
      "ip6tables-restore",
    ],
  },
  {
    lock: "/run/lock/ifp-e2e-second-node",
    bridge: "ifpbr1",
    subnet: { cidr: "10.85.1.0/24", gateway: "10.85.1.1", prefix: 24 },
    serviceCIDR: "10.0.16.0/20",
    ruleComment: "ifp-e2e-second-node",
    dirPrefix: "ifp-second-node-",
    proxyMode: "nftables",
    proxyCommands: ["nft"],
  },
];
/** The sysctls' values from before the first of the nodes that run at once: the last to stop restores them. */
const SYSCTLS_FILE = "/run/lock/ifp-e2e-node-sysctls.json";
/** The chains the kubelet itself makes (not kube-proxy): shared by the nodes that run at once. */
const KUBELET_CHAINS = ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"];
const NODE_NAME = "ifp-node";
const SYSCTLS = ["net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"];
const CNI_BIN = "/usr/lib/cni";
const RUNC = "/usr/sbin/runc";
/** The node's storage: a default StorageClass whose PersistentVolumes are directories of the node. */
const STORAGE_CLASS = "ifp-node-local";

/**
 * A registry the node's containerd pulls from, configured as a cluster admin configures a private
 * registry: a hosts.toml of its own under containerd's registry config_path
 * (certs.d/<host>/hosts.toml).
 */
export interface NodeRegistry {
  /** The registry as image references name it: host[:port]. */
  host: string;
  /** Where containerd reaches it: https://… (verified with `ca` when given), or http://… for a registry without TLS. */
  server: string;
  /** The PEM file of the CA that signed the registry's certificate, which the node then trusts for it. */
  ca?: string;
}

export interface RealNode {
  name: string;
  /**
   * The bridge's address on the host: pods reach host processes (nats-server, CoreDNS) there,
   * and the API server when the control plane is started on it (startControlPlane({ address })).
   */
  hostIP: string;
  podCIDR: string;
  /** The Service range of this node's slot: the control plane it joins is started with it (startControlPlane({ serviceCIDR })). */
  serviceCIDR: string;
  /** The `kubernetes` Service's address in that range. */
  kubernetesServiceIP: string;
  /** kube-proxy's mode in this node's slot. */
  proxyMode: "iptables" | "nftables";
  /** Everything of this node: configs, state, logs (logs/<component>.log). */
  dir: string;
  /** `ctr` against this node's containerd, in the kubelet's namespace. */
  ctr(args: string[]): string;
  /**
   * Import an OCI archive (e2e/images/build.ts) into the node's containerd. Imports asked for at
   * once run one after the other: two `ctr images import` at a time collide on their ingest of
   * the archive's index.json ("ref k8s.io/1/tar-index.json locked").
   */
  importImage(image: BuiltImage): Promise<void>;
  /**
   * Join the control plane: CoreDNS, kube-proxy, the kubelet and kube-scheduler, the node Ready
   * and untainted, and a default StorageClass with `volumes` PersistentVolumes (directories of
   * the node, hostPath) for StatefulSets' claims.
   */
  join(cp: ControlPlane, opts?: { volumes?: number }): Promise<void>;
  /** The end of each component's log, for failure messages. */
  logTail(chars?: number): string;
  /** Copy the logs out of the node's directory (kept after stop); returns where. */
  keepLogs(): string;
  /** Drain the node (when it joined) and stop everything, removing the mounts, network namespaces, bridge and iptables rules it made. */
  stop(): Promise<void>;
}

/**
 * Why e2e/node.test.ts does not run here, or undefined when it does: IFP_E2E_NODE=0 turns it
 * off (it changes the host's network while it runs), else realNodeUnsupported().
 */
export function nodeTestUnsupported(): string | undefined {
  if (process.env.IFP_E2E_NODE === "0") return "IFP_E2E_NODE=0";
  return realNodeUnsupported();
}

/** Why a real node cannot run here, or undefined when it can. */
export function realNodeUnsupported(): string | undefined {
  if (process.platform !== "linux") return `a real node needs Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return "a real node needs root (containerd, the kubelet, iptables)";
  if (!existsSync("/sys/fs/cgroup/cgroup.controllers") && !existsSync("/sys/fs/cgroup/memory"))
    return "no cgroup file system at /sys/fs/cgroup";
  if (!existsSync("/proc/sys/net/bridge")) return "the kernel has no bridge netfilter (/proc/sys/net/bridge)";
  const have = (cmd: string) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
  if (!have("ip")) return "no ip command (iproute2)";
  const missing = NODE_PACKAGES.filter(
    (p) => spawnSync("dpkg-query", ["-W", "-f=${Status}", p], { encoding: "utf8" }).stdout !== "install ok installed",
  );
  if (missing.length && !have("apt-get"))
    return `Debian packages ${missing.join(" ")} are missing and there is no apt-get`;
  return undefined;
}

function sh(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { input, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`);
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${(r.stderr || r.stdout).slice(-2000)}`);
  return r.stdout;
}

/** Run a clean-up step; its failure is reported, not thrown, so that the next step still runs. */
function attempt(what: string, fn: () => void, problems: string[]): void {
  try {
    fn();
  } catch (err) {
    problems.push(`${what}: ${(err as Error).message}`);
  }
}

/** Whether a node of another slot than `slot` runs on this machine. */
const otherNodeRuns = (slot: NodeSlot) => NODE_SLOTS.some((s) => s !== slot && lockHolder(s.lock) !== undefined);

/**
 * One try at the first free slot of `slots`: its lock taken (a directory holding this process's
 * pid and the slot's index), or undefined. A slot after the first is taken only beside a holder
 * of the first that knows of the others (its lock names its slot): a node that does not would
 * take the host's clean-up for its own. A dead holder's lock is removed, for the next try.
 */
export function takeSlot<S extends { lock: string }>(slots: S[]): S | undefined {
  for (const [i, slot] of slots.entries()) {
    if (i > 0 && !existsSync(join(slots[0]!.lock, "slot"))) return undefined;
    if (!tryDirLock(slot.lock)) continue;
    writeFileSync(join(slot.lock, "slot"), String(i));
    return slot;
  }
  return undefined;
}

async function acquireSlot(): Promise<NodeSlot> {
  mkdirSync("/run/lock", { recursive: true });
  let taken: NodeSlot | undefined;
  await waitFor(
    "a real-node slot (two real nodes run on this machine)",
    () => (taken = takeSlot(NODE_SLOTS)) !== undefined,
    20 * 60_000,
    1000,
  );
  return taken!;
}

/** Set the sysctls a node needs, keeping the machine's own values if no node had set them yet. */
function setSysctls(): void {
  try {
    writeFileSync(
      SYSCTLS_FILE,
      JSON.stringify(Object.fromEntries(SYSCTLS.map((s) => [s, readFileSync(`/proc/sys/${s}`, "utf8").trim()]))),
      { flag: "wx" },
    );
  } catch {}
  for (const s of SYSCTLS) writeFileSync(`/proc/sys/${s}`, "1");
}

/** The machine's own sysctl values back, when no other node runs. */
function restoreSysctls(slot: NodeSlot, problems: string[]): void {
  if (otherNodeRuns(slot) || !existsSync(SYSCTLS_FILE)) return;
  attempt(
    "restore the sysctls",
    () => {
      const before = JSON.parse(readFileSync(SYSCTLS_FILE, "utf8")) as Record<string, string>;
      rmSync(SYSCTLS_FILE, { force: true });
      for (const [s, v] of Object.entries(before)) writeFileSync(`/proc/sys/${s}`, v);
    },
    problems,
  );
}

/**
 * The iptables chains a slot's node removes as its own: in iptables mode those that appeared
 * while it ran, in nftables mode the kubelet's; the kubelet's are left to the last node to stop.
 */
function ownChains(slot: NodeSlot, appeared: Set<string>): Set<string> {
  const kubelet = (c: string) => KUBELET_CHAINS.includes(c.split(" ")[1]!);
  const own = [...appeared].filter((c) => slot.proxyMode === "iptables" || kubelet(c));
  if (otherNodeRuns(slot)) return new Set(own.filter((c) => !kubelet(c)));
  return new Set([...own, ...[...nodeChains()].filter(kubelet)]);
}

/** kube-proxy's nftables tables, when the slot's kube-proxy runs in that mode. */
function removeNftables(slot: NodeSlot): void {
  if (slot.proxyMode !== "nftables") return;
  for (const family of ["ip", "ip6"]) spawnSync("nft", ["delete", "table", family, "kube-proxy"], { stdio: "ignore" });
}

/** A directory of links to the commands kube-proxy may run in the slot's mode: its PATH. */
function proxyPath(slot: NodeSlot, dir: string): string {
  const bin = join(dir, "kube-proxy-bin");
  mkdirSync(bin, { recursive: true });
  for (const cmd of slot.proxyCommands) {
    const found = spawnSync("sh", ["-c", `command -v ${cmd}`], { encoding: "utf8" }).stdout.trim();
    if (!found) throw new Error(`${cmd} is not installed (kube-proxy in ${slot.proxyMode} mode runs it)`);
    symlinkSync(found, join(bin, cmd));
  }
  return bin;
}

/** Mount points at or under `dir`, deepest first. */
function mountsUnder(dir: string): string[] {
  const points = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\(\d{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

function unmountAll(dir: string, problems: string[]): void {
  for (let round = 0; round < 5; round++) {
    const points = mountsUnder(dir);
    if (!points.length) return;
    for (const p of points) {
      if (spawnSync("umount", [p], { stdio: "ignore" }).status !== 0)
        spawnSync("umount", ["-l", p], { stdio: "ignore" });
    }
  }
  const left = mountsUnder(dir);
  if (left.length) problems.push(`still mounted: ${left.join(", ")}`);
}

/**
 * Processes whose command line names a path under `dir`: the components of a node whose
 * directory it is, and the shims of its containerd (`-address <dir>/containerd.sock`).
 */
function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/cmdline`, "utf8").includes(`${dir}/`)) pids.push(Number(e));
    } catch {}
  }
  return pids;
}

/** The kubelet's, kube-proxy's and the portmap plugin's iptables chains, as "table chain". */
function nodeChains(): Set<string> {
  const save = spawnSync("iptables-save", [], { encoding: "utf8" });
  const chains = new Set<string>();
  let table = "";
  for (const line of save.stdout?.split("\n") ?? []) {
    if (line.startsWith("*")) table = line.slice(1);
    const chain = /^:((?:KUBE-|CNI-)\S+)\s/.exec(line)?.[1];
    if (chain) chains.add(`${table} ${chain}`);
  }
  return chains;
}

/**
 * Remove this module's rules (by their comment) and the chains in `chains`, with the rules that
 * jump to them; the chains that existed before the node started are left alone.
 */
function removeIptables(slot: NodeSlot, chains: Set<string>, problems: string[]): void {
  const save = spawnSync("iptables-save", [], { encoding: "utf8" });
  if (save.status !== 0) return;
  let table = "";
  for (const line of save.stdout.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1);
    if (!line.startsWith("-A ")) continue;
    const rule = line
      .slice(3)
      .match(/(?:[^\s"]+|"[^"]*")+/g)!
      .map((w) => w.replace(/^"(.*)"$/, "$1"));
    const target = rule[rule.indexOf("-j") + 1];
    const ours =
      rule[rule.indexOf("--comment") + 1] === slot.ruleComment ||
      (target !== undefined && chains.has(`${table} ${target}`) && !chains.has(`${table} ${rule[0]}`));
    if (ours)
      attempt(
        `iptables -t ${table} -D ${rule.join(" ")}`,
        () => sh("iptables", ["-t", table, "-D", ...rule]),
        problems,
      );
  }
  for (const tc of chains) {
    const [t, chain] = tc.split(" ") as [string, string];
    spawnSync("iptables", ["-t", t, "-F", chain], { stdio: "ignore" });
  }
  for (const tc of chains) {
    const [t, chain] = tc.split(" ") as [string, string];
    spawnSync("iptables", ["-t", t, "-X", chain], { stdio: "ignore" });
  }
  const left = [...nodeChains()].filter((c) => chains.has(c));
  if (left.length) problems.push(`iptables chains not removed: ${left.join(", ")}`);
}

/**
 * Kill the processes of a node's directory and everything they started (the containers live
 * on as children of their shims, and would outlive a shim that is killed alone): children first.
 */
async function killProcessesUnder(dir: string, problems: string[]): Promise<void> {
  const parents = new Map<number, number>();
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      // "pid (comm) state ppid …"; comm may hold spaces and parentheses, so split after the last ")".
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      parents.set(Number(e), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {}
  }
  const roots = processesUnder(dir);
  const doomed: number[] = [];
  const visit = (pid: number) => {
    for (const [child, parent] of parents) if (parent === pid && !doomed.includes(child)) visit(child);
    doomed.push(pid);
  };
  for (const r of roots) visit(r);
  for (const pid of doomed) attempt(`kill ${pid}`, () => process.kill(pid, "SIGKILL"), problems);
  await waitFor(
    "the node's processes to exit",
    () => doomed.every((pid) => !isAlive(pid) || isZombie(pid)),
    10_000,
    100,
  ).catch((err) => problems.push((err as Error).message));
}

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

function shimsRunning(): boolean {
  return readdirSync("/proc").some((e) => {
    try {
      return /^\d+$/.test(e) && readFileSync(`/proc/${e}/comm`, "utf8").startsWith("containerd-shim");
    } catch {
      return false;
    }
  });
}

/**
 * What an earlier run of the slot that died left behind (its directory is still there, under the
 * lock that is now ours): its shims, mounts, bridge, kube-proxy's rules and iptables chains.
 */
async function cleanLeftovers(slot: NodeSlot): Promise<void> {
  const problems: string[] = [];
  const dirs = readdirSync(tmpdir()).filter(
    (e) => e.startsWith(slot.dirPrefix) && existsSync(join(tmpdir(), e, "containerd.toml")),
  );
  for (const e of dirs) {
    const dir = join(tmpdir(), e);
    await killProcessesUnder(dir, problems);
    unmountAll(dir, problems);
    if (!mountsUnder(dir).length) rmSync(dir, { recursive: true, force: true });
  }
  if (dirs.length) {
    removeIptables(slot, ownChains(slot, nodeChains()), problems);
    removeNftables(slot);
    // Sockets of the killed shims; only when no shim at all runs on the machine any more.
    if (!shimsRunning()) spawnSync("find", ["/run/containerd/s", "-type", "s", "-delete"], { stdio: "ignore" });
    spawnSync("find", ["/run/containerd", "-depth", "-type", "d", "-empty", "-delete"], { stdio: "ignore" });
  } else {
    removeIptables(slot, new Set(), problems);
  }
  spawnSync("ip", ["link", "del", slot.bridge], { stdio: "ignore" });
  if (problems.length)
    process.stderr.write(`real node: leftovers of an earlier run not removed: ${problems.join("; ")}\n`);
}

/** A client certificate signed by the control plane's CA (openssl; the CA key is in cp.dir). */
function clientCertificate(
  cp: ControlPlane,
  dir: string,
  name: string,
  subject: string,
): { cert: string; key: string } {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const cert = join(dir, `${name}.crt`);
  const ext = join(dir, `${name}.ext`);
  writeFileSync(
    ext,
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
  );
  sh("openssl", [
    "req",
    "-new",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    key,
    "-subj",
    subject,
    "-out",
    csr,
  ]);
  sh("openssl", [
    "x509",
    "-req",
    "-in",
    csr,
    "-CA",
    join(cp.dir, "ca.crt"),
    "-CAkey",
    join(cp.dir, "ca.key"),
    "-set_serial",
    `0x${Date.now().toString(16)}${name.length}`,
    "-days",
    "2",
    "-extfile",
    ext,
    "-out",
    cert,
  ]);
  return { cert, key };
}

function kubeconfig(cp: ControlPlane, file: string, creds: { cert: string; key: string }): string {
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "local",
          cluster: { server: cp.server, "certificate-authority-data": Buffer.from(cp.ca).toString("base64") },
        },
      ],
      users: [{ name: "u", user: { "client-certificate": creds.cert, "client-key": creds.key } }],
      contexts: [{ name: "local", context: { cluster: "local", user: "u" } }],
      "current-context": "local",
    }),
    { mode: 0o600 },
  );
  return file;
}

/** A registry's hosts.toml: pulls and resolves go to its server (containerd's registry host configuration). */
function hostsToml(r: NodeRegistry): string {
  const q = JSON.stringify;
  return `server = ${q(r.server)}

[host.${q(r.server)}]
  capabilities = ["pull", "resolve"]
${r.ca ? `  ca = ${q(r.ca)}\n` : ""}`;
}

function containerdConfig(dir: string, sandboxImage: string): string {
  const q = JSON.stringify;
  return `version = 2
root = ${q(join(dir, "containerd", "root"))}
state = ${q(join(dir, "containerd", "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = ${q(join(dir, "containerd.sock"))}

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(dir, "containerd", "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  # Imported from an OCI archive before the kubelet starts, or pulled from a registry of certs.d.
  sandbox_image = ${q(sandboxImage)}
  # The VM gives root no CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Network namespaces under the state directory rather than /var/run/netns, so that they go with it.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = ${q(RUNC)}
        Root = ${q(join(dir, "runc"))}
        SystemdCgroup = false
  # A hosts.toml per registry (NodeRegistry): where a pull goes, and the CA it trusts there.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ${q(join(dir, "certs.d"))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ${q(CNI_BIN)}
    conf_dir = ${q(join(dir, "cni", "net.d"))}
    max_conf_num = 1
`;
}

function cniConfig(slot: NodeSlot, dir: string): string {
  return JSON.stringify(
    {
      cniVersion: "0.4.0",
      name: "ifp-e2e",
      plugins: [
        {
          type: "bridge",
          bridge: slot.bridge,
          isGateway: true,
          // No masquerading and no default route: pods reach each other, the host's bridge
          // address and Services, nothing else.
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            dataDir: join(dir, "cni", "ipam"),
            ranges: [[{ subnet: slot.subnet.cidr, gateway: slot.subnet.gateway }]],
            routes: [{ dst: slot.serviceCIDR }],
          },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  );
}

/**
 * A real node on this machine, in two steps so that the control plane can be started on the
 * node's bridge address in between: this sets up the network (bridge, sysctls, the fence),
 * containerd with the pause image (`sandboxImage`: buildImage("pause") imported, or a reference
 * containerd pulls) and the registries it pulls from (`registries`), and returns the node;
 * `join(cp)` starts CoreDNS, kube-proxy, the kubelet and kube-scheduler against `cp`.
 *
 *   const node = await createNode({ sandboxImage });
 *   const cp = await startControlPlane({ address: node.hostIP, serviceCIDR: node.serviceCIDR, serviceAccounts: true });
 *   await node.join(cp);
 */
export async function createNode(opts: {
  sandboxImage: BuiltImage | string;
  registries?: NodeRegistry[];
}): Promise<RealNode> {
  const unsupported = realNodeUnsupported();
  if (unsupported) throw new Error(unsupported);
  installDebianPackages(NODE_PACKAGES);
  const kubelet = toolPath("kubernetes-node", "kubelet");
  const kubeProxy = toolPath("kubernetes-node", "kube-proxy");
  const coredns = toolPath("coredns");

  const slot = await acquireSlot();
  const { subnet } = slot;
  let chainsBefore: Set<string>;
  let dir: string;
  try {
    await cleanLeftovers(slot);
    chainsBefore = nodeChains();
    dir = mkdtempSync(join(tmpdir(), slot.dirPrefix));
  } catch (err) {
    releaseDirLock(slot.lock);
    throw err;
  }
  const logs = join(dir, "logs");
  for (const d of [
    logs,
    join(dir, "cni", "net.d"),
    join(dir, "kubelet"),
    join(dir, "pod-logs"),
    join(dir, "certs"),
    join(dir, "volumes"),
  ])
    mkdirSync(d, { recursive: true });
  const sock = join(dir, "containerd.sock");
  const procs: { name: string; proc: ChildProcess }[] = [];
  // The shims put their sockets in /run/containerd/s whatever containerd's state directory is.
  const shimDirExisted = existsSync("/run/containerd");
  let stopped = false;
  let joined: ControlPlane | undefined;

  // By its path: a component's own PATH (kube-proxy's) need not hold it.
  const setpriv = spawnSync("sh", ["-c", "command -v setpriv"], { encoding: "utf8" }).stdout.trim() || "setpriv";
  const start = (name: string, bin: string, args: string[], env?: NodeJS.ProcessEnv) => {
    const fd = openSync(join(logs, `${name}.log`), "a");
    // SIGTERM when the test process dies without stopping the node; the next node removes the rest.
    const proc = spawn(setpriv, ["--pdeathsig", "SIGTERM", "--", bin, ...args], {
      stdio: ["ignore", fd, fd],
      env: env ?? process.env,
    });
    closeSync(fd);
    procs.push({ name, proc });
    return proc;
  };
  /** A process has ended when it has an exit code or was killed by a signal (exitCode is then null). */
  const ended = (proc: ChildProcess) => proc.exitCode !== null || proc.signalCode !== null;
  const logTail = (chars = 3000) =>
    procs
      .map(({ name, proc }) => {
        let text = "";
        try {
          text = readFileSync(join(logs, `${name}.log`), "utf8").slice(-chars);
        } catch {}
        return `--- ${name} (${!ended(proc) ? "running" : proc.signalCode ? `killed by ${proc.signalCode}` : `exited ${proc.exitCode}`})\n${text}`;
      })
      .join("\n");
  const died = () => procs.find((p) => ended(p.proc));
  /** waitFor that gives up at once when a component exits. */
  const whileAlive = async (what: string, probe: () => Promise<boolean> | boolean, timeoutMs: number) => {
    let dead: (typeof procs)[number] | undefined;
    await waitFor(what, async () => (dead = died()) !== undefined || (await probe()), timeoutMs, 250);
    if (dead)
      throw new Error(`${dead.name} exited (${dead.proc.exitCode ?? dead.proc.signalCode}) while waiting for ${what}`);
  };
  const ctrArgs = (args: string[]) => ["--address", sock, "--namespace", "k8s.io", ...args];
  const ctr = (args: string[]) => sh("ctr", ctrArgs(args));

  // SIGTERM, SIGKILL after 10 s, then at most 5 s more: a process that will not die does not hold the teardown.
  const stopProc = (p: { proc: ChildProcess }) => stopChild(p.proc, 10_000);

  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const problems: string[] = [];
    const kubeletProc = procs.find((p) => p.name === "kubelet");
    // 1. Drain while the kubelet runs, so that it tears the pods down properly (CNI DEL,
    //    volume unmounts); cordoned, so that their controllers' replacements stay Pending.
    //    Within kubectl's own time limit (controlplane.ts): what is left is killed below.
    if (joined && kubeletProc && !ended(kubeletProc.proc)) {
      const cp = joined;
      attempt("cordon", () => cp.kubectl(["cordon", NODE_NAME]), problems);
      attempt(
        "delete pods",
        () =>
          cp.kubectl([
            "delete",
            "pods",
            "--all-namespaces",
            "--field-selector",
            `spec.nodeName=${NODE_NAME}`,
            "--grace-period=2",
            "--timeout=40s",
            "--wait=true",
          ]),
        problems,
      );
    }
    for (const name of ["kubelet", "kube-proxy", "coredns"]) {
      const p = procs.find((x) => x.name === name);
      if (p) await stopProc(p);
    }
    // 2. Whatever is left in containerd: kill its tasks, then containerd and its shims.
    const containerd = procs.find((p) => p.name === "containerd");
    if (containerd && !ended(containerd.proc)) {
      try {
        for (const id of ctr(["tasks", "ls", "-q"]).split("\n").filter(Boolean))
          spawnSync("ctr", ctrArgs(["tasks", "kill", "-s", "SIGKILL", id]), { stdio: "ignore" });
      } catch {}
      await stopProc(containerd);
    }
    await killProcessesUnder(dir, problems);
    // 3. The host: mounts (rootfs, volumes, network namespaces), iptables, the bridge, sysctls.
    unmountAll(dir, problems);
    // kube-proxy's rules (not `kube-proxy --cleanup`, which removes both modes', the other node's too).
    removeIptables(slot, ownChains(slot, new Set([...nodeChains()].filter((c) => !chainsBefore.has(c)))), problems);
    removeNftables(slot);
    spawnSync("ip", ["link", "del", slot.bridge], { stdio: "ignore" });
    if (!mountsUnder(dir).length) rmSync(dir, { recursive: true, force: true });
    if (!shimDirExisted && !otherNodeRuns(slot))
      spawnSync("find", ["/run/containerd", "-depth", "-type", "d", "-empty", "-delete"], { stdio: "ignore" });
    releaseDirLock(slot.lock);
    restoreSysctls(slot, problems);
    if (problems.length) process.stderr.write(`real node: clean-up problems: ${problems.join("; ")}\n`);
  };

  /** On a failed start: the logs are kept, everything stopped, and the error says where the logs are. */
  const failed = async (what: string, err: unknown): Promise<never> => {
    const tail = logTail();
    const kept = node.keepLogs();
    await stop();
    throw new Error(`${what}: ${(err as Error).message}\n(logs kept in ${kept})\n${tail}`);
  };

  let imports: Promise<unknown> = Promise.resolve();
  const importImage = (image: BuiltImage) => {
    const done = imports.then(() => importOne(image));
    imports = done.catch(() => {});
    return done;
  };
  const importOne = async (image: BuiltImage) => {
    await new Promise<void>((resolve, reject) =>
      execFile(
        "ctr",
        ctrArgs(["images", "import", image.archive]),
        { maxBuffer: 16 * 1024 * 1024 },
        (err, _out, stderr) =>
          err ? reject(new Error(`ctr images import ${image.archive}: ${stderr || err.message}`)) : resolve(),
      ),
    );
    if (!ctr(["images", "ls", "-q"]).split("\n").includes(image.ref))
      throw new Error(`${image.archive} did not import as ${image.ref}`);
  };

  const join_ = async (cp: ControlPlane, joinOpts: { volumes?: number } = {}) => {
    if (joined) throw new Error("the node has joined a control plane already");
    joined = cp;
    try {
      // Credentials: the kubelet as system:node:<name> in system:nodes (bound to the system:node
      // role, as the Node authorizer would allow it), kube-proxy as system:kube-proxy.
      const certs = join(dir, "certs");
      const kubeletCreds = clientCertificate(cp, certs, "kubelet", `/O=system:nodes/CN=system:node:${NODE_NAME}`);
      const proxyCreds = clientCertificate(cp, certs, "kube-proxy", "/CN=system:kube-proxy");
      cp.kubectl([
        "create",
        "clusterrolebinding",
        "ifp-e2e-system-nodes",
        "--clusterrole=system:node",
        "--group=system:nodes",
      ]);
      const kubeletKubeconfig = kubeconfig(cp, join(dir, "kubelet.kubeconfig"), kubeletCreds);
      const proxyKubeconfig = kubeconfig(cp, join(dir, "kube-proxy.kubeconfig"), proxyCreds);

      // CoreDNS on the bridge address: the cluster's names from the API server, nothing forwarded.
      const [dnsHealth, dnsReady] = [await freePort(), await freePort()];
      writeFileSync(
        join(dir, "Corefile"),
        `.:53 {
  bind ${subnet.gateway}
  errors
  health 127.0.0.1:${dnsHealth}
  ready 127.0.0.1:${dnsReady}
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig ${cp.kubeconfig} local
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
  }
  cache 5
}
`,
      );
      start("coredns", coredns, ["-conf", join(dir, "Corefile")]);

      // kube-proxy, iptables mode, touching no host-wide sysctl it can leave alone.
      const [proxyHealth, proxyMetrics] = [await freePort(), await freePort()];
      writeFileSync(
        join(dir, "kube-proxy.yaml"),
        stringify({
          apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
          kind: "KubeProxyConfiguration",
          clientConnection: { kubeconfig: proxyKubeconfig },
          hostnameOverride: NODE_NAME,
          clusterCIDR: subnet.cidr,
          healthzBindAddress: `127.0.0.1:${proxyHealth}`,
          metricsBindAddress: `127.0.0.1:${proxyMetrics}`,
          nodePortAddresses: [`${subnet.gateway}/32`],
          mode: slot.proxyMode,
          iptables: { localhostNodePorts: false, syncPeriod: "10s", minSyncPeriod: "0s" },
          nftables: { syncPeriod: "10s", minSyncPeriod: "0s" },
          conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
        }),
      );
      start("kube-proxy", kubeProxy, ["--config", join(dir, "kube-proxy.yaml"), "--v=1"], {
        ...process.env,
        PATH: proxyPath(slot, dir),
      });

      // The kubelet, with what this machine requires (cgroups v1, no CAP_SYS_RESOURCE).
      const [kubeletPort, kubeletHealth] = [await freePort(), await freePort()];
      writeFileSync(join(dir, "resolv.conf"), ""); // pods get the cluster DNS only, never the host's resolvers
      writeFileSync(
        join(dir, "kubelet.yaml"),
        stringify({
          apiVersion: "kubelet.config.k8s.io/v1beta1",
          kind: "KubeletConfiguration",
          address: subnet.gateway,
          port: kubeletPort,
          readOnlyPort: 0,
          healthzBindAddress: "127.0.0.1",
          healthzPort: kubeletHealth,
          authentication: {
            anonymous: { enabled: true },
            webhook: { enabled: false },
            x509: { clientCAFile: join(cp.dir, "ca.crt") },
          },
          authorization: { mode: "AlwaysAllow" },
          containerRuntimeEndpoint: `unix://${sock}`,
          cgroupDriver: "cgroupfs",
          failCgroupV1: false,
          cgroupsPerQOS: false,
          enforceNodeAllocatable: [],
          failSwapOn: false,
          clusterDNS: [subnet.gateway],
          clusterDomain: "cluster.local",
          resolvConf: join(dir, "resolv.conf"),
          podLogsDir: join(dir, "pod-logs"),
          maxPods: 40,
          serializeImagePulls: false,
          imageGCHighThresholdPercent: 100,
          imageGCLowThresholdPercent: 99,
          evictionHard: {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
          },
          volumePluginDir: join(dir, "volume-plugins"),
          nodeStatusUpdateFrequency: "4s",
          syncFrequency: "10s",
        }),
      );
      start("kubelet", kubelet, [
        `--config=${join(dir, "kubelet.yaml")}`,
        `--kubeconfig=${kubeletKubeconfig}`,
        `--root-dir=${join(dir, "kubelet")}`,
        `--cert-dir=${join(dir, "kubelet", "pki")}`,
        `--hostname-override=${NODE_NAME}`,
        `--node-ip=${subnet.gateway}`,
        "--v=1",
      ]);
      await startScheduler(cp);

      // Storage, as a cluster's default class provides it: PersistentVolumes that are directories
      // of this node, open to any user (a hostPath volume gets no fsGroup ownership).
      const volumes = Array.from({ length: joinOpts.volumes ?? 2 }, (_, i) => {
        const path = join(dir, "volumes", `pv-${i}`);
        mkdirSync(path, { recursive: true });
        chmodSync(path, 0o777);
        return {
          apiVersion: "v1",
          kind: "PersistentVolume",
          metadata: { name: `${STORAGE_CLASS}-${i}` },
          spec: {
            storageClassName: STORAGE_CLASS,
            capacity: { storage: "100Gi" },
            accessModes: ["ReadWriteOnce"],
            persistentVolumeReclaimPolicy: "Retain",
            hostPath: { path, type: "Directory" },
            nodeAffinity: {
              required: {
                nodeSelectorTerms: [
                  { matchExpressions: [{ key: "kubernetes.io/hostname", operator: "In", values: [NODE_NAME] }] },
                ],
              },
            },
          },
        };
      });
      const storageClass = {
        apiVersion: "storage.k8s.io/v1",
        kind: "StorageClass",
        metadata: { name: STORAGE_CLASS, annotations: { "storageclass.kubernetes.io/is-default-class": "true" } },
        provisioner: "kubernetes.io/no-provisioner",
        volumeBindingMode: "WaitForFirstConsumer",
        reclaimPolicy: "Retain",
      };
      cp.kubectl(
        ["apply", "-f", "-"],
        JSON.stringify({ apiVersion: "v1", kind: "List", items: [storageClass, ...volumes] }),
      );

      await whileAlive(
        `node ${NODE_NAME} to be Ready`,
        () => {
          const n = cp.tryJson(["get", "node", NODE_NAME]);
          return n?.status?.conditions?.find((c: { type: string }) => c.type === "Ready")?.status === "True";
        },
        180_000,
      );
      // The kubelet registers with the not-ready taint; the node lifecycle controller that lifts
      // it is not part of this control plane.
      cp.kubectl([
        "patch",
        "node",
        NODE_NAME,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/taints","value":[]}]',
      ]);
      await whileAlive(
        "CoreDNS to be ready",
        async () => (await fetch(`http://127.0.0.1:${dnsReady}/ready`).catch(() => undefined))?.status === 200,
        60_000,
      );
    } catch (err) {
      return failed("the real node did not join the control plane", err);
    }
  };

  const node: RealNode = {
    name: NODE_NAME,
    hostIP: subnet.gateway,
    podCIDR: subnet.cidr,
    serviceCIDR: slot.serviceCIDR,
    kubernetesServiceIP: firstAddress(slot.serviceCIDR),
    proxyMode: slot.proxyMode,
    dir,
    ctr,
    importImage,
    join: join_,
    logTail,
    keepLogs() {
      const kept = mkdtempSync(join(tmpdir(), "ifp-node-logs-"));
      cpSync(logs, kept, { recursive: true });
      return kept;
    },
    stop,
  };

  try {
    // The network: a bridge with the gateway address (the kubelet's node IP, where host
    // processes serve pods), forwarding on, and a fence so that nothing from the pods is
    // forwarded beyond their subnet.
    setSysctls();
    sh("ip", ["link", "add", slot.bridge, "type", "bridge"]);
    sh("ip", ["addr", "add", `${subnet.gateway}/${subnet.prefix}`, "dev", slot.bridge]);
    sh("ip", ["link", "set", slot.bridge, "up"]);
    sh("iptables", [
      "-I",
      "FORWARD",
      "1",
      "-s",
      subnet.cidr,
      "!",
      "-d",
      subnet.cidr,
      "-m",
      "comment",
      "--comment",
      slot.ruleComment,
      "-j",
      "DROP",
    ]);
    writeFileSync(join(dir, "cni", "net.d", "10-ifp-e2e.conflist"), cniConfig(slot, dir));

    // containerd
    for (const r of opts.registries ?? []) {
      mkdirSync(join(dir, "certs.d", r.host), { recursive: true });
      writeFileSync(join(dir, "certs.d", r.host, "hosts.toml"), hostsToml(r));
    }
    const sandbox = opts.sandboxImage;
    writeFileSync(
      join(dir, "containerd.toml"),
      containerdConfig(dir, typeof sandbox === "string" ? sandbox : sandbox.ref),
    );
    start("containerd", "containerd", ["--config", join(dir, "containerd.toml"), "--log-level", "info"]);
    await whileAlive(
      "containerd to answer",
      () => spawnSync("ctr", ["--address", sock, "version"], { stdio: "ignore" }).status === 0,
      60_000,
    );
    if (typeof sandbox !== "string") await importImage(sandbox);
    return node;
  } catch (err) {
    return failed("the real node did not start", err);
  }
}
