import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, type ConnectionOptions } from "@nats-io/transport-node";
import { toolPath } from "../tools/tools.ts";
import { freePort } from "./ports.ts";
import { waitFor } from "./wait.ts";
import { describeExit, releaseDir, spawnProcess, tempDir, type ManagedProcess } from "./process.ts";

export interface NatsServer {
  url: string;
  port: number;
  storeDir: string;
  /** The server process's id while it runs. */
  readonly pid: number | undefined;
  /** The server's log (stdout and stderr) since it was last started, bounded. */
  log(): string;
  /** Stop the server (SIGTERM, SIGKILL after a grace period), keeping its store. */
  stop(): Promise<void>;
  /** Start it again on the same port and store (stopping it first if it runs). */
  restart(): Promise<void>;
  /** Stop it and delete its store (kept when a test of the file failed). */
  close(): Promise<void>;
}

/** Runs body with the server stopped; whatever happens, it runs again afterwards. */
export async function withNatsDown(nats: NatsServer, body: () => Promise<void>): Promise<void> {
  await nats.stop();
  try {
    await body();
  } finally {
    if (nats.pid === undefined) await nats.restart();
  }
}

const LISTENING = /Listening for client connections on [^\s]+:(\d+)/;

/**
 * A real nats-server with JetStream on a loopback port it picks itself (`-p -1`, reported in its
 * log, so no other process can take the port between choosing and binding it) and a private
 * store directory, from the project's tool cache. Its output goes to an in-memory ring buffer
 * (printed when a test fails) and to `nats-server.log` in the store directory.
 */
export interface StartNatsOptions {
  storeDir?: string;
  graceMs?: number;
  /** A port to listen on (e.g. one a runtime was already told about); default one the server picks. */
  port?: number;
  /** Extra nats-server configuration (e.g. an `authorization` block), given with `-c`. */
  config?: string;
  /** Connection options (credentials) for the readiness check, when `config` requires them. */
  connect?: Partial<ConnectionOptions>;
  /** The address to listen on: loopback by default, or another address of this machine (the real test node's bridge). */
  host?: string;
  /** How long a start may take until the server listens and accepts a client (default 20 s; a large store loads first). */
  startTimeoutMs?: number;
}

export async function startNats(opts: StartNatsOptions = {}): Promise<NatsServer> {
  const host = opts.host ?? "127.0.0.1";
  const bin = process.env.IFP_NATS_SERVER ?? toolPath("nats-server");
  const ownDir = opts.storeDir === undefined;
  const storeDir = opts.storeDir ?? tempDir("ifp-nats-");
  mkdirSync(storeDir, { recursive: true });
  let port = opts.port ?? -1;
  const configArgs: string[] = [];
  if (opts.config !== undefined) {
    const file = join(storeDir, "nats.conf");
    writeFileSync(file, opts.config);
    configArgs.push("-c", file);
  }
  let server: ManagedProcess | undefined;

  const startOnce = async (): Promise<ManagedProcess> => {
    const p = spawnProcess(
      "nats-server",
      bin,
      ["-a", host, "-p", String(port), "-js", "-sd", storeDir, "--no_advertise", ...configArgs],
      {
        logFile: join(storeDir, "nats-server.log"),
      },
    );
    server = p;
    const failed = p.exited.then((e) => {
      throw new Error(`nats-server ${describeExit(e)}:\n${p.log().slice(-4000)}`);
    });
    failed.catch(() => {});
    try {
      const listening = waitFor(
        "nats-server to report its port",
        () => Number(LISTENING.exec(p.log())?.[1] ?? 0) || undefined,
        opts.startTimeoutMs ?? 20_000,
        25,
      );
      listening.catch(() => {});
      const bound = await Promise.race([failed, listening]);
      const accepting = waitFor(
        "nats-server to accept connections",
        async () => {
          const nc = await connect({ servers: `${host}:${bound}`, timeout: 500, reconnect: false, ...opts.connect });
          await nc.close();
          return true;
        },
        opts.startTimeoutMs ?? 20_000,
        50,
      );
      accepting.catch(() => {});
      await Promise.race([failed, accepting]);
      if (p.exit) await failed;
      port = bound;
      return p;
    } catch (err) {
      await p.stop({ graceMs: 2_000 });
      throw err;
    }
  };

  const start = async () => {
    // A restart must keep the port the clients know; should another process hold it for a
    // moment, retry rather than fail at once.
    for (let attempt = 1; ; attempt++) {
      try {
        await startOnce();
        return;
      } catch (err) {
        const inUse = /address already in use/i.test((err as Error).message);
        if (!inUse || port === -1 || attempt >= 10) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  };

  const stop = async () => {
    const p = server;
    server = undefined;
    await p?.stop({ graceMs: opts.graceMs ?? 10_000 });
  };

  try {
    await start();
  } catch (err) {
    if (ownDir) releaseDir(storeDir);
    throw err;
  }
  return {
    url: `nats://${host}:${port}`,
    port,
    storeDir,
    get pid() {
      return server?.exit ? undefined : server?.pid;
    },
    log: () => server?.log() ?? "",
    stop,
    async restart() {
      await stop();
      await start();
    },
    async close() {
      await stop();
      if (existsSync(storeDir)) releaseDir(storeDir);
    },
  };
}

// ---- A JetStream cluster on loopback ----

const MONITOR = /Starting http monitor on [^\s]+:(\d+)/;

/** The monitoring endpoint's JSON (`/healthz`, `/jsz`), or undefined when it does not answer in time. */
async function monitorJson(port: number, path: string): Promise<{ status: number; body: any } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2_000) });
    return { status: res.status, body: await res.json().catch(() => undefined) };
  } catch {
    return undefined;
  }
}

export interface NatsCluster {
  /** The nodes, each a NatsServer of its own (own store, client port, cluster port). */
  nodes: NatsServer[];
  /** Their `server_name`s, as JetStream reports them (stream leaders, replicas). */
  names: string[];
  /** Every node's client URL, comma separated (what a runtime's `--nats` takes). */
  url: string;
  /** The node with this `server_name`, by index; -1 when none. */
  indexOf(serverName: string | undefined): number;
  /** kill -9 of node `i`; resolves once the process is gone. Its store is kept. */
  kill(i: number): Promise<void>;
  /** Start node `i` again on its ports and store; resolves once it is healthy (JetStream caught up). */
  restart(i: number, timeoutMs?: number): Promise<void>;
  /**
   * Node `i` lost for good: killed (when running) and its store deleted, and a new server started
   * in its place, on its client and cluster ports and an empty store, with a `server_name` never
   * used before (or, `sameName`, the lost one's: a StatefulSet's pod given a new volume). Resolves
   * once the new server listens; until a lost server of another name is removed from the
   * JetStream cluster (`$JS.API.SERVER.REMOVE`), the cluster counts one peer more. Returns the
   * lost server's name.
   */
  replace(i: number, sameName?: boolean): Promise<string>;
  /**
   * Until every running node answers `/healthz` (JetStream enabled, its streams and consumers
   * current) and sees the same JetStream meta leader among all `size` peers.
   */
  ready(timeoutMs?: number): Promise<void>;
  /** The JetStream meta leader's `server_name` as node `i` (or the first running node) sees it. */
  metaLeader(i?: number): Promise<string | undefined>;
  /** How many routes node `i` has to the others now (its monitoring port's /routez). */
  routes(i: number): Promise<number>;
  /** Every node's log, headed by its name. */
  log(): string;
  /** Stop every node and delete the stores (kept when a test of the file failed). */
  close(): Promise<void>;
}

export interface StartNatsClusterOptions {
  /** Number of nodes (default 3). */
  size?: number;
  graceMs?: number;
  /** Extra nats-server configuration for every node. */
  config?: string;
  /** Extra configuration inside every node's `cluster` block (e.g. a `tls` block for the routes). */
  clusterConfig?: string;
  /**
   * Extra configuration of node `i` alone, given the store directory it will have (e.g. operator
   * mode with a resolver directory of the node's own, `serverConfig`).
   */
  nodeConfig?: (i: number, storeDir: string) => string | Promise<string>;
  /** Connection options (credentials) for each node's readiness check, when the config requires them. */
  connect?: Partial<ConnectionOptions>;
  /** How long each node's start may take (startNats). */
  startTimeoutMs?: number;
  /**
   * Wait for the cluster to form before resolving (default true). False for a cluster that is
   * meant not to form: the test waits for the event that shows why, not for a timeout.
   */
  waitReady?: boolean;
}

/**
 * A JetStream cluster of real nats-servers on loopback (three by default): each node has its own
 * store directory, client port (one it picks), cluster port with routes to the others, distinct
 * `server_name` and an HTTP monitoring port (one it picks, read from its log). Resolves once the
 * cluster has a JetStream meta leader known to every node. Each node is a `startNats` server, so
 * its process is accounted for (bounded teardown, logs printed when a test fails).
 */
export async function startNatsCluster(opts: StartNatsClusterOptions = {}): Promise<NatsCluster> {
  const size = opts.size ?? 3;
  const clusterName = `ifp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const names = Array.from({ length: size }, (_, i) => `n${i}`);
  let nodes: NatsServer[] = [];
  let routePorts: number[] = [];
  let storeDirs: (string | undefined)[] = [];
  const config = async (i: number) =>
    [
      `server_name: ${names[i]}`,
      `http: "127.0.0.1:-1"`,
      `cluster {`,
      `  name: ${clusterName}`,
      `  listen: 127.0.0.1:${routePorts[i]}`,
      `  routes: [${routePorts
        .filter((_, j) => j !== i)
        .map((p) => `nats-route://127.0.0.1:${p}`)
        .join(", ")}]`,
      opts.clusterConfig ?? "",
      `}`,
      opts.config ?? "",
      (await opts.nodeConfig?.(i, storeDirs[i]!)) ?? "",
    ].join("\n");
  // A cluster port is chosen before the server binds it: should another process take one in
  // between, start the cluster again on other ports (a few times at most).
  for (let attempt = 1; ; attempt++) {
    routePorts = await Promise.all(names.map(() => freePort()));
    storeDirs = names.map(() => (opts.nodeConfig ? tempDir("ifp-nats-") : undefined));
    const started = await Promise.allSettled(
      names.map(async (_, i) =>
        startNats({
          config: await config(i),
          graceMs: opts.graceMs,
          startTimeoutMs: opts.startTimeoutMs,
          ...(storeDirs[i] ? { storeDir: storeDirs[i] } : {}),
          ...(opts.connect ? { connect: opts.connect } : {}),
        }),
      ),
    );
    nodes = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    // A store directory made here for a node that did not start is not its server's to delete.
    started.forEach((s, i) => {
      if (s.status === "rejected" && storeDirs[i]) releaseDir(storeDirs[i]);
    });
    const failure = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (!failure) break;
    await Promise.all(nodes.map((n) => n.close()));
    if (attempt >= 3 || !/address already in use/i.test(String((failure.reason as Error)?.message)))
      throw failure.reason;
  }

  // The monitoring port of each node's current process, read from its log once.
  const monitorPorts = new Map<number, { pid: number; port: number }>();
  const monitorPort = (i: number): number | undefined => {
    const pid = nodes[i]!.pid;
    if (pid === undefined) return undefined;
    const known = monitorPorts.get(i);
    if (known?.pid === pid) return known.port;
    const port = Number(MONITOR.exec(nodes[i]!.log())?.[1] ?? 0);
    if (!port) return undefined;
    monitorPorts.set(i, { pid, port });
    return port;
  };
  let replaced = 0;
  const kill = async (i: number) => {
    const node = nodes[i]!;
    const pid = node.pid;
    if (pid === undefined) return;
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // It ended in between.
    }
    await waitFor(`nats-server ${names[i]} to be gone after SIGKILL`, () => node.pid === undefined, 10_000, 20);
  };
  const running = () => nodes.flatMap((n, i) => (n.pid !== undefined ? [i] : []));
  const metaLeader = async (i = running()[0] ?? 0): Promise<string | undefined> => {
    const port = monitorPort(i);
    if (!port) return undefined;
    const jsz = await monitorJson(port, "/jsz");
    return jsz?.body?.meta_cluster?.leader || undefined;
  };
  /** Node `i` healthy, and the meta leader it sees, with the cluster size it sees. */
  const nodeReady = async (i: number): Promise<string | undefined> => {
    const port = monitorPort(i);
    if (!port) return undefined;
    const health = await monitorJson(port, "/healthz");
    if (health?.status !== 200) return undefined;
    const meta = (await monitorJson(port, "/jsz"))?.body?.meta_cluster;
    return meta?.leader && meta.cluster_size === size ? String(meta.leader) : undefined;
  };
  const ready = async (timeoutMs = 60_000) => {
    await waitFor(
      `the NATS cluster's nodes ${running()
        .map((i) => names[i])
        .join(", ")} to be healthy and agree on a JetStream meta leader`,
      async () => {
        const leaders = await Promise.all(running().map(nodeReady));
        return leaders.length > 0 && leaders.every((l) => l !== undefined && l === leaders[0]);
      },
      timeoutMs,
      250,
    );
  };

  try {
    if (opts.waitReady !== false) await ready();
  } catch (err) {
    await Promise.all(nodes.map((n) => n.close()));
    throw err;
  }
  return {
    nodes,
    names,
    url: nodes.map((n) => n.url).join(","),
    indexOf: (name) => (name === undefined ? -1 : names.indexOf(name)),
    kill,
    async restart(i, timeoutMs = 60_000) {
      await nodes[i]!.restart();
      await waitFor(
        `nats-server ${names[i]} to be healthy again`,
        async () => (await nodeReady(i)) !== undefined,
        timeoutMs,
        250,
      );
    },
    async replace(i, sameName = false) {
      const lost = names[i]!;
      const port = nodes[i]!.port;
      await kill(i);
      await nodes[i]!.close();
      if (!sameName) names[i] = `n${size + replaced++}`;
      storeDirs[i] = opts.nodeConfig ? tempDir("ifp-nats-") : undefined;
      nodes[i] = await startNats({
        config: await config(i),
        port,
        graceMs: opts.graceMs,
        startTimeoutMs: opts.startTimeoutMs,
        ...(storeDirs[i] ? { storeDir: storeDirs[i] } : {}),
        ...(opts.connect ? { connect: opts.connect } : {}),
      });
      return lost;
    },
    ready,
    metaLeader,
    async routes(i) {
      const port = monitorPort(i);
      const routez = port ? await monitorJson(port, "/routez") : undefined;
      if (routez?.status !== 200) throw new Error(`nats-server ${names[i]}'s /routez did not answer`);
      return Number(routez.body?.num_routes ?? 0);
    },
    log: () => nodes.map((n, i) => `──── ${names[i]} ────\n${n.log()}`).join("\n"),
    async close() {
      await Promise.all(nodes.map((n) => n.close()));
    },
  };
}
