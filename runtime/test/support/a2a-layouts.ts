// The NATS under the A2A tests, on the layout a test file runs them on (runtime/src/nats/layout.ts):
// a plain nats-server for the per-agent layout, or for the isolated one an install of it as the
// operator makes it (nats-server in operator mode, the tenant's data account with its shared
// streams and buckets, the Agent's own account with its imports and consumers:
// runtime/bench/scale-isolated.ts), the runtime connecting with the credential the operator
// issues it. The A2A test files run on the per-agent layout; their `.isolated` twins load them
// again (a module of its own: a query on its path) on the isolated one (onLayout).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll } from "vitest";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { localhostTls } from "../../../e2e/support/tls.ts";
import { IsolatedInstall } from "../../bench/scale-isolated.ts";
import { agentNames } from "../../src/contract/agent-names.ts";
import { SHARED_BUCKETS, sharedAgentNames } from "../../src/contract/shared-layout.ts";
import type { NatsLayoutName } from "../../src/nats/layout.ts";
import type { Tls } from "./agent-harness.ts";
import { consumerSettled } from "./probes.ts";
import { tempDir } from "./fixtures.ts";

let layout: NatsLayoutName = "per-agent";

/**
 * The tests `load` registers, on the layout `name`: each test file's withLayoutNatsAndTls() takes
 * the layout as its module is loaded.
 */
export async function onLayout(name: NatsLayoutName, load: () => Promise<unknown>): Promise<void> {
  layout = name;
  try {
    await load();
  } finally {
    layout = "per-agent";
  }
}

export interface LayoutNats {
  readonly layout: NatsLayoutName;
  readonly url: string;
  /** The runtime's arguments for the Agent `agentId` on the layout (its account made first on the isolated one). */
  runtimeArgs(agentId: string): Promise<string[]>;
  /** runAgent()'s options for the Agent `agentId` on the layout. */
  runAgentNats(agentId: string): Promise<{ natsUrl: string; natsLayout?: NatsLayoutName; natsCredsFile?: string }>;
  /** Every message stored in the Agent's inbox was handed to its application and acknowledged. */
  handOffsSettled(agentId: string): Promise<boolean>;
  /** The Agent's A2A task bucket as its own keys: `t.…`, `p.…` (a connection of the test's, closed by `close`). */
  tasks(agentId: string): Promise<{ kv: KV; keys(filter: string): Promise<string[]>; close(): Promise<void> }>;
  /** The Agent's account on the isolated layout (its subjects carry it). */
  account(agentId: string): string | undefined;
  /**
   * A connection of the Agent `agentId`'s account (isolated only): with its runtime's credential as
   * the operator issues it, or as a user of that account allowed every subject.
   */
  connectAs(agentId: string, as: "runtime" | "any user"): Promise<NatsConnection>;
  /** The nats-server stopped and started again on its port, its store kept. */
  restart(): Promise<void>;
}

let current: LayoutNats | undefined;
/** The NATS of the tests running now (set before they run). */
export const layoutNats = (): LayoutNats => current!;

const TENANT = "a2a";

/** The NATS of the file's layout, and TLS, for its tests (started before them, stopped after). */
export function withLayoutNatsAndTls(set: (nats: LayoutNats, tls: Tls) => void): void {
  let server: NatsServer | undefined;
  let install: IsolatedInstall | undefined;
  const chosen = layout;
  beforeAll(async () => {
    const tls = await localhostTls();
    if (chosen === "per-agent") {
      server = await startNats();
      current = perAgent(server);
    } else {
      install = await IsolatedInstall.start({
        http: "",
        jetstream: "jetstream { max_file_store: 1TB }\n",
        graceMs: 2_000,
        startTimeoutMs: 30_000,
      });
      current = isolated(install);
    }
    set(current, tls);
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    await install?.close();
  });
}

function perAgent(server: NatsServer): LayoutNats {
  const url = server.url;
  return {
    layout: "per-agent",
    url,
    runtimeArgs: async () => [],
    runAgentNats: async () => ({ natsUrl: url }),
    async handOffsSettled(agentId) {
      const nc = await connect({ servers: url });
      try {
        const n = agentNames(agentId);
        return await consumerSettled(await jetstreamManager(nc), n.inboxStream, n.handlerConsumer);
      } finally {
        await nc.close();
      }
    },
    async tasks(agentId) {
      const nc = await connect({ servers: url });
      const kv = await new Kvm(nc).open(agentNames(agentId).a2aTasksBucket);
      return { kv, keys: (filter) => keysOf(kv, filter), close: () => nc.close() };
    },
    account: () => undefined,
    connectAs: () => Promise.reject(new Error("the per-agent layout has no data account")),
    restart: () => server.restart(),
  };
}

function isolated(install: IsolatedInstall): LayoutNats {
  const accounts = new Map<string, string>();
  const made = new Map<string, Promise<string>>();
  const dir = tempDir("ifp-a2a-isolated-");
  const agent = (agentId: string) => {
    let p = made.get(agentId);
    if (!p) {
      // Its handler's consumer as the operator makes it for a handler timeout of 3 s (the tests' applications answer at once).
      p = install.makeAgent(`${TENANT}/${agentId}`, { name: "" }, 3_000).then((a) => {
        accounts.set(agentId, a);
        return a;
      });
      made.set(agentId, p);
    }
    return p;
  };
  const credsFile = async (agentId: string) => {
    await agent(agentId);
    const file = join(dir, `${agentId}.creds`);
    writeFileSync(file, await install.runtimeCreds(`${TENANT}/${agentId}`, agentId), { mode: 0o600 });
    return file;
  };
  return {
    layout: "isolated",
    url: install.server.url,
    runtimeArgs: async (agentId) => ["--nats-layout", "isolated", "--nats-creds", await credsFile(agentId)],
    runAgentNats: async (agentId) => ({
      natsUrl: install.server.url,
      natsLayout: "isolated",
      natsCredsFile: await credsFile(agentId),
    }),
    async handOffsSettled(agentId) {
      const account = await agent(agentId);
      const n = sharedAgentNames(account);
      return consumerSettled(await install.operatorOf(TENANT), n.inboxStream, n.handlerConsumer);
    },
    async tasks(agentId) {
      const account = await agent(agentId);
      const nc = await install.tenantClient(TENANT);
      const kv = await new Kvm(jetstream(nc)).open(SHARED_BUCKETS.a2aTasks);
      const own = `${account}.`;
      const view: KV = new Proxy(kv, {
        get(target, prop) {
          if (prop === "get") return (k: string) => target.get(`${own}${k}`);
          if (prop === "put") return (k: string, v: string) => target.put(`${own}${k}`, v);
          return Reflect.get(target, prop);
        },
      });
      return {
        kv: view,
        keys: async (filter) => (await keysOf(kv, `${own}${filter}`)).map((k) => k.slice(own.length)),
        close: () => nc.close(),
      };
    },
    account: (agentId) => accounts.get(agentId),
    restart: () => install.server.restart(),
    async connectAs(agentId, as) {
      await agent(agentId);
      if (as === "any user") return install.anyUserOfAgent(`${TENANT}/${agentId}`);
      const { js } = await install.runtimeClient(`${TENANT}/${agentId}`);
      return (js as unknown as { nc: NatsConnection }).nc;
    },
  };
}

async function keysOf(kv: KV, filter: string): Promise<string[]> {
  const out: string[] = [];
  for await (const k of await kv.keys(filter)) out.push(k);
  return out;
}
