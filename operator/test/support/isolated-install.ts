// An install of the isolated NATS layout for tests that restart its parts: the operator
// (`--nats-layout isolated`) against a real API server and the nats-server(s) `nats` starts in
// operator mode (serverConfig), Agents applied as YAML, and their runtimes run exactly as the
// operator rendered them (their Deployment's arguments and environment, Secrets and ConfigMaps as
// files), on loopback, started again on the same ports. Messages are signed by alice and posted
// over HTTPS; the tenant's data account is seen as a user allowed everything there.
import { rmSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { startNatsCluster, type NatsCluster } from "../../../e2e/support/nats.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../e2e/support/materialize.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { SHARED_STREAMS } from "../../../runtime/src/contract/shared-layout.ts";
import { startHandler } from "../../../runtime/test/support/agent-harness.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";
import {
  accepted,
  acceptsAgainWithin,
  applicationDown,
  everyHandedOnOnce,
  handedOnSoFar,
  type Post,
} from "../../../runtime/test/support/hand-offs.ts";
import { consumerSettled } from "../../../runtime/test/support/probes.ts";
import type { ManagerOptions } from "../../src/commands/manager.ts";
import {
  CredentialIssuer,
  generateKeys,
  KEY_FIELDS,
  serverConfig,
  type NatsKeys,
} from "../../src/concerns/nats/credential-issuer.ts";
import {
  getOrAbsent,
  kubectlOrError,
  natsAccountOperator,
  perTest,
  tenantCreds,
  until as waitUntil,
  untilRuntimeReady,
} from "./helpers.ts";

/** Waits long enough for a reconcile on a loaded machine. */
export const until = <T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 120_000,
  intervalMs?: number,
) => waitUntil(what, probe, timeoutMs, intervalMs);

/** A runtime of the install, as rendered, on ports of its own that its restarts keep. */
export interface IsolatedRuntime {
  url: string;
  ca: string;
  post: Post;
  /** Start it (again) from what the operator renders now; resolves once it listens. */
  start(): Promise<void>;
  stop(): Promise<void>;
  ready(timeoutMs?: number): Promise<true>;
  /** What its `/readyz` answers now. */
  readyz(): Promise<number>;
  output(): string;
}

/**
 * The install's NATS as three nats-servers in a cluster in operator mode, each with a full
 * resolver of its own (`isolatedInstall`'s `nats`); `set` is given the cluster once started.
 */
export function clusteredNats(set: (cluster: NatsCluster) => void) {
  return (keys: NatsKeys) => {
    let cluster: NatsCluster | undefined;
    return {
      async start() {
        cluster = await startNatsCluster({
          connect: { authenticator: credsAuthenticator(await CredentialIssuer.fromKeys(keys).systemCreds()) },
          nodeConfig: (_, storeDir) => serverConfig(keys, { resolverDir: join(storeDir, "jwt") }),
          startTimeoutMs: 60_000,
        });
        set(cluster);
      },
      stop: async () => cluster?.close(),
      url: () => cluster!.url,
    };
  };
}

/** An Agent of an install as `counted` makes it. */
export type CountedAgent = Awaited<ReturnType<ReturnType<typeof isolatedInstall>["counted"]>>;

/**
 * The runtime, then NATS: messages handed on, the runtime started again, more accepted, the
 * application down, more accepted (they wait in the namespace's inbox, across what follows),
 * `natsGoneAndBack` (NATS killed and started again); then the runtime accepts again and is Ready,
 * and every message answered 202 is handed on exactly once. `withinMs` bounds each wait for the
 * hand-offs: on a cluster, a message the consumer had sent to the stopped runtime comes again
 * only after its acknowledgement wait (the handler timeout and 30 s).
 */
export async function runtimeThenNats(
  a: CountedAgent,
  natsGoneAndBack: () => Promise<void>,
  withinMs?: number,
): Promise<void> {
  const ids = await a.accepted(5);
  await handedOnSoFar(a.handler, ids);
  await a.runtime.start();
  await a.runtime.ready();
  ids.push(...(await a.accepted(5)));
  await applicationDown(a.handler, ids, withinMs);
  ids.push(...(await a.accepted(5)));
  await natsGoneAndBack();
  ids.push(await a.acceptsAgain());
  await a.runtime.ready();
  await a.handler.up();
  await a.everyHandedOnOnce(ids, withinMs);
}

export function isolatedInstall(opts: {
  namespaces: string[];
  /** The NATS of the install, started with the control plane and stopped with it, in operator mode for `keys`. */
  nats: (keys: NatsKeys, dir: string) => { start(): Promise<void>; stop(): Promise<void>; url(): string };
  manager?: Partial<ManagerOptions>;
}) {
  const keys = generateKeys();
  const issuer = CredentialIssuer.fromKeys(keys);
  const alice = identity("alice-agent");
  const dir = tempDir("ifp-isolated-install-");
  const nats = opts.nats(keys, dir);
  const open: NatsConnection[] = [];
  const runtimes: IsolatedRuntime[] = [];
  const handlers: Awaited<ReturnType<typeof startHandler>>[] = [];
  const operator = natsAccountOperator({
    namespace: opts.namespaces[0]!,
    keys: () => ({
      accountKey: issuer.accountKey,
      fields: Object.fromEntries(Object.entries(KEY_FIELDS).map(([k, f]) => [f, keys[k as keyof typeof keys]])),
    }),
    alongside: { start: () => nats.start(), stop: () => nats.stop() },
    natsUrl: () => nats.url(),
    settings: { allowedDnsNames: ["localhost"], clusterNetworks: ["127.0.0.0/8"] },
    manager: { natsLayout: "isolated", watchNamespaces: opts.namespaces, summaryIntervalMs: 1_000, ...opts.manager },
  });
  const cp = () => operator.cp();
  beforeAll(() => {
    for (const ns of opts.namespaces.slice(1)) cp().kubectl(["create", "namespace", ns]);
  });
  afterAll(async () => {
    await Promise.all(runtimes.map((r) => r.stop()));
    await Promise.all(handlers.map((h) => h.close().catch(() => {})));
    for (const nc of open) await nc.close().catch(() => {});
    releaseDir(dir);
  });
  perTest(() =>
    [
      ...["operator log:", ...operator.log.lines().slice(-80)],
      `agents:\n${kubectlOrError(cp(), ["get", "agents", "-A", "-o", "wide"])}`,
      ...runtimes.map((r) => `runtime log:\n${r.output().slice(-4000)}`),
    ].join("\n"),
  );

  const get = (ns: string, kind: string, name: string) => getOrAbsent(cp(), ["-n", ns, "get", kind, name]);
  const accountOf = (ns: string, name: string) => issuer.accountOf(get(ns, "agent", name).metadata.uid);
  /** A connection that reconnects for ever (the servers are restarted under it). */
  const connection = async (creds: Uint8Array) => {
    const nc = await connect({
      servers: nats.url().split(","),
      authenticator: credsAuthenticator(creds),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      // An account the operator is pushing again (a server with an empty store) refuses for a moment.
      ignoreAuthErrorAbort: true,
    });
    open.push(nc);
    return nc;
  };

  /** The tenant's data account as a user allowed everything there sees it (a connection that reconnects). */
  const tenantView = async (ns: string): Promise<JetStreamManager> => {
    const creds = await tenantCreds(issuer, keys.signing, ns);
    return jetstreamManager(await connection(new TextEncoder().encode(creds)), { checkAPI: false });
  };

  return {
    cp,
    log: operator.log,
    keys,
    issuer,
    alice,
    get,
    accountOf,
    connection,
    tenantView,
    /** Whether the resolver holds an account. */
    async onResolver(account: string): Promise<boolean> {
      const system = await connection(await issuer.systemCreds());
      try {
        return (
          (await system.request(`$SYS.REQ.ACCOUNT.${account}.CLAIMS.LOOKUP`, "", { timeout: 5_000 })).data.length > 0
        );
      } finally {
        await system.close();
      }
    },
    /** An Agent of alice's peers, with spec.handler at `handlerUrl`. */
    applyAgent(ns: string, name: string, handlerUrl: string) {
      cp().kubectl(
        ["apply", "-f", "-"],
        `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${ns}}
spec:
  agentId: ${name}-agent
  capabilities:
    - {name: chat.message, description: Messages}
  tls: {dnsNames: [localhost]}
  handler: {url: "${handlerUrl}", timeout: 2s}
  peers:
    - ${JSON.stringify(peerOf(alice))}
`,
      );
    },
    /** Until the operator made the Agent's consumers; its account key. */
    async consumersMade(ns: string, name: string): Promise<string> {
      // The data account is made with the namespace's first Agent: a view of it once it is there.
      const view = await until(`the data account of ${ns}`, () => tenantView(ns).catch(() => undefined));
      return until(`${name}'s consumers`, async () => {
        const account = get(ns, "agent", name) && accountOf(ns, name);
        return account &&
          (await view.consumers.info(SHARED_STREAMS.inbox, account).catch(() => undefined)) &&
          (await view.consumers.info(SHARED_STREAMS.outbox, account).catch(() => undefined))
          ? account
          : undefined;
      });
    },
    /**
     * Messages from alice posted to `to` one after another until stopped, each sent again until
     * it is answered 202 (as a sender does: a 503 is "not known to be stored"); the ids answered 202.
     */
    flow(post: Post, to: string) {
      const ids: string[] = [];
      let stopped = false;
      const running = (async () => {
        while (!stopped) {
          const m = signed(alice, to);
          await waitFor(
            `${to} to accept a message`,
            async () => (await post(m).catch(() => undefined))?.status === 202,
            120_000,
            100,
          );
          ids.push(m.headers.message_id);
        }
      })();
      return {
        ids,
        /** Until `n` more messages than now are accepted. */
        more: (n: number) => {
          const want = ids.length + n;
          return until(`${n} more messages accepted by ${to}`, () => ids.length >= want);
        },
        stop: async () => {
          stopped = true;
          await running;
          return ids;
        },
      };
    },
    /** An Agent with an application of its own (closed with the install), its runtime running as rendered and Ready. */
    async agent(ns: string, name: string) {
      const handler = await startHandler();
      handlers.push(handler);
      this.applyAgent(ns, name, handler.url);
      const account = await this.consumersMade(ns, name);
      const runtime = await this.runtime(ns, name);
      await runtime.ready();
      return { name, ns, handler, account, runtime, view: await tenantView(ns), to: `${name}-agent` };
    },
    /**
     * An Agent as agent() makes it, and what restart tests count of it: `n` messages accepted,
     * one accepted again once it can be, and every accepted message handed on exactly once.
     */
    async counted(ns: string, name: string) {
      const a = await this.agent(ns, name);
      return {
        ...a,
        accepted: (n: number) => accepted(a.runtime.post, alice, a.to, n),
        acceptsAgain: async () => (await acceptsAgainWithin(a.runtime.post, alice, a.to, 60_000)).id,
        everyHandedOnOnce: (ids: string[], withinMs = 90_000) =>
          everyHandedOnOnce(
            a.handler,
            ids,
            alice,
            () => consumerSettled(a.view, SHARED_STREAMS.inbox, a.account),
            withinMs,
          ),
      };
    },
    /** The runtime of Agent `name`, as the operator rendered it, on ports of its own. */
    async runtime(ns: string, name: string): Promise<IsolatedRuntime> {
      await until(`${name}'s Deployment`, () => get(ns, "deployment", name));
      await until(`${name}'s credential`, () => get(ns, "secret", `${name}-nats`));
      const port = await freePort();
      const loopback = onLoopback(port, await freePort());
      const url = `https://localhost:${port}`;
      const ca = get(ns, "configmap", `${name}-trust`).data["ca.crt"] as string;
      let proc: LocalRuntime | undefined;
      const r: IsolatedRuntime = {
        url,
        ca,
        post: (m) =>
          httpsRequest(`${url}/.well-known/agent/inbox`, {
            method: "POST",
            headers: { "content-type": "application/json; charset=utf-8", accept: "application/json" },
            body: JSON.stringify(m),
            ca,
          }),
        async start() {
          await proc?.stop();
          rmSync(join(dir, ns, name), { recursive: true, force: true });
          proc = runDeploymentLocally(cp(), ns, name, join(dir, ns), {
            ...loopback,
            rewriteArg: (a) => (a.startsWith("--nats=") ? `--nats=${nats.url()}` : loopback.rewriteArg(a)),
          });
          await proc.listening(120_000);
        },
        stop: async () => proc?.stop(),
        ready: (timeoutMs = 120_000) => untilRuntimeReady(name, url, ca, timeoutMs),
        readyz: async () => (await httpsRequest(`${url}/readyz`, { ca })).status,
        output: () => proc?.output() ?? "",
      };
      runtimes.push(r);
      await r.start();
      return r;
    },
  };
}
