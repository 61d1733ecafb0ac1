// The lifecycle of what an Agent or Relay keeps in JetStream, on a real control plane and a real
// nats-server: deleted with the resource by a finalizer (unless kept), never holding a deletion
// for ever (NATS away past the finalizer timeout; the operator uninstalled).
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, withNatsDown, type NatsServer } from "../../../e2e/support/nats.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { agentJetStream, agentNames } from "../../../runtime/src/contract/agent-names.ts";
import { startManager, type RunningManager } from "../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, streamOrAbsent, until } from "../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager | undefined;
const NS = "life";
const OPS = "ops";
const FINALIZER_TIMEOUT_MS = 4_000;
const ROLL = "roll";
const operatorLog = capturedLog(600);
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
};

const start = async (overrides: Partial<Parameters<typeof startManager>[0]> = {}) => {
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    ...overrides,
    resyncMs: 2_000,
    finalizerTimeoutMs: FINALIZER_TIMEOUT_MS,
    operatorDeployment: { namespace: OPS, name: "ifp-operator" },
    log: operatorLog.log,
    ...overrides,
  });
  await manager.started;
};
const stop = async () => {
  await manager?.stop();
  manager = undefined;
};

const get = (kind: string, name: string, ns = NS) => getOrAbsent(cp, ["-n", ns, "get", kind, name]);
const events = (name: string, ns = NS) =>
  cp.json(["-n", ns, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[];
const finalizers = (kind: string, name: string, ns = NS): string[] => get(kind, name, ns)?.metadata.finalizers ?? [];
const apply = (yaml: string) => cp.kubectl(["apply", "-f", "-"], yaml);
const agentYaml = (
  name: string,
  opts: { ns?: string; agentId?: string; keep?: boolean } = {},
) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${opts.ns ?? NS}}
spec:
  agentId: ${opts.agentId ?? `${name}-id`}
${opts.keep === undefined ? "" : `  retention: {keepOnDelete: ${opts.keep}}\n`}`;
const relayYaml = (name: string) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}}
spec:
  url: https://${name}.${NS}.svc
  retention: {maxAge: 24h, deleteOnRemoval: true}
`;

/** An Agent's store key (agentStoreKey): its JetStream data is named from namespace/name. */
const keyOf = (name: string, ns: string = NS): string => `${ns}/${name}`;

/** What the agent runtime makes in JetStream: both streams with a consumer each, its four buckets, its key of the shared bucket. */
async function seedAgent(key: string): Promise<void> {
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const n = agentNames(key);
    await jsm.streams.add({ name: n.inboxStream, subjects: [n.inboxSubjects] });
    await jsm.consumers.add(n.inboxStream, { durable_name: n.handlerConsumer, ack_policy: AckPolicy.Explicit });
    await jsm.streams.add({ name: n.outboxStream, subjects: [n.outboxSubjects] });
    await jsm.consumers.add(n.outboxStream, { durable_name: n.senderConsumer, ack_policy: AckPolicy.Explicit });
    const kvm = new Kvm(nc);
    for (const b of [n.outboxStateBucket, n.peersBucket, n.conversationsBucket, n.a2aTasksBucket])
      await (await kvm.create(b, { history: 1 })).put("k", "v");
    await (await kvm.create(n.kvBucket, { history: 1 })).put(`${n.kvKey}.capabilities`, "hash");
  } finally {
    await nc.close();
  }
}

/** Each of the agent's streams and bucket streams: present or not (only JetStream's "not found" counts as absent). */
async function presence(key: string): Promise<Record<string, boolean>> {
  const js = agentJetStream(key);
  const out: Record<string, boolean> = {};
  for (const s of [...js.streams, ...js.buckets.map((b) => `KV_${b}`)])
    out[s] = (await streamOrAbsent(nats.url, s)) !== undefined;
  return out;
}
const allPresent = async (key: string) => Object.values(await presence(key)).every(Boolean);
const nonePresent = async (key: string) => !Object.values(await presence(key)).some(Boolean);

/** The agent's key in the shared bucket, or undefined. */
async function sharedKey(key: string): Promise<string | undefined> {
  const nc = await connect({ servers: nats.url });
  try {
    const n = agentNames(key);
    const e = await (await new Kvm(nc).open(n.kvBucket)).get(`${n.kvKey}.capabilities`);
    return e && e.operation === "PUT" ? e.string() : undefined;
  } finally {
    await nc.close();
  }
}

perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-120),
    "agents and relays:",
    kubectlOrError(cp, ["get", "agents,relays", "-A", "-o", "wide"]),
  ].join("\n"),
);

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"], controllerManager: false }),
    startNats(),
  ]);
  for (const ns of [NS, OPS, "life-b", ROLL]) cp.kubectl(["create", "namespace", ns]);
  // The operator's own Deployment, as the chart installs it (nothing runs it here).
  cp.kubectl(["-n", OPS, "create", "deployment", "ifp-operator", "--image=ghcr.io/ifp-dev/ifp-operator:test"]);
  await start();
}, 300_000);
afterAll(async () => {
  await stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});

describe("an Agent's JetStream data", () => {
  it("goes with the Agent: streams with their consumers, KV buckets and its keys of the shared bucket; another agent's stay", {
    timeout: 60_000,
  }, async () => {
    apply(agentYaml("doomed"));
    apply(agentYaml("bystander"));
    await until(
      "the finalizers",
      () =>
        finalizers("agent", "doomed").includes("ifp.dev/jetstream") &&
        finalizers("agent", "bystander").includes("ifp.dev/jetstream"),
    );
    await seedAgent(keyOf("doomed"));
    await seedAgent(keyOf("bystander"));
    expect(await allPresent(keyOf("doomed"))).toBe(true);
    cp.kubectl(["-n", NS, "delete", "agent", "doomed", "--wait=false"]);
    await until("the Agent gone", () => get("agent", "doomed") === undefined);
    // The finalizer went only after the data did.
    expect(await presence(keyOf("doomed"))).toEqual(
      Object.fromEntries(Object.keys(await presence(keyOf("doomed"))).map((k) => [k, false])),
    );
    expect(await sharedKey(keyOf("doomed"))).toBeUndefined();
    expect(await allPresent(keyOf("bystander"))).toBe(true);
    expect(await sharedKey(keyOf("bystander"))).toBe("hash");
  });

  it("stays with spec.retention.keepOnDelete: no finalizer, and one set before goes when the field is switched on", {
    timeout: 60_000,
  }, async () => {
    apply(agentYaml("keeper", { keep: true }));
    apply(agentYaml("switched"));
    await until("the finalizer on the Agent that does not keep", () =>
      finalizers("agent", "switched").includes("ifp.dev/jetstream"),
    );
    await until("the keeper reconciled", () => get("agent", "keeper")?.status?.observedGeneration === 1);
    expect(finalizers("agent", "keeper")).toEqual([]);
    apply(agentYaml("switched", { keep: true }));
    await until("the finalizer removed", () => !finalizers("agent", "switched").includes("ifp.dev/jetstream"));
    for (const name of ["keeper", "switched"]) await seedAgent(keyOf(name));
    cp.kubectl(["-n", NS, "delete", "agent", "keeper", "switched", "--wait=false"]);
    await until(
      "the operator to see both go",
      () => !manager!.caches.get("Agent", NS, "keeper") && !manager!.caches.get("Agent", NS, "switched"),
    );
    await consistently(
      "the data kept",
      async () => (await allPresent(keyOf("keeper"))) && (await allPresent(keyOf("switched"))),
      2_500,
      250,
    );
    expect(await sharedKey(keyOf("keeper"))).toBe("hash");
  });

  it("is the Agent's own, named from its namespace/name: a second Agent under the same agent id is refused, and the first one's deletion leaves the second's data", {
    timeout: 60_000,
  }, async () => {
    apply(agentYaml("twin", { agentId: "shared-id" }));
    await until("the first Agent's finalizer", () => finalizers("agent", "twin").includes("ifp.dev/jetstream"));
    // The second claims an id already in use: refused while the first exists.
    apply(agentYaml("twin", { ns: "life-b", agentId: "shared-id" }));
    const reason = () =>
      (get("agent", "twin", "life-b")?.status?.conditions ?? []).find((c: { type: string }) => c.type === "Ready")
        ?.reason;
    await until("the second refused as a duplicate", () => reason() === "DuplicateAgentId");
    expect(agentNames(keyOf("twin")).inboxStream).not.toBe(agentNames(keyOf("twin", "life-b")).inboxStream);
    await seedAgent(keyOf("twin"));
    await seedAgent(keyOf("twin", "life-b"));
    cp.kubectl(["-n", NS, "delete", "agent", "twin", "--wait=false"]);
    await until("the Agent gone", () => get("agent", "twin") === undefined);
    expect(await nonePresent(keyOf("twin"))).toBe(true);
    expect(await sharedKey(keyOf("twin"))).toBeUndefined();
    // The second Agent's data stayed; it now runs under the id, and will delete its own in its turn.
    await until(
      "the second Agent taking the id over",
      () => reason() !== "DuplicateAgentId" && finalizers("agent", "twin", "life-b").includes("ifp.dev/jetstream"),
    );
    expect(await allPresent(keyOf("twin", "life-b"))).toBe(true);
    expect(await sharedKey(keyOf("twin", "life-b"))).toBe("hash");
  });

  it("does not hold the deletion while NATS is away past the finalizer timeout: the Agent goes with a Warning naming what is left", {
    timeout: 90_000,
  }, async () => {
    apply(agentYaml("stranded"));
    await until("the finalizer", () => finalizers("agent", "stranded").includes("ifp.dev/jetstream"));
    await seedAgent(keyOf("stranded"));
    await withNatsDown(nats, async () => {
      cp.kubectl(["-n", NS, "delete", "agent", "stranded", "--wait=false"]);
      await until("the operator to wait for NATS", () =>
        operatorLog.has(/waiting for NATS to delete the agent's streams/),
      );
      const waited = Date.now();
      // Held back while the bound runs (the positive signal above came first) ...
      await consistently(
        "the Agent Terminating with its finalizer",
        () => {
          const a = get("agent", "stranded");
          return !!a?.metadata.deletionTimestamp && a.metadata.finalizers?.includes("ifp.dev/jetstream");
        },
        1_500,
        250,
      );
      // ... and let go once it ran out, NATS still away.
      await until("the Agent gone", () => get("agent", "stranded") === undefined, 30_000);
      expect(Date.now() - waited).toBeGreaterThanOrEqual(FINALIZER_TIMEOUT_MS - 2_000);
      const warning = events("stranded").find((e) => e.reason === "CleanupAbandoned");
      expect(warning?.type).toBe("Warning");
      expect(warning?.message).toContain(agentNames(keyOf("stranded")).inboxStream);
      expect(warning?.message).toContain(`KV_${agentNames(keyOf("stranded")).outboxStateBucket}`);
      await nats.restart();
    });
    // What was left behind is there to delete by hand.
    expect(await allPresent(keyOf("stranded"))).toBe(true);
  });
});

describe("a Relay's stream finalizer", () => {
  it("does not hold the deletion while NATS is away past the finalizer timeout", { timeout: 90_000 }, async () => {
    apply(relayYaml("adrift"));
    await until(
      "the stream and the finalizer",
      async () =>
        finalizers("relay", "adrift").includes("ifp.dev/stream") &&
        (await streamOrAbsent(nats.url, `IFP_RELAY_${NS}_2Fadrift`)) !== undefined,
    );
    await withNatsDown(nats, async () => {
      cp.kubectl(["-n", NS, "delete", "relay", "adrift", "--wait=false"]);
      await until("the Relay gone", () => get("relay", "adrift") === undefined, 40_000);
      const warning = events("adrift").find((e) => e.reason === "CleanupAbandoned");
      expect(warning?.message).toContain(`IFP_RELAY_${NS}_2Fadrift`);
      await nats.restart();
    });
    expect(await streamOrAbsent(nats.url, `IFP_RELAY_${NS}_2Fadrift`)).toBeDefined();
  });
});

describe("a new runtime image", () => {
  const deployment = (name: string) => get("deployment", name, ROLL);
  const image = (name: string) => deployment(name)?.spec.template.spec.containers[0].image;
  const reconciling = (name: string) =>
    get("agent", name, ROLL)?.status?.conditions?.find((c: any) => c.type === "Reconciling");
  const ready = (name: string) =>
    get("agent", name, ROLL)?.status?.conditions?.find((c: any) => c.type === "Ready")?.status;
  /** What the kubelets and the Deployment controller would report once the pods of the current template are available. */
  const available = (name: string) => {
    const generation = deployment(name).metadata.generation;
    cp.kubectl([
      "-n",
      ROLL,
      "patch",
      "deployment",
      name,
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({
        status: {
          observedGeneration: generation,
          replicas: 1,
          updatedReplicas: 1,
          readyReplicas: 1,
          availableReplicas: 1,
        },
      }),
    ]);
  };
  const names = ["roll-a", "roll-b", "roll-c"];

  it("rolls through the Agents at most --max-rolling-agents at a time, each next one after the last became available", {
    timeout: 150_000,
  }, async () => {
    await stop();
    await start({ watchNamespaces: [ROLL] });
    for (const n of names) apply(agentYaml(n, { ns: ROLL }));
    await until("the Deployments", () => names.every((n) => deployment(n)));
    for (const n of names) available(n);
    await until("every Agent Ready at the first image", () => names.every((n) => ready(n) === "True"));
    // A chart upgrade: the operator restarts with another runtime image and at most one Agent rolling.
    await stop();
    await start({
      watchNamespaces: [ROLL],
      settings: { ...settings, runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:next" },
      rolloutLimit: { count: 1 },
    });
    const rolled = () => names.filter((n) => image(n) === "ghcr.io/ifp-dev/ifp-runtime:next");
    for (let step = 1; step <= names.length; step++) {
      await until(`${step} Agent(s) rolled`, () => rolled().length === step, 40_000);
      const waiting = names.filter((n) => !rolled().includes(n));
      if (waiting.length) {
        await until("the others queued", () => waiting.every((n) => reconciling(n)?.reason === "RolloutQueued"));
        // No further Agent rolls while the last one is not available (longer than the queue's 5 s retry) ...
        await consistently(`only ${step} rolled`, () => rolled().length === step, 6_000, 250);
        // ... and the queued ones stay Ready on their current pods.
        expect(waiting.map(ready)).toEqual(waiting.map(() => "True"));
      }
      const newest = rolled().find(
        (n) => deployment(n).status.observedGeneration !== deployment(n).metadata.generation,
      )!;
      expect(newest).toBeDefined();
      available(newest);
    }
    await until("every Agent reconciled", () => names.every((n) => reconciling(n)?.reason === "Reconciled"));
    await stop();
    await start();
  });
});

describe("the operator going away", () => {
  it("keeps the finalizers when it stops with its Deployment in place (a rolling update, an eviction)", {
    timeout: 60_000,
  }, async () => {
    apply(agentYaml("steady"));
    await until("the finalizer", () => finalizers("agent", "steady").includes("ifp.dev/jetstream"));
    await stop();
    expect(finalizers("agent", "steady")).toEqual(["ifp.dev/jetstream"]);
    await start();
  });

  it("removes every finalizer when it stops after its Deployment was deleted (helm uninstall), so that nothing waits for it", {
    timeout: 90_000,
  }, async () => {
    apply(agentYaml("orphan"));
    apply(relayYaml("orphan-relay"));
    await until(
      "the finalizers",
      () =>
        finalizers("agent", "orphan").includes("ifp.dev/jetstream") &&
        finalizers("relay", "orphan-relay").includes("ifp.dev/stream"),
    );
    await seedAgent(keyOf("orphan"));
    cp.kubectl(["-n", OPS, "delete", "deployment", "ifp-operator"]);
    await stop();
    expect(finalizers("agent", "orphan")).toEqual([]);
    expect(finalizers("relay", "orphan-relay")).toEqual([]);
    const released = events("orphan").find((e) => e.reason === "FinalizerReleased");
    expect(released?.message).toContain(agentNames(keyOf("orphan")).inboxStream);
    // With the operator gone and the CRDs kept, a deletion completes at once, and the data stays.
    cp.kubectl(["-n", NS, "delete", "agent", "orphan", "--timeout=30s"]);
    cp.kubectl(["-n", NS, "delete", "relay", "orphan-relay", "--timeout=30s"]);
    expect(get("agent", "orphan")).toBeUndefined();
    expect(await allPresent(keyOf("orphan"))).toBe(true);
  });
});
