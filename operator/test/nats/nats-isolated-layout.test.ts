// The operator on the isolated NATS layout (`--nats-layout isolated`, operator/src/concerns/nats/data-accounts.ts)
// against a real API server and a real nats-server in operator mode, configured by serverConfig()
// as the install's is: Agents in three namespaces, each namespace a tenant whose data account the
// operator makes. Bob's runtime, started exactly as the operator rendered it (its Deployment's
// arguments and environment, its Secrets and ConfigMaps as files), takes a signed message into
// its tenant's shared inbox and hands it to its application, and its status counts it. The
// credentials the operator issues other Agents cannot publish into bob's inbox, pull from his
// consumer or make a stream; an Agent named to look like bob's subjects gets its own. A tenant at
// its data account's limit refuses only its own writes; a tenant whose limit no longer fits the
// store is told so in its Agents' status until a namespace's last Agent goes and frees its share.
// An Agent with spec.a2a becomes Ready and serves a task, kept in its tenant's shared task bucket
// under its own account key; a deleted Agent's consumers and account go with it.
import { randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpsRequest } from "../../../e2e/support/https.ts";
import { onLoopback, runDeploymentLocally, type LocalRuntime } from "../../../e2e/support/materialize.ts";
import type { NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { releaseDir, tempDir } from "../../../e2e/support/process.ts";
import { agentInboxPrefix } from "../../../runtime/src/contract/nats-permissions.ts";
import {
  SHARED_BUCKETS,
  SHARED_STREAMS,
  sharedAgentConsumers,
  sharedAgentPermissions,
  sharedStreamConfigs,
} from "../../../runtime/src/contract/shared-layout.ts";
import { startHandler } from "../../../runtime/test/support/agent-harness.ts";
import { identity, peerOf, signed } from "../../../runtime/test/support/fixtures.ts";
import { CredentialIssuer, credsClaims, generateKeys } from "../../src/concerns/nats/credential-issuer.ts";
import { dataAccountOf } from "../../src/concerns/nats/shared-accounts.ts";
import {
  accountSecretOf,
  kubectlOrError,
  natsAccountOperator,
  operatorModeNats,
  perTest,
  runtimeConnection,
  until as waitUntil,
  untilRuntimeReady,
} from "../support/helpers.ts";

const MIB = 1024 * 1024;
/** Waits long enough for a reconcile on a loaded machine (each still ends before its test's timeout). */
const until = <T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 120_000,
  intervalMs?: number,
) => waitUntil(what, probe, timeoutMs, intervalMs);
/** The server's store: room for two tenants' limits, not three. */
const STORE_MIB = 64;
const TENANT_MIB = 24;
const NS1 = "iso-a";
const NS2 = "iso-b";
const NS3 = "iso-c";
const keys = generateKeys();
const issuer = CredentialIssuer.fromKeys(keys);
const alice = identity("alice-agent");
let nats: NatsServer;
let system: NatsConnection;
const open: NatsConnection[] = [];
const dir = tempDir("ifp-isolated-layout-");
const running: LocalRuntime[] = [];
let handler: Awaited<ReturnType<typeof startHandler>>;

const operator = natsAccountOperator({
  namespace: NS1,
  keys: accountSecretOf(keys, issuer),
  alongside: {
    async start() {
      nats = await operatorModeNats(keys, issuer, dir, `\njetstream { max_file_store: ${STORE_MIB}MB }\n`);
    },
    stop: async () => nats?.close(),
  },
  natsUrl: () => nats.url,
  // The runtimes run on loopback, as e2e/e2e.test.ts sets them up.
  settings: { allowedDnsNames: ["localhost"], clusterNetworks: ["127.0.0.0/8"] },
  manager: {
    natsLayout: "isolated",
    natsTenantLimits: { diskBytes: TENANT_MIB * MIB, memBytes: 0 },
    watchNamespaces: [NS1, NS2, NS3],
    summaryIntervalMs: 300,
  },
});
const cp = () => operator.cp();
const get = (ns: string, kind: string, name: string) => {
  try {
    return cp().json<any>(["-n", ns, "get", kind, name]);
  } catch (err) {
    if (/NotFound/.test((err as Error).message)) return undefined;
    throw err;
  }
};
const credsIn = (ns: string, name: string) => {
  const s = get(ns, "secret", `${name}-nats`);
  return s ? Buffer.from(s.data["nats.creds"], "base64").toString("utf8") : undefined;
};
const accountOf = (ns: string, name: string) => issuer.accountOf(get(ns, "agent", name).metadata.uid);
const ready = (ns: string, name: string) =>
  get(ns, "agent", name)?.status?.conditions?.find((c: { type: string }) => c.type === "Ready");

beforeAll(async () => {
  cp().kubectl(["create", "namespace", NS2]);
  cp().kubectl(["create", "namespace", NS3]);
  system = await connect({ servers: nats.url, authenticator: credsAuthenticator(await issuer.systemCreds()) });
  open.push(system);
  handler = await startHandler();
}, 120_000);
afterAll(async () => {
  await Promise.all(running.map((r) => r.stop()));
  for (const nc of open) await nc.close().catch(() => {});
  await handler?.close();
  releaseDir(dir);
});
perTest(() =>
  [
    "operator log:",
    ...operator.log.lines().slice(-80),
    "agents:",
    kubectlOrError(cp(), ["get", "agents", "-A", "-o", "wide"]),
    ...running.flatMap((r) => [`${r.name} (runtime) log:`, r.output().slice(-4000)]),
  ].join("\n"),
);

function agentYaml(ns: string, name: string, spec = "", agentId = `${name}-agent`): string {
  return `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${ns}}
spec:
  agentId: ${agentId}
  capabilities:
    - {name: chat.message, description: Messages}
  tls: {dnsNames: [localhost]}
${spec}`;
}
const apply = (yaml: string) => cp().kubectl(["apply", "-f", "-"], yaml);

/** A connection with a credential as the operator issued it (the runtime's own, from its Secret). */
const as = (creds: string, agentId: string) => runtimeConnection(nats.url, creds, agentId, open);

/** Agent `name`'s runtime, exactly as rendered (its Deployment, Secrets and ConfigMaps), on loopback, once ready. */
async function runAsRendered(ns: string, name: string): Promise<{ url: string; ca: string }> {
  const port = await freePort();
  const metricsPort = await freePort();
  rmSync(join(dir, name), { recursive: true, force: true });
  const loopback = onLoopback(port, metricsPort);
  const r = runDeploymentLocally(cp(), ns, name, dir, {
    ...loopback,
    rewriteArg: (a) => (a.startsWith("--nats=") ? `--nats=${nats.url}` : loopback.rewriteArg(a)),
  });
  running.push(r);
  await r.listening(120_000);
  const ca = get(ns, "configmap", `${name}-trust`).data["ca.crt"] as string;
  const url = `https://localhost:${port}`;
  await untilRuntimeReady(name, url, ca);
  return { url, ca };
}

/** A user of the tenant's data account allowed everything there. */
async function tenantUser(ns: string): Promise<NatsConnection> {
  const creds = await issuer.issue(
    "test",
    { pub: [">"], sub: [">"] },
    Date.now(),
    undefined,
    dataAccountOf(keys.signing, ns),
  );
  return as(creds, "test");
}

/** The tenant's data account as a user allowed everything there sees it. */
async function tenantView(ns: string): Promise<JetStreamManager> {
  return jetstreamManager(await tenantUser(ns), { checkAPI: false });
}

/** Whether the resolver holds an account. */
const onResolver = async (account: string) =>
  (await system.request(`$SYS.REQ.ACCOUNT.${account}.CLAIMS.LOOKUP`, "", { timeout: 5_000 })).data.length > 0;

const works = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );

describe("the operator on the isolated NATS layout", () => {
  it("runs an Agent as it rendered it on its namespace's data account: a signed message reaches the application, and the status counts it", async () => {
    apply(
      agentYaml(
        NS1,
        "bob",
        `  handler: {url: "${handler.url}"}
  peers:
    - ${JSON.stringify(peerOf(alice))}
`,
      ),
    );
    apply(agentYaml(NS2, "carol"));
    const deployment = await until("bob's Deployment", () => get(NS1, "deployment", "bob"));
    expect(deployment.spec.template.spec.containers[0].args).toContain("--nats-layout=isolated");
    const bob = accountOf(NS1, "bob");
    const creds = await until("bob's credential", () => credsIn(NS1, "bob"));
    const claims = credsClaims(creds)!;
    expect(claims.issuerAccount).toBe(bob);
    const want = sharedAgentPermissions(agentInboxPrefix("bob-agent"), bob);
    expect([...claims.pub].sort()).toEqual([...want.pub].sort());
    // The tenant's streams, whatever the contract lists, and bob's consumers, in the data account.
    const t1 = await tenantView(NS1);
    const names: string[] = [];
    for await (const s of t1.streams.names()) names.push(s);
    expect(names.sort()).toEqual(
      sharedStreamConfigs()
        .map((s) => s.name)
        .sort(),
    );
    for (const c of sharedAgentConsumers(bob, { handlerTimeoutMs: 10_000, senderAckWaitMs: 1 })) {
      const info = await until(`bob's consumer on ${c.stream}`, () =>
        t1.consumers.info(c.stream, c.config.durable_name).catch(() => undefined),
      );
      expect(info.config.filter_subject).toBe(c.config.filter_subject);
    }
    // Its handler's ack wait follows spec.handler.timeout (10 s by default) as the runtime's own would.
    expect((await t1.consumers.info(SHARED_STREAMS.inbox, bob)).config.ack_wait).toBe(40_000 * 1_000_000);
    // Carol's namespace has a data account of its own.
    await until("carol's consumers", () =>
      tenantView(NS2).then((j) =>
        j.consumers.info(SHARED_STREAMS.inbox, accountOf(NS2, "carol")).catch(() => undefined),
      ),
    );
    expect(dataAccountOf(keys.signing, NS1)).not.toBe(dataAccountOf(keys.signing, NS2));
    // A namespace named like a uid is no runtime's account: the two keys are derived under labels of their own.
    expect(dataAccountOf(keys.signing, NS1)).not.toBe(issuer.accountOf(NS1));

    // Bob's runtime, exactly as rendered (its Deployment, Secrets and ConfigMaps), on loopback.
    const { url, ca } = await runAsRendered(NS1, "bob");
    const m = signed(alice, "bob-agent", {}, "Hello Bob, on the isolated layout");
    const res = await httpsRequest(`${url}/.well-known/agent/inbox`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8", accept: "application/json" },
      body: JSON.stringify(m),
      ca,
    });
    expect(res.status).toBe(202);
    await until("bob's application", () =>
      handler.received.some((h) => h.body.headers.message_id === m.headers.message_id),
    );
    // Stored in the namespace's shared inbox, and taken by bob's consumer there.
    await until("bob's consumer acknowledged it", async () => {
      const info = await t1.consumers.info(SHARED_STREAMS.inbox, bob);
      return info.delivered.consumer_seq >= 1 && info.num_ack_pending === 0 && info.num_pending === 0;
    });
    const summary = await until("bob's summary", () => {
      const s = get(NS1, "agent", "bob")?.status?.summary;
      return s?.acceptedLastHour >= 1 && s.backlog === 0 ? s : undefined;
    });
    expect(summary).toMatchObject({ acceptedLastHour: 1, backlog: 0 });
  }, 300_000);

  it("gives the credentials it issues nothing of another Agent's: no publish into its inbox, no pull from its consumer, no stream", async () => {
    // An Agent of the same namespace, and one of another namespace under bob's name: on the
    // per-agent layout the namespace keeps their names apart, here nothing of a name is in a subject.
    apply(agentYaml(NS1, "mallory"));
    apply(agentYaml(NS2, "bob", "", "other-bob-agent"));
    const bob = accountOf(NS1, "bob");
    const t1 = await tenantView(NS1);
    const t2 = await tenantView(NS2);
    const crafted = await until("the crafted Agent's consumer", async () => {
      const a = get(NS2, "agent", "bob") && accountOf(NS2, "bob");
      return a && (await t2.consumers.info(SHARED_STREAMS.inbox, a).catch(() => undefined)) ? a : undefined;
    });
    // Its subjects, consumers and keys are its own account key's, whatever its name says.
    expect(crafted).not.toBe(bob);
    expect((await t2.consumers.info(SHARED_STREAMS.inbox, crafted)).config.filter_subject).toBe(
      `ifp.inbox.${crafted}.msg.>`,
    );
    const before = (await t1.consumers.info(SHARED_STREAMS.inbox, bob)).num_pending;
    const attackers = [
      ["mallory", NS1, await until("mallory's credential", () => credsIn(NS1, "mallory"))],
      ["other-bob", NS2, await until("the other bob's credential", () => credsIn(NS2, "bob"))],
      ["carol", NS2, await until("carol's credential", () => credsIn(NS2, "carol"))],
      // Not a credential the operator issues: any user of the account it made, allowed every subject.
      [
        "mallory",
        NS1,
        await issuer.issue("any", { pub: [">"], sub: [">"] }, Date.now(), undefined, accountOf(NS1, "mallory")),
      ],
    ] as const;
    for (const [name, , creds] of attackers) {
      const nc = await as(creds, `${name}-agent`);
      const js = jetstream(nc);
      expect(
        await works(js.publish(`ifp.inbox.${bob}.msg.forged.x`, "forged", { timeout: 1_500 })),
        `${name} publishes into bob's inbox`,
      ).toBe(false);
      const pulled = await js.consumers
        .get(SHARED_STREAMS.inbox, bob)
        .then((c) => c.next({ expires: 1_500 }))
        .then(
          (msg) => msg?.string(),
          () => undefined,
        );
      expect(pulled, `${name} pulls bob's consumer`).toBeUndefined();
      const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 1_500 });
      expect(
        await works(jsm.streams.add({ name: "MINE", subjects: ["mine.>"] })),
        `${name} makes a stream of its own`,
      ).toBe(false);
      expect(
        await works(jsm.streams.add({ name: "COPY", subjects: ["copy.>"], sources: [{ name: SHARED_STREAMS.inbox }] })),
        `${name} sources the shared inbox`,
      ).toBe(false);
    }
    expect((await t1.consumers.info(SHARED_STREAMS.inbox, bob)).num_pending).toBe(before);
    // Carol stays the only Agent of her namespace for what follows.
    cp().kubectl(["-n", NS2, "delete", "agent", "bob", "--wait=false"]);
    await until("the other bob gone", () => !get(NS2, "agent", "bob"), 120_000);
  }, 240_000);

  it("runs an Agent with spec.a2a: Ready, and it serves a task kept under its own account key in its namespace's task bucket", async () => {
    const token = "a2a-isolated-token-0123456789abcdef";
    cp().kubectl(["-n", NS1, "create", "secret", "generic", "tasks-a2a", `--from-literal=tokens=${token}`]);
    apply(
      agentYaml(
        NS1,
        "tasks",
        `  handler: {url: "${handler.url}"}
  a2a:
    enabled: true
    authentication: {bearerTokenSecret: {name: tasks-a2a, key: tokens}}
`,
      ),
    );
    const deployment = await until("tasks' Deployment", () => get(NS1, "deployment", "tasks"));
    expect(deployment.spec.template.spec.containers[0].args).toContain("--nats-layout=isolated");
    const { url, ca } = await runAsRendered(NS1, "tasks");
    // What the kubelet would report of the pod that is running here.
    cp().kubectl([
      ...["-n", NS1, "patch", "deployment", "tasks", "--subresource=status", "--type=merge", "-p"],
      JSON.stringify({
        status: {
          observedGeneration: deployment.metadata.generation,
          replicas: 1,
          updatedReplicas: 1,
          readyReplicas: 1,
          availableReplicas: 1,
        },
      }),
    ]);
    await until("tasks Ready", () => ready(NS1, "tasks")?.status === "True");
    const call = async (id: number, method: string, params: unknown) => {
      const res = await httpsRequest(`${url}/a2a/v1`, {
        method: "POST",
        headers: { "content-type": "application/json", "a2a-version": "1.0", authorization: `Bearer ${token}` },
        body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
        ca,
      });
      expect(res.status, res.text).toBe(200);
      return res.json().result;
    };
    const sent = await call(1, "SendMessage", {
      message: { messageId: randomUUID(), role: "ROLE_USER", parts: [{ text: "a task on the isolated layout" }] },
      configuration: { returnImmediately: true },
    });
    const id = sent.task.id as string;
    await until("the task handed to the application", () =>
      handler.received.some((h) => h.body.headers.extensions?.a2a?.task_id === id),
    );
    expect((await call(2, "GetTask", { id })).status.state).toBe("TASK_STATE_SUBMITTED");
    expect((await call(3, "ListTasks", {})).tasks.map((t: { id: string }) => t.id)).toContain(id);
    // In the namespace's task bucket, under the Agent's account key.
    const kv = await new Kvm(jetstream(await tenantUser(NS1))).open(SHARED_BUCKETS.a2aTasks);
    const keys: string[] = [];
    for await (const k of await kv.keys(`${accountOf(NS1, "tasks")}.t.*.${id}`)) keys.push(k);
    expect(keys).toHaveLength(1);
  }, 300_000);

  it("keeps a tenant at its data account's limit to itself, and tells a tenant the store has no room for", async () => {
    // A third namespace's limit does not fit the store beside the first two's.
    apply(agentYaml(NS3, "dave"));
    const refused = await until("dave told", () =>
      ready(NS3, "dave")?.reason === "InsufficientStorage" ? ready(NS3, "dave") : undefined,
    );
    expect(refused.message).toMatch(new RegExp(`data account of namespace ${NS3}.*refused JetStream`));
    expect(get(NS3, "deployment", "dave")).toBeUndefined();

    // Carol fills her namespace's share with her own credential; bob's namespace still takes messages.
    const carol = accountOf(NS2, "carol");
    const js = jetstream(await as(credsIn(NS2, "carol")!, "carol-agent"));
    const payload = new Uint8Array(512 * 1024);
    let stored = 0;
    while (stored < 2 * TENANT_MIB * 2 && (await works(js.publish(`ifp.inbox.${carol}.probe.${stored}`, payload))))
      stored++;
    expect(stored).toBeGreaterThan(0);
    expect(stored).toBeLessThanOrEqual(TENANT_MIB * 2);
    const bobJs = jetstream(await as(credsIn(NS1, "bob")!, "bob-agent"));
    expect(await works(bobJs.publish(`ifp.inbox.${accountOf(NS1, "bob")}.probe.after`, payload))).toBe(true);
  }, 240_000);

  it("deletes a deleted Agent's consumers and account, and a namespace's data account with its last Agent", async () => {
    const t1 = await tenantView(NS1);
    const bob = accountOf(NS1, "bob");
    const bobCreds = credsIn(NS1, "bob")!;
    await Promise.all(running.splice(0).map((r) => r.stop()));
    cp().kubectl(["-n", NS1, "delete", "agent", "bob", "--wait=false"]);
    await until("bob gone", () => !get(NS1, "agent", "bob"), 120_000);
    for (const c of sharedAgentConsumers(bob, { handlerTimeoutMs: 1, senderAckWaitMs: 1 }))
      expect(await works(t1.consumers.info(c.stream, c.config.durable_name)), `bob's ${c.stream} consumer`).toBe(false);
    expect(await onResolver(bob)).toBe(false);
    expect(await works(as(bobCreds, "bob-agent"))).toBe(false);
    // Its namespace keeps its data account for the Agents still there.
    expect(await onResolver(dataAccountOf(keys.signing, NS1))).toBe(true);

    // Carol was her namespace's only Agent: its data account goes, and its share of the store with it.
    const t2 = dataAccountOf(keys.signing, NS2);
    cp().kubectl(["-n", NS2, "delete", "agent", "carol", "--wait=false"]);
    await until("carol gone", () => !get(NS2, "agent", "carol"), 120_000);
    expect(await onResolver(t2)).toBe(false);
    // Dave's namespace gets the room.
    await until(
      "dave's consumers",
      () =>
        tenantView(NS3).then((j) =>
          j.consumers.info(SHARED_STREAMS.inbox, accountOf(NS3, "dave")).catch(() => undefined),
        ),
      60_000,
    );
    await until("dave rendered", () => get(NS3, "deployment", "dave"), 120_000);
  }, 300_000);
});
