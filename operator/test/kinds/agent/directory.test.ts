// The operator as a directory (spec.peerSelector) on a real API server: the peers an Agent
// selects reach the manifest its runtime reads, with their endpoints and current keys, and follow
// labels, namespaces, rotation and deletion.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { startControlPlane, type ControlPlane } from "../../../../e2e/support/controlplane.ts";
import { startManager, type RunningManager } from "../../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, kubectlOrError, perTest, until } from "../../support/helpers.ts";
import { didKeyFromPublicKey } from "../../../../runtime/src/protocol/did-key.ts";
import { generateSigningKey } from "../../../../runtime/src/protocol/keys.ts";

let cp: ControlPlane;
let manager: RunningManager;
const NAMESPACES = { home: "dir-home", blue: "dir-blue", red: "dir-red" } as const;
const operatorLog = capturedLog(400);
// The blue team may name hosts under blue.example (as chart value allowedHosts would allow them).
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
  allowedHosts: { [NAMESPACES.blue]: ["*.blue.example"] },
};

beforeAll(async () => {
  cp = await startControlPlane({
    crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"],
    controllerManager: false,
  });
  const team = { [NAMESPACES.home]: "blue", [NAMESPACES.blue]: "blue", [NAMESPACES.red]: "red" };
  for (const [ns, colour] of Object.entries(team))
    cp.kubectl(
      ["apply", "-f", "-"],
      `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${ns}, labels: {team: ${colour}}}\n`,
    );
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    watchNamespaces: Object.values(NAMESPACES),
    resyncMs: 60_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await cp?.stop();
});
perTest(() =>
  [
    "operator log:",
    ...operatorLog.lines().slice(-80),
    "agents:",
    kubectlOrError(cp, ["get", "agents", "-A", "-o", "wide"]),
  ].join("\n"),
);

const agentYaml = (
  ns: string,
  name: string,
  labels: Record<string, string>,
  extra = "",
) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${ns}, labels: ${JSON.stringify(labels)}}
spec:
  agentId: ${name}-id
${extra}`;
const apply = (yaml: string) => cp.kubectl(["apply", "-f", "-"], yaml);
const agent = (ns: string, name: string) => getOrAbsent(cp, ["-n", ns, "get", "agent", name]);
/** The peers in the manifest the operator rendered for the runtime. */
const renderedPeers = (
  ns: string,
  name: string,
):
  | {
      agentId: string;
      url?: string;
      keys: { keyId: string; publicKey: string; status: string }[];
      encryptionKeys?: { publicKey: string }[];
    }[]
  | undefined => {
  const cm = getOrAbsent(cp, ["-n", ns, "get", "configmap", `${name}-manifest`]);
  return cm ? parse(cm.data["manifest.yaml"]).spec.peers : undefined;
};
const peerIds = (ns: string, name: string) => renderedPeers(ns, name)?.map((p) => p.agentId);
const published = async (ns: string, name: string) =>
  until(`${ns}/${name}'s key in status`, () => agent(ns, name)?.status?.signingKey);

describe("spec.peerSelector", () => {
  it("makes the Agents it selects peers of the rendered manifest, with their endpoints and published keys, by label and namespace", {
    timeout: 120_000,
  }, async () => {
    apply(agentYaml(NAMESPACES.home, "one", { mesh: "on" }));
    apply(agentYaml(NAMESPACES.home, "two", { mesh: "off" }));
    apply(agentYaml(NAMESPACES.blue, "far", { mesh: "on" }));
    apply(agentYaml(NAMESPACES.red, "red", { mesh: "on" }));
    const one = await published(NAMESPACES.home, "one");
    const far = await published(NAMESPACES.blue, "far");
    await published(NAMESPACES.red, "red");
    // Its own namespace only, without a namespace selector; itself never.
    apply(
      agentYaml(
        NAMESPACES.home,
        "hub",
        { mesh: "on" },
        '  peerSelector: {agentSelector: {matchLabels: {mesh: "on"}}}\n',
      ),
    );
    await until("one in hub's peers", () => peerIds(NAMESPACES.home, "hub")?.join() === "one-id");
    const entry = renderedPeers(NAMESPACES.home, "hub")![0]!;
    expect(entry).toMatchObject({
      agentId: "one-id",
      url: `https://one.${NAMESPACES.home}.svc`,
      keys: [{ keyId: one.keyId, publicKey: one.publicKey, status: "active" }],
    });
    expect(entry.encryptionKeys?.[0]?.publicKey).toBe(agent(NAMESPACES.home, "one").status.encryptionKey.publicKey);
    // Namespaces by their labels: the blue ones (its own is blue too), not the red.
    apply(
      agentYaml(
        NAMESPACES.home,
        "hub",
        { mesh: "on" },
        '  peerSelector: {agentSelector: {matchLabels: {mesh: "on"}}, namespaceSelector: {matchLabels: {team: blue}}}\n',
      ),
    );
    await until("far in hub's peers", () => peerIds(NAMESPACES.home, "hub")?.join() === "far-id,one-id");
    expect(renderedPeers(NAMESPACES.home, "hub")!.find((p) => p.agentId === "far-id")!.keys[0]!.publicKey).toBe(
      far.publicKey,
    );
    // A label that comes to match; then an Agent that goes.
    cp.kubectl(["-n", NAMESPACES.home, "label", "agent", "two", "mesh=on", "--overwrite"]);
    await until("two in hub's peers", () => peerIds(NAMESPACES.home, "hub")?.join() === "far-id,one-id,two-id");
    cp.kubectl(["-n", NAMESPACES.blue, "delete", "agent", "far", "--wait=false"]);
    await until("far gone from hub's peers", () => peerIds(NAMESPACES.home, "hub")?.join() === "one-id,two-id");
  });

  it("keeps the keys current across a rotation: the retired key beside the new one, then revoked", {
    timeout: 120_000,
  }, async () => {
    apply(agentYaml(NAMESPACES.home, "rotor", { rotor: "yes" }));
    apply(
      agentYaml(NAMESPACES.home, "watcher", {}, '  peerSelector: {agentSelector: {matchLabels: {rotor: "yes"}}}\n'),
    );
    const before = await published(NAMESPACES.home, "rotor");
    await until("rotor in watcher's peers", () => renderedPeers(NAMESPACES.home, "watcher")?.[0]?.keys.length === 1);
    cp.kubectl([
      "-n",
      NAMESPACES.home,
      "patch",
      "agent",
      "rotor",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"first","transition":"3s"}}}',
    ]);
    const rotated = await until("both keys in watcher's peers", () => {
      const keys = renderedPeers(NAMESPACES.home, "watcher")?.[0]?.keys;
      return keys?.length === 2 ? keys : undefined;
    });
    expect(rotated.map((k) => [k.publicKey === before.publicKey, k.status])).toEqual([
      [true, "retired"],
      [false, "active"],
    ]);
    await until(
      "the old key revoked in watcher's peers",
      () => renderedPeers(NAMESPACES.home, "watcher")?.[0]?.keys[0]?.status === "revoked",
      30_000,
    );
  });

  it("lets the Agent's own spec.peers entry win, and never lists one refused for its agent id", {
    timeout: 120_000,
  }, async () => {
    const key = "A".repeat(43);
    apply(agentYaml(NAMESPACES.red, "solo", { pin: "yes" }));
    await published(NAMESPACES.red, "solo");
    // An Agent claiming solo's agent id with the same label: refused, and not a second entry.
    apply(agentYaml(NAMESPACES.red, "impostor", { pin: "yes" }).replace("agentId: impostor-id", "agentId: solo-id"));
    await until(
      "the impostor refused",
      () =>
        agent(NAMESPACES.red, "impostor")?.status?.conditions?.find((c: { type: string }) => c.type === "Ready")
          ?.reason === "DuplicateAgentId",
    );
    apply(agentYaml(NAMESPACES.red, "pinner", {}, `  peerSelector: {agentSelector: {matchLabels: {pin: "yes"}}}\n`));
    await until("solo in pinner's peers", () => peerIds(NAMESPACES.red, "pinner")?.join() === "solo-id");
    expect(renderedPeers(NAMESPACES.red, "pinner")![0]!.keys[0]!.publicKey).toBe(
      agent(NAMESPACES.red, "solo").status.signingKey.publicKey,
    );
    // Pinned by hand: the hand-written key, once.
    apply(
      agentYaml(
        NAMESPACES.red,
        "pinner",
        {},
        `  peers: [{agentId: solo-id, keys: [{keyId: pinned, publicKey: ${key}}]}]\n  peerSelector: {agentSelector: {matchLabels: {pin: "yes"}}}\n`,
      ),
    );
    await until(
      "the pinned key in pinner's peers",
      () => renderedPeers(NAMESPACES.red, "pinner")?.[0]?.keys[0]?.keyId === "pinned",
    );
    expect(peerIds(NAMESPACES.red, "pinner")).toEqual(["solo-id"]);
  });

  it("lists no Agent under an agent id the install does not vouch for: an https host not allowed its namespace, a did:key of another key", {
    timeout: 120_000,
  }, async () => {
    const labels = { vouch: "test" };
    const withId = (ns: string, name: string, agentId: string, extra = "") =>
      agentYaml(ns, name, labels, extra).replace(`agentId: ${name}-id`, `agentId: "${agentId}"`);
    const condition = (ns: string, name: string) =>
      agent(ns, name)?.status?.conditions?.find((c: { type: string }) => c.type === "DirectoryListed");
    // Tenants of the red namespace pass for others: a partner's https id, a blue host, another's did:key.
    const partnerKey = generateSigningKey();
    apply(withId(NAMESPACES.red, "mallory", "https://partner.example.com"));
    apply(withId(NAMESPACES.red, "trudy", "https://shop.blue.example"));
    apply(withId(NAMESPACES.red, "eve", didKeyFromPublicKey(partnerKey.publicKey)));
    for (const name of ["mallory", "trudy", "eve"]) {
      const c = await until(`${name} not vouched for`, () =>
        condition(NAMESPACES.red, name)?.status === "False" ? condition(NAMESPACES.red, name) : undefined,
      );
      expect(c.reason).toBe("AgentIdNotVouched");
      expect(c.message).toMatch(/^spec.agentId /);
      // It runs for itself: its keys published in its status, its Deployment rendered, not Stalled.
      await published(NAMESPACES.red, name);
      expect(getOrAbsent(cp, ["-n", NAMESPACES.red, "get", "deployment", name])).toBeDefined();
      expect(
        agent(NAMESPACES.red, name).status.conditions.find((x: { type: string }) => x.type === "Stalled").status,
      ).toBe("False");
    }
    expect(condition(NAMESPACES.red, "mallory").message).toMatch(
      new RegExp(
        `names the host partner.example.com, which is neither .* nor allowed for namespace ${NAMESPACES.red}: the directory lists this Agent for no other Agent .*--allowed-hosts ${NAMESPACES.red}/partner.example.com \\(chart value allowedHosts: \\{${NAMESPACES.red}: \\[partner.example.com\\]\\}\\)`,
      ),
    );
    expect(condition(NAMESPACES.red, "eve").message).toMatch(
      new RegExp(`is the Ed25519 key ${partnerKey.publicKey}, not this Agent's active signing key`),
    );
    const warning = await until("the Warning/AgentIdNotVouched Event", () =>
      cp
        .json<{ items: { type: string; reason: string; message: string; involvedObject: { name: string } }[] }>([
          "-n",
          NAMESPACES.red,
          "get",
          "events",
          "-o",
          "json",
        ])
        .items.find((e) => e.involvedObject.name === "mallory" && e.reason === "AgentIdNotVouched"),
    );
    expect(warning.type).toBe("Warning");
    // Claims the install backs: a blue host in the blue namespace, an Agent's own Service name,
    // and a did:key whose private key is the Agent's signing key.
    const ownKey = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "keyed-signing", namespace: NAMESPACES.blue, labels: { "ifp.dev/agent": "keyed" } },
        stringData: { "signing.key": ownKey.privateKeyPem },
      }),
    );
    apply(withId(NAMESPACES.blue, "shop", "https://shop.blue.example"));
    apply(withId(NAMESPACES.blue, "svc", `https://svc.${NAMESPACES.blue}.svc`));
    apply(
      withId(
        NAMESPACES.blue,
        "keyed",
        didKeyFromPublicKey(ownKey.publicKey),
        "  signing: {secretName: keyed-signing}\n",
      ),
    );
    for (const name of ["shop", "svc", "keyed"])
      await until(`${name} vouched for`, () => condition(NAMESPACES.blue, name)?.reason === "AgentIdVouched");
    // The tenant who claimed the blue host first does not keep it from the Agent the install vouches for.
    await until("trudy refused for shop's id", () =>
      agent(NAMESPACES.red, "trudy")
        ?.status?.conditions?.find((c: { type: string }) => c.type === "Ready")
        ?.message?.includes(`is already the id of Agent ${NAMESPACES.blue}/shop`),
    );
    // A victim selecting every Agent so labelled, in both namespaces: the vouched ones only.
    apply(
      agentYaml(
        NAMESPACES.home,
        "victim",
        {},
        `  peerSelector: {agentSelector: {matchLabels: {vouch: test}}, namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [blue, red]}]}}\n`,
      ),
    );
    const want = [
      didKeyFromPublicKey(ownKey.publicKey),
      "https://shop.blue.example",
      `https://svc.${NAMESPACES.blue}.svc`,
    ].sort();
    await until(
      "the vouched Agents in victim's peers",
      () => peerIds(NAMESPACES.home, "victim")?.join() === want.join(),
    );
    const peers = renderedPeers(NAMESPACES.home, "victim")!;
    expect(peers.find((p) => p.agentId === "https://shop.blue.example")!.url).toBe(
      `https://shop.${NAMESPACES.blue}.svc`,
    );
    expect(peers.flatMap((p) => p.keys.map((k) => k.publicKey))).not.toContain(
      agent(NAMESPACES.red, "mallory").status.signingKey.publicKey,
    );
    // Still none of them after the tenants change (a label, a resync): the check is the directory's own.
    const labelled = Date.now();
    cp.kubectl(["-n", NAMESPACES.red, "label", "agent", "mallory", "touched=yes"]);
    // The operator's cache sees the label and enqueues victim (again after its run, if it is
    // running then): once the cache has it, a reconcile of victim begun since the label.
    await until(
      "the operator to see mallory's label",
      () => manager.caches.get("Agent", NAMESPACES.red, "mallory")?.metadata?.labels?.touched === "yes",
    ).then(() =>
      until("victim reconciled after the label", () =>
        operatorLog.lines().some((l) => {
          const line = JSON.parse(l);
          return (
            line.msg === "reconciled" &&
            line.key === `${NAMESPACES.home}/victim` &&
            Date.parse(line.time) - line.tookMs >= labelled
          );
        }),
      ),
    );
    expect(peerIds(NAMESPACES.home, "victim")).toEqual(want);
  });
});
