// kill -9 of the operator in the middle of sustained traffic, and its restart. The operator runs
// as its own process (`ifp-operator`, with the chart's flags: leader election on, NATS, the CA in
// the operator's namespace) against a real control plane (etcd, kube-apiserver and
// kube-controller-manager for garbage collection and Deployments) and a real nats-server. A
// bounded loop keeps creating, updating (capabilities, replicas, signing key rotations, relay
// retention) and deleting Agents and Relays while the operator is killed with SIGKILL in the
// middle of a reconcile, stays down for a few seconds and is started again as a new pod would
// be (another identity): it takes the Lease once the dead holder's has expired. Then every
// resource that exists converges to its latest spec, every deleted one is gone with its
// children, no signing key or install CA was replaced, and each Agent has one Deployment. A
// second kill restarted under the same identity (the container restarted in its pod) takes the
// Lease back at once and rewrites nothing.
import { join } from "node:path";
import {
  CoordinationV1Api,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  type KubernetesObject,
  type V1Lease,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../e2e/support/nats.ts";
import { freePort } from "../../../e2e/support/ports.ts";
import { describeExit, releaseDir, spawnProcess, tempDir, type ManagedProcess } from "../../../e2e/support/process.ts";
import { waitFor } from "../../../e2e/support/wait.ts";
import { capabilitiesHash } from "../../../runtime/src/contract/capabilities.ts";
import { relayNames } from "../../../runtime/src/contract/relay-stream.ts";
import { encryptionKeyFromPem } from "../../../runtime/src/protocol/encryption.ts";
import { privateKeyFromPem, rawPublicKey } from "../../../runtime/src/protocol/keys.ts";
import { Agent } from "../../../runtime/src/resources/agent.ts";
import { parseDuration } from "../../../runtime/src/resources/fields.ts";
import { Relay } from "../../../runtime/src/resources/relay.ts";
import { planSigningKeys } from "../../src/kinds/agent/signing.ts";
import { hashOf } from "../../src/kube/metadata.ts";
import { kubectlOrError, perTest, streamOrAbsent, until } from "../support/helpers.ts";

const NS = "crash";
/** The operator's own namespace: its Lease and its install CA. */
const OPS = "ops";
const LEASE = "ifp-operator";
/** The Lease duration of leader.ts (no flag changes it): how long a new pod waits for a dead holder. */
const LEASE_SECONDS = 15;
const API = "ifp.dev/v1alpha1";
const INSTANCE = "app.kubernetes.io/instance";
const COMPONENT = "app.kubernetes.io/component";

let cp: ControlPlane;
let nats: NatsServer;
let objects: KubernetesObjectApi;
let coordination: CoordinationV1Api;
const dir = tempDir("ifp-operator-kill-");
const operators: ManagedProcess[] = [];

type Obj = KubernetesObject & { spec?: any; status?: any; data?: Record<string, string> };
const list = async (apiVersion: string, kind: string, ns = NS): Promise<Obj[]> =>
  (await objects.list<Obj>(apiVersion, kind, ns)).items;
const condition = (o: Obj | undefined, type: string) =>
  (o?.status?.conditions as { type: string; reason?: string; observedGeneration?: number }[] | undefined)?.find(
    (c) => c.type === type,
  );
const lease = async (): Promise<V1Lease["spec"]> =>
  (await coordination.readNamespacedLease({ name: LEASE, namespace: OPS })).spec;
const unb64 = (s: string) => Buffer.from(s, "base64").toString();

/** The operator as the chart runs it (its args), its identity from POD_NAME; resolves once /readyz answers 200. */
async function startOperator(podName: string): Promise<{ p: ManagedProcess; url: string; spawnedAt: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const spawnedAt = Date.now();
    const p = spawnProcess(
      `operator ${podName}`,
      process.execPath,
      [
        "operator/bin/ifp-operator.ts",
        `--kubeconfig=${cp.kubeconfig}`,
        `--nats-url=${nats.url}`,
        "--runtime-image=ghcr.io/ifp-dev/ifp-runtime:test",
        // The Relays' public hosts (https://<name>.example), allowed to their namespace as the
        // chart's allowedHosts: {crash: ["*.example"]} renders it.
        `--allowed-hosts=${NS}/*.example`,
        "--leader-elect=true",
        `--leader-election-namespace=${OPS}`,
        `--ca-namespace=${OPS}`,
        `--health-port=${port}`,
        `--metrics-port=${port}`,
        "--log-level=info",
      ],
      { env: { ...process.env, POD_NAME: podName }, logBytes: 1024 * 1024, logFile: join(dir, `${podName}.log`) },
    );
    operators.push(p);
    const url = `http://127.0.0.1:${port}`;
    const died = p.exited.then((e) =>
      Promise.reject(new Error(`the operator ${describeExit(e)}:\n${p.log().slice(-4000)}`)),
    );
    died.catch(() => {});
    try {
      await Promise.race([
        died,
        waitFor(
          `${podName} ready`,
          async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200,
          60_000,
          250,
        ),
      ]);
      return { p, url, spawnedAt };
    } catch (err) {
      await p.stop();
      if (!/EADDRINUSE/.test(p.log()) || attempt >= 3) throw err;
    }
  }
}

/** The sum of a Prometheus metric over its label sets that contain every one of `labels`. */
async function metric(url: string, name: string, ...labels: string[]): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (labels.every((l) => line.includes(l))) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** When the process logged `msg` first (its own timestamp), or undefined. */
function loggedAt(p: ManagedProcess, msg: string): number | undefined {
  for (const line of p.log().split("\n")) {
    if (!line.includes(`"${msg}"`)) continue;
    try {
      return Date.parse(JSON.parse(line).time as string);
    } catch {
      // a line cut by the ring buffer
    }
  }
  return undefined;
}

const becameLeaderAt = (p: ManagedProcess) => loggedAt(p, "became leader");

const agentBody = (name: string, seq: number): Obj => ({
  apiVersion: API,
  kind: "Agent",
  metadata: { name, namespace: NS },
  spec: { agentId: `${name}-id`, capabilities: [{ name: `crash.v${seq}`, description: "A capability of the load" }] },
});
const relayBody = (name: string, maxAge: string): Obj => ({
  apiVersion: API,
  kind: "Relay",
  metadata: { name, namespace: NS },
  spec: { url: `https://${name}.example`, retention: { maxAge, deleteOnRemoval: true } },
});
const merge = (kind: "Agent" | "Relay", name: string, spec: object) =>
  objects.patch(
    { apiVersion: API, kind, metadata: { name, namespace: NS }, spec },
    undefined,
    undefined,
    "crash-load",
    undefined,
    PatchStrategy.MergePatch,
  );
const remove = (kind: "Agent" | "Relay", name: string) =>
  objects.delete({ apiVersion: API, kind, metadata: { name, namespace: NS } });

/** Agents that exist throughout: updated (capabilities, replicas), and the rotors' keys rotated. */
const STEADY = ["steady-a", "steady-b"];
const ROTORS = ["rotor-a", "rotor-b"];
const HUB = "hub";
const MAX_AGES = ["24h", "48h", "72h"];

/**
 * The load: one operation at a time, about 7 a second, bounded in count and time; stop() ends it.
 * Churn Agents and Relays get names never used again, so that "deleted" means gone for good.
 */
function startLoad() {
  const state = {
    ops: 0,
    errors: [] as string[],
    deletedAgents: new Map<string, string>(),
    deletedRelays: new Map<string, string>(),
    rotations: Object.fromEntries(ROTORS.map((r) => [r, 0])) as Record<string, number>,
  };
  const churn: string[] = [];
  let relayChurn: string | undefined;
  let seq = 0;
  let stopped = false;
  const MAX_OPS = 800;
  const deadline = Date.now() + 120_000;
  // Each cycle of 8 operations: a churn Agent created, a steady Agent updated (capabilities,
  // replicas), a churn Agent updated, a rotor's key rotated or the hub's retention changed, a
  // churn Agent updated, the oldest churn Agent deleted, an Agent created and deleted at once,
  // and a churn Relay created or deleted.
  const step = async (i: number) => {
    const n = seq++;
    const cycle = Math.floor(i / 8);
    switch (i % 8) {
      case 0: {
        const name = `churn-${n}`;
        await objects.create(agentBody(name, n));
        churn.push(name);
        return;
      }
      case 1:
        return void (await merge("Agent", STEADY[cycle % STEADY.length]!, {
          capabilities: [{ name: `crash.v${n}`, description: "Updated under load" }],
          replicas: 1 + ((cycle >> 1) % 2),
        }));
      case 2:
      case 4: {
        const name = churn[n % Math.max(1, churn.length)];
        if (name)
          await merge("Agent", name, {
            capabilities: [
              { name: `crash.v${n}`, description: "Updated under load" },
              { name: "crash.extra", description: "Another" },
            ],
          });
        return;
      }
      case 3: {
        if (cycle % 2) {
          const rotor = ROTORS[(cycle >> 1) % ROTORS.length]!;
          await merge("Agent", rotor, { signing: { rotate: `r${n}`, transition: "1h" } });
          state.rotations[rotor]!++;
        } else await merge("Relay", HUB, { retention: { maxAge: MAX_AGES[(cycle >> 1) % MAX_AGES.length] } });
        return;
      }
      case 5: {
        // The oldest churn Agent goes once two are left behind it.
        if (churn.length <= 2) return;
        const name = churn.shift()!;
        const uid = (await objects.read({ apiVersion: API, kind: "Agent", metadata: { name, namespace: NS } }))
          .metadata!.uid!;
        await remove("Agent", name);
        state.deletedAgents.set(name, uid);
        return;
      }
      case 6: {
        // Created and deleted at once: the operator meets it mid-way or only as a deletion.
        const name = `blink-${n}`;
        const uid = (await objects.create(agentBody(name, n))).metadata!.uid!;
        await remove("Agent", name);
        state.deletedAgents.set(name, uid);
        return;
      }
      case 7: {
        if (relayChurn) {
          const uid = (
            await objects.read({ apiVersion: API, kind: "Relay", metadata: { name: relayChurn, namespace: NS } })
          ).metadata!.uid!;
          await remove("Relay", relayChurn);
          state.deletedRelays.set(relayChurn, uid);
          relayChurn = undefined;
        } else {
          relayChurn = `hop-${n}`;
          await objects.create(relayBody(relayChurn, "1h"));
        }
        return;
      }
    }
  };
  const done = (async () => {
    for (let i = 0; !stopped && i < MAX_OPS && Date.now() < deadline; i++) {
      try {
        await step(i);
      } catch (err) {
        state.errors.push(`op ${i}: ${(err as Error).message.slice(0, 300)}`);
      }
      state.ops++;
      // The load's own pace, one change every 120 ms: what the operator is killed under.
      await new Promise((r) => setTimeout(r, 120));
    }
  })();
  return Object.assign(state, {
    async stop() {
      stopped = true;
      await done;
    },
  });
}
type Load = ReturnType<typeof startLoad>;

/** What the signing Secret says: its active public key, the key set, and the config hash the Deployment must carry. */
function signingView(agent: Obj, secret: Obj, manifest: string) {
  const data = secret.data ?? {};
  const spec = Agent.parse(agent).spec.signing;
  const created = secret.metadata?.creationTimestamp
    ? new Date(secret.metadata.creationTimestamp).toISOString().replace(/\.\d{3}Z$/, "Z")
    : "";
  const plan = planSigningKeys(data, spec, created, new Date());
  const active = rawPublicKey(privateKeyFromPem(unb64(data["signing.key"]!)));
  const encryption = data["encryption.key"] ? encryptionKeyFromPem(unb64(data["encryption.key"])) : undefined;
  const configHash = hashOf({
    manifest,
    signingKey: active,
    keys: JSON.stringify([...plan.set.keys, ...(plan.set.encryption ?? [])].map((k) => [k.keyId, k.status])),
    ...(encryption ? { encryptionKey: encryption.publicKey } : {}),
  });
  // A rotation still to be made shows as plan.data (the Secret would be written).
  return { active, set: plan.set, pending: plan.data !== undefined || !!plan.error, configHash };
}

/**
 * The Ready reasons that leave nothing to the operator: every child applied and observed by the
 * Deployment controller, only pods missing. No kubelet runs here, so a Deployment whose pod
 * template changed stays RolloutInProgress (its first pod never becomes available).
 */
const OPERATOR_DONE = ["RuntimeNotReady", "RolloutInProgress"];

/**
 * Everything that is not yet as it must end, as sentences (empty: converged). Live Agents and
 * Relays: status for their generation, nothing left to the operator (OPERATOR_DONE), children
 * rendered from the latest spec and the current keys, one Deployment each.
 * Deleted ones: gone (no finalizer left), and nothing anywhere owned by them.
 */
async function problems(load: Load): Promise<string[]> {
  const [agents, relays, deployments, replicaSets, pods, configMaps, secrets, services, accounts, roles, bindings] =
    await Promise.all([
      list(API, "Agent"),
      list(API, "Relay"),
      list("apps/v1", "Deployment"),
      list("apps/v1", "ReplicaSet"),
      list("v1", "Pod"),
      list("v1", "ConfigMap"),
      list("v1", "Secret"),
      list("v1", "Service"),
      list("v1", "ServiceAccount"),
      list("rbac.authorization.k8s.io/v1", "Role"),
      list("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ]);
  const out: string[] = [];
  const byName = (items: Obj[], name: string) => items.find((o) => o.metadata?.name === name);
  for (const [kind, items, deleted] of [
    ["Agent", agents, load.deletedAgents],
    ["Relay", relays, load.deletedRelays],
  ] as const) {
    for (const [name, uid] of deleted) {
      const o = items.find((i) => i.metadata?.uid === uid);
      if (o)
        out.push(
          `${kind} ${name} was deleted but is still there (finalizers ${JSON.stringify(o.metadata?.finalizers ?? [])})`,
        );
    }
    for (const o of items)
      if (o.metadata?.deletionTimestamp)
        out.push(
          `${kind} ${o.metadata.name} is Terminating (finalizers ${JSON.stringify(o.metadata.finalizers ?? [])})`,
        );
  }
  const deploymentsOf = (kind: string, name: string) =>
    deployments.filter(
      (d) => d.metadata?.labels?.[INSTANCE] === name && d.metadata?.labels?.[COMPONENT] === kind.toLowerCase(),
    );
  const runtimeChecks = (kind: string, o: Obj) => {
    const name = o.metadata!.name!;
    const generation = o.metadata!.generation;
    if (o.status?.observedGeneration !== generation)
      out.push(`${kind} ${name}: observedGeneration ${o.status?.observedGeneration}, generation ${generation}`);
    const ready = condition(o, "Ready");
    if (!OPERATOR_DONE.includes(ready?.reason ?? "") || ready?.observedGeneration !== generation)
      out.push(
        `${kind} ${name}: Ready ${ready?.reason} for generation ${ready?.observedGeneration}, not ${OPERATOR_DONE.join(" or ")} for ${generation}`,
      );
    const reconciling = condition(o, "Reconciling")?.reason ?? "";
    if (!["WaitingForRuntime", "RolloutInProgress"].includes(reconciling))
      out.push(`${kind} ${name}: Reconciling ${reconciling}, not WaitingForRuntime or RolloutInProgress`);
    const mine = deploymentsOf(kind, name);
    if (mine.length !== 1 || mine[0]!.metadata?.name !== name)
      out.push(`${kind} ${name}: Deployments ${JSON.stringify(mine.map((d) => d.metadata?.name))}, not just ${name}`);
    return mine[0];
  };
  for (const a of agents) {
    if (a.metadata?.deletionTimestamp) continue;
    const name = a.metadata!.name!;
    const dep = runtimeChecks("Agent", a);
    if (!a.metadata?.finalizers?.includes("ifp.dev/jetstream"))
      out.push(`Agent ${name}: no ifp.dev/jetstream finalizer`);
    const parsed = Agent.parse(a);
    if (a.status?.capabilitiesHash !== capabilitiesHash(parsed))
      out.push(`Agent ${name}: status.capabilitiesHash not that of its spec`);
    const cm = byName(configMaps, `${name}-manifest`);
    const manifest = cm?.data?.["manifest.yaml"];
    if (!manifest) {
      out.push(`Agent ${name}: no ConfigMap ${name}-manifest`);
      continue;
    }
    const rendered = parseYaml(manifest);
    if (rendered?.metadata?.uid !== a.metadata?.uid)
      out.push(`Agent ${name}: its manifest is for uid ${rendered?.metadata?.uid}`);
    if (JSON.stringify(rendered?.spec?.capabilities) !== JSON.stringify(parsed.spec.capabilities))
      out.push(
        `Agent ${name}: manifest capabilities ${JSON.stringify(rendered?.spec?.capabilities)}, spec ${JSON.stringify(parsed.spec.capabilities)}`,
      );
    if (rendered?.spec?.signing?.rotate !== parsed.spec.signing.rotate)
      out.push(
        `Agent ${name}: manifest signing.rotate ${rendered?.spec?.signing?.rotate}, spec ${parsed.spec.signing.rotate}`,
      );
    const secret = byName(secrets, `${name}-signing`);
    if (!secret) {
      out.push(`Agent ${name}: no signing Secret`);
      continue;
    }
    const signing = signingView(a, secret, manifest);
    if (signing.pending) out.push(`Agent ${name}: its signing Secret is not yet as spec.signing asks`);
    if (a.status?.signingKey?.publicKey !== signing.active)
      out.push(`Agent ${name}: status.signingKey is not the Secret's active key`);
    if (dep) {
      if (dep.spec?.replicas !== parsed.spec.replicas)
        out.push(`Agent ${name}: Deployment replicas ${dep.spec?.replicas}, spec ${parsed.spec.replicas}`);
      const hash = dep.spec?.template?.metadata?.annotations?.["ifp.dev/config-hash"];
      if (hash !== signing.configHash)
        out.push(
          `Agent ${name}: the Deployment's config hash ${hash} is not that of the current manifest and keys (${signing.configHash})`,
        );
    }
  }
  for (const r of relays) {
    if (r.metadata?.deletionTimestamp) continue;
    runtimeChecks("Relay", r);
    if (condition(r, "StreamReady")?.reason !== "StreamInSync")
      out.push(`Relay ${r.metadata?.name}: StreamReady ${condition(r, "StreamReady")?.reason}`);
  }
  // Orphans: anything owned by an Agent or Relay, a Deployment or a ReplicaSet that is gone.
  const live = new Set([...agents, ...relays, ...deployments, ...replicaSets].map((o) => o.metadata?.uid));
  for (const [kind, items] of Object.entries({
    Deployment: deployments,
    ReplicaSet: replicaSets,
    Pod: pods,
    ConfigMap: configMaps,
    Secret: secrets,
    Service: services,
    ServiceAccount: accounts,
    Role: roles,
    RoleBinding: bindings,
  })) {
    for (const o of items) {
      const gone = (o.metadata?.ownerReferences ?? []).filter((ref) => !live.has(ref.uid));
      if (gone.length)
        out.push(
          `${kind} ${o.metadata?.name} is orphaned: its owner ${gone.map((g) => `${g.kind} ${g.name}`).join(", ")} is gone`,
        );
    }
  }
  // One Deployment per Agent and Relay, and none without its resource.
  for (const d of deployments) {
    const owner = d.metadata?.labels?.[COMPONENT] === "agent" ? agents : relays;
    if (!byName(owner, d.metadata?.labels?.[INSTANCE] ?? ""))
      out.push(`Deployment ${d.metadata?.name} has no ${d.metadata?.labels?.[COMPONENT]}`);
  }
  return out;
}

/** The Relays' streams: each live one as its spec says, each deleted one gone. */
async function streamProblems(load: Load): Promise<string[]> {
  const out: string[] = [];
  for (const r of await list(API, "Relay")) {
    const parsed = Relay.parse(r);
    const stream = await streamOrAbsent(nats.url, relayNames(parsed).stream);
    const want = parseDuration(parsed.spec.retention.maxAge) * 1e6;
    if (stream?.config.max_age !== want)
      out.push(`Relay ${r.metadata?.name}: stream max_age ${stream?.config.max_age}, spec ${want}`);
  }
  for (const name of load.deletedRelays.keys()) {
    const stream = relayNames(Relay.parse(relayBody(name, "1h"))).stream;
    if (await streamOrAbsent(nats.url, stream))
      out.push(`Relay ${name} was deleted but its stream ${stream} is still there`);
  }
  return out;
}

/** Wait until problems() and streamProblems() find nothing; a timeout names what was left. */
const converged = (load: Load, what: string, timeoutMs: number) =>
  until(
    what,
    async () => {
      const left = [...(await problems(load)), ...(await streamProblems(load))];
      if (left.length) throw new Error(`${left.length} left:\n  ${left.slice(0, 40).join("\n  ")}`);
      return true;
    },
    timeoutMs,
    500,
  );

perTest(() =>
  [
    "agents and relays:",
    kubectlOrError(cp, ["-n", NS, "get", "agents,relays", "-o", "wide"]),
    "lease:",
    kubectlOrError(cp, ["-n", OPS, "get", "lease", LEASE, "-o", "yaml"]),
    `operator logs: ${dir}`,
  ].join("\n"),
);

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
    startNats(),
  ]);
  for (const ns of [NS, OPS]) cp.kubectl(["create", "namespace", ns]);
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  objects = KubernetesObjectApi.makeApiClient(kc);
  coordination = kc.makeApiClient(CoordinationV1Api);
}, 300_000);
afterAll(async () => {
  await Promise.all(operators.map((p) => p.stop()));
  await Promise.all([cp?.stop(), nats?.close()]);
  releaseDir(dir);
});

describe("kill -9 of the operator under load", () => {
  it("converges after a restart: latest specs rendered, deletions finished, no key replaced, one Deployment each, the Lease taken over cleanly", {
    timeout: 240_000,
  }, async () => {
    // 1. The first operator leads; the Agents and the Relay that exist throughout are Ready-able.
    const a = await startOperator("ifp-operator-a");
    await until("ifp-operator-a to lead", async () => (await lease())?.holderIdentity === "ifp-operator-a");
    for (const name of [...STEADY, ...ROTORS]) await objects.create(agentBody(name, 0));
    await objects.create(relayBody(HUB, MAX_AGES[0]!));
    const steadyNames = [...STEADY, ...ROTORS];
    await until(
      "the Agents and the Relay that exist throughout Ready-able",
      async () => {
        const items = [...(await list(API, "Agent")), ...(await list(API, "Relay"))];
        return (
          items.length === steadyNames.length + 1 &&
          items.every(
            (o) =>
              condition(o, "Ready")?.reason === "RuntimeNotReady" &&
              o.status?.observedGeneration === o.metadata?.generation,
          )
        );
      },
      60_000,
    );
    const secretsBefore = new Map<string, Obj>();
    for (const name of steadyNames)
      secretsBefore.set(
        name,
        await objects.read<Obj>({
          apiVersion: "v1",
          kind: "Secret",
          metadata: { name: `${name}-signing`, namespace: NS },
        }),
      );
    const caBefore = await objects.read<Obj>({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "ifp-operator-ca", namespace: OPS },
    });
    const tlsBefore = new Map<string, string>();
    for (const name of steadyNames)
      tlsBefore.set(
        name,
        (
          await objects.read<Obj>({
            apiVersion: "v1",
            kind: "Secret",
            metadata: { name: `${name}-tls`, namespace: NS },
          })
        ).data!["tls.crt"]!,
      );
    const leaseBefore = await lease();
    // The Lease says how long it lasts: a standby waits that long after the holder's last renewal.
    expect(leaseBefore?.leaseDurationSeconds, "the Lease's leaseDurationSeconds").toBe(LEASE_SECONDS);

    // 2. Load; once the operator has worked under it and is in the middle of a reconcile (an
    // Agent it has put its finalizer on but not yet written a status for), kill -9.
    const load = startLoad();
    const opsAtStart = load.ops;
    let b!: Awaited<ReturnType<typeof startOperator>>;
    try {
      await until(
        "the operator busy under load, in the middle of a reconcile",
        async () => {
          if (load.ops < opsAtStart + 16) return false;
          const agents = await list(API, "Agent");
          const midway = agents.filter(
            (o) =>
              !o.metadata?.deletionTimestamp &&
              o.metadata?.finalizers?.includes("ifp.dev/jetstream") &&
              o.status?.observedGeneration === undefined,
          );
          return (
            midway.length > 0 &&
            agents.some((o) => o.metadata?.name?.startsWith("churn-") && o.status?.observedGeneration !== undefined)
          );
        },
        60_000,
        50,
      );
      a.p.proc.kill("SIGKILL");
      const killedAt = Date.now();
      expect((await a.p.exited).signal).toBe("SIGKILL");
      const lastRenewByA = new Date((await lease())!.renewTime!).getTime();

      // 3. The load goes on while no operator runs.
      const opsAtKill = load.ops;
      await until(
        "the load to go on while the operator is down",
        () => load.ops >= opsAtKill + 20 && Date.now() - killedAt >= 3_000,
        30_000,
      );

      // 4. Started again as a new pod would be (another identity): a standby until the dead
      // holder's Lease has expired by its own clock, and it reconciles nothing meanwhile.
      b = await startOperator("ifp-operator-b");
      let actedAsStandby = 0;
      await until(
        "ifp-operator-b to take the Lease",
        async () => {
          const leads = (await lease())?.holderIdentity === "ifp-operator-b";
          if (!leads && (await metric(b.url, "ifp_operator_reconciles_total")) > 0) actedAsStandby++;
          return leads;
        },
        (LEASE_SECONDS + 45) * 1000,
        250,
      );
      expect(actedAsStandby, "reconciles made before it held the Lease").toBe(0);
      const ledAt = await until("the 'became leader' log line", () => becameLeaderAt(b.p));
      // It waited a whole Lease duration from its first look at the Lease (after its start), so
      // also from the dead holder's last renewal; then it took it over once.
      expect(ledAt - b.spawnedAt).toBeGreaterThanOrEqual(LEASE_SECONDS * 1000);
      expect(ledAt - lastRenewByA).toBeGreaterThanOrEqual(LEASE_SECONDS * 1000);
      const taken = await lease();
      expect(taken).toMatchObject({
        holderIdentity: "ifp-operator-b",
        leaseDurationSeconds: LEASE_SECONDS,
        leaseTransitions: (leaseBefore!.leaseTransitions ?? 0) + 1,
      });

      // 5. A little more load with the new leader, then the loop ends.
      const opsAtLead = load.ops;
      await until("more load under the new leader", () => load.ops >= opsAtLead + 10, 30_000);
    } finally {
      await load.stop();
    }
    expect(load.errors).toEqual([]);
    expect(load.deletedAgents.size).toBeGreaterThan(3);
    expect(load.deletedRelays.size).toBeGreaterThan(0);
    expect(Object.values(load.rotations).every((n) => n > 0)).toBe(true);

    // 6. Everything converges: see problems().
    await converged(load, "every Agent and Relay converged after the restart", 90_000);
    const agents = await list(API, "Agent");

    // 7. No key was replaced: the same signing Secrets (uid) for the Agents that existed
    // throughout; the steady ones keep their very key, the rotors' key sets begin with their
    // first key and hold no more keys than rotations were asked for. The install CA and the
    // serving certificates stayed.
    for (const name of steadyNames) {
      const before = secretsBefore.get(name)!;
      const now = await objects.read<Obj>({
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: `${name}-signing`, namespace: NS },
      });
      expect(now.metadata?.uid, `${name}-signing`).toBe(before.metadata?.uid);
      const first = rawPublicKey(privateKeyFromPem(unb64(before.data!["signing.key"]!)));
      if (STEADY.includes(name)) {
        expect(now.data).toEqual(before.data);
        continue;
      }
      const set = JSON.parse(unb64(now.data!["keys.json"]!)) as {
        rotation: string;
        generation: number;
        keys: { keyId: string; publicKey: string; status: string }[];
      };
      const agent = agents.find((o) => o.metadata?.name === name)!;
      expect(set.rotation).toBe(agent.spec.signing.rotate);
      expect(set.keys[0]).toMatchObject({ keyId: "key-1", publicKey: first, status: "retired" });
      expect(set.keys.length).toBe(set.generation);
      expect(set.keys.length - 1).toBeLessThanOrEqual(load.rotations[name]!);
      expect(set.keys.filter((k) => k.status === "active").map((k) => k.publicKey)).toEqual([
        agent.status.signingKey.publicKey,
      ]);
      expect(unb64(now.data!["retired-1.key"]!)).toBe(unb64(before.data!["signing.key"]!));
    }
    const caNow = await objects.read<Obj>({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "ifp-operator-ca", namespace: OPS },
    });
    expect(caNow.metadata?.uid).toBe(caBefore.metadata?.uid);
    expect(caNow.data).toEqual(caBefore.data);
    for (const name of steadyNames)
      expect(
        (
          await objects.read<Obj>({
            apiVersion: "v1",
            kind: "Secret",
            metadata: { name: `${name}-tls`, namespace: NS },
          })
        ).data!["tls.crt"],
        `${name}-tls`,
      ).toBe(tlsBefore.get(name));

    // 8. Killed again and restarted under the same identity (its container restarted in the
    // same pod): the Lease is its own, taken back at once; its first pass over a converged
    // install rewrites nothing.
    const transitions = (await lease())!.leaseTransitions;
    b.p.proc.kill("SIGKILL");
    expect((await b.p.exited).signal).toBe("SIGKILL");
    const again = await startOperator("ifp-operator-b");
    const backAt = await until("the restarted ifp-operator-b to lead", () => becameLeaderAt(again.p), 60_000);
    // From its start as a process (its first log line), not its spawn: loading the operator's
    // modules takes a loaded machine longer than a Lease duration.
    const startedAt = await until("the restarted ifp-operator-b's first log line", () =>
      loggedAt(again.p, "operator starting"),
    );
    expect(backAt - startedAt).toBeLessThan(LEASE_SECONDS * 1000);
    expect(await lease()).toMatchObject({ holderIdentity: "ifp-operator-b", leaseTransitions: transitions });
    const counts = { Agent: agents.length, Relay: (await list(API, "Relay")).length };
    await until(
      "a first pass over every Agent and Relay, the queues empty",
      async () => {
        for (const kind of ["Agent", "Relay"] as const) {
          if ((await metric(again.url, "ifp_operator_reconciles_total", `kind="${kind}"`)) < counts[kind]) return false;
          if ((await metric(again.url, "ifp_operator_queue_depth", `kind="${kind}"`)) !== 0) return false;
        }
        return true;
      },
      30_000,
    );
    for (const verb of ["apply", "create", "update", "delete"])
      expect(
        await metric(again.url, "ifp_operator_api_writes_total", `verb="${verb}"`),
        `${verb} writes after the second restart`,
      ).toBe(0);
    await converged(load, "still converged after the second restart", 30_000);
  });
});
