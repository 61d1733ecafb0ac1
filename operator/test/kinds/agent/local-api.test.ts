// The local API's token Secret and Service on a real API server: made once, kept across
// reconciles, owned by the Agent; a token, hand-off or signing Secret someone else made under the
// name is refused, never used or overwritten.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../../e2e/support/controlplane.ts";
import { startNats, type NatsServer } from "../../../../e2e/support/nats.ts";
import { consistently } from "../../../../e2e/support/wait.ts";
import { generateSigningKey } from "../../../../runtime/src/protocol/keys.ts";
import { selfSignedServing } from "../../../src/concerns/tls/certs.ts";
import { startManager, type RunningManager } from "../../../src/commands/manager.ts";
import { capturedLog, getOrAbsent, perTest, until } from "../../support/helpers.ts";

let cp: ControlPlane;
let nats: NatsServer;
let manager: RunningManager;
const NS = "ifp-local-api";
const operatorLog = capturedLog(400);
const settings = {
  runtimeImage: "ghcr.io/ifp-dev/ifp-runtime:test",
  runtimeImagePullPolicy: "IfNotPresent",
  natsUrl: "nats://nats.test:4222",
};

const get = (kind: string, name: string) => getOrAbsent(cp, ["-n", NS, "get", kind, name]);
const condition = (obj: any, type: string) => obj?.status?.conditions?.find((c: any) => c.type === type);
const untilReason = (name: string, reason: string, timeoutMs = 30_000) =>
  until(
    `agent/${name} Ready reason ${reason}`,
    () => {
      const o = get("agent", name);
      return condition(o, "Ready")?.reason === reason ? o : undefined;
    },
    timeoutMs,
  );
const agentYaml = (name: string, localApi: string) => `apiVersion: ifp.dev/v1alpha1
kind: Agent
metadata: {name: ${name}, namespace: ${NS}}
spec:
  agentId: ${name}-id
  localApi: ${localApi}
`;
/** A Secret made by someone who may create Secrets in the namespace; returns its resourceVersion. */
function plantSecret(metadata: Record<string, unknown>, stringData: Record<string, string>): string {
  cp.kubectl(
    ["apply", "-f", "-"],
    JSON.stringify({ apiVersion: "v1", kind: "Secret", metadata: { namespace: NS, ...metadata }, stringData }),
  );
  return get("secret", metadata.name as string).metadata.resourceVersion;
}
/** Agent `name` refused with `message`: Ready False, Stalled True, a Warning Event. */
async function untilRefused(name: string, message: string) {
  const refused = await untilReason(name, "ForeignSecret");
  expect(condition(refused, "Ready").message).toBe(message);
  expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "ForeignSecret" });
  await until("the Warning/ForeignSecret Event", () =>
    (cp.json(["-n", NS, "get", "events", "--field-selector", `involvedObject.name=${name}`]).items as any[]).some(
      (e) => e.type === "Warning" && e.reason === "ForeignSecret",
    ),
  );
  return refused;
}
/** The labels the operator puts on what it makes for Agent `name`: anyone can copy them. */
const OPERATOR_LABELS = (name: string) => ({
  "app.kubernetes.io/managed-by": "ifp-operator",
  "app.kubernetes.io/instance": name,
  "app.kubernetes.io/component": "agent",
  "app.kubernetes.io/part-of": "ifp-operator",
});
const token = (name: string) => Buffer.from(get("secret", `${name}-local-api`).data.token, "base64").toString();
const _certNames = (name: string) => get("secret", `${name}-tls`).metadata.annotations;

perTest(() => [`operator log:`, ...operatorLog.lines().slice(-120)].join("\n"));

beforeAll(async () => {
  [cp, nats] = await Promise.all([
    startControlPlane({ crds: ["crds/agents.ifp.dev.yaml", "crds/relays.ifp.dev.yaml"] }),
    startNats(),
  ]);
  cp.kubectl(["create", "namespace", NS]);
  manager = await startManager({
    kubeconfig: cp.kubeconfig,
    settings,
    nats: { url: nats.url },
    watchNamespaces: [],
    resyncMs: 2_000,
    log: operatorLog.log,
  });
  await manager.started;
}, 300_000);
afterAll(async () => {
  await manager?.stop();
  await Promise.all([cp?.stop(), nats?.close()]);
});

describe("spec.localApi.service on a real API server", () => {
  it("creates the token Secret once, the Service, and the runtime's flags, port and mount", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "{service: {enabled: true}}"));
    await untilReason("alice", "RuntimeNotReady");
    const secret = get("secret", "alice-local-api");
    expect(token("alice")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(secret.metadata.ownerReferences).toEqual([
      {
        apiVersion: "ifp.dev/v1alpha1",
        kind: "Agent",
        name: "alice",
        uid: get("agent", "alice").metadata.uid,
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    expect(secret.metadata.labels).toMatchObject({
      "app.kubernetes.io/managed-by": "ifp-operator",
      "app.kubernetes.io/instance": "alice",
    });
    const svc = get("service", "alice-local-api");
    expect(svc.spec).toMatchObject({
      type: "ClusterIP",
      sessionAffinity: "ClientIP",
      ports: [{ name: "local-api", port: 9443, targetPort: "local-api", protocol: "TCP" }],
    });
    const pod = get("deployment", "alice").spec.template.spec;
    expect(pod.containers[0].args).toEqual(
      expect.arrayContaining(["--local-api-tls-port=9443", "--local-api-token-file=/etc/ifp/local-api/token"]),
    );
    expect(pod.containers[0].ports).toContainEqual({ name: "local-api", containerPort: 9443, protocol: "TCP" });
    expect(pod.volumes).toContainEqual({
      name: "local-api",
      secret: { secretName: "alice-local-api", items: [{ key: "token", path: "token" }], defaultMode: 420 },
    });
    // The self-signed serving certificate covers the Service's names.
    const { X509Certificate } = await import("node:crypto");
    const cert = new X509Certificate(Buffer.from(get("secret", "alice-tls").data["tls.crt"], "base64"));
    expect(cert.subjectAltName).toContain("DNS:alice-local-api.ifp-local-api.svc");
    expect(cert.subjectAltName).toContain("DNS:alice-local-api.ifp-local-api.svc.cluster.local");
    const events = cp.json(["-n", NS, "get", "events", "--field-selector", "involvedObject.name=alice"]).items as any[];
    // Recorded in the one Event of the pass that made it (after the signing key's, whose reason it bears).
    expect(
      events.filter(
        (e) =>
          e.involvedObject.kind === "Agent" &&
          /generated the local API token into Secret alice-local-api/.test(e.message),
      ),
    ).toHaveLength(1);
  });

  it("never overwrites the token: not on re-reconcile, not on a spec change, not after a rotation by hand", async () => {
    const first = token("alice");
    const rv = get("secret", "alice-local-api").metadata.resourceVersion;
    cp.kubectl(["-n", NS, "annotate", "--overwrite", "agent", "alice", `example.com/poke=${Date.now()}`]);
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "{service: {enabled: true, port: 9444}}"));
    await until("the new port rendered", () => get("service", "alice-local-api")?.spec.ports[0].port === 9444);
    await consistently(
      "the token Secret untouched",
      () => get("secret", "alice-local-api").metadata.resourceVersion === rv,
      5_000,
    );
    expect(token("alice")).toBe(first);
    // Rotated by hand: kept as written.
    const rotated = "r".repeat(43);
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "alice-local-api",
      "--type=merge",
      "-p",
      JSON.stringify({ data: { token: Buffer.from(rotated).toString("base64") } }),
    ]);
    const poke = `${Date.now()}`;
    cp.kubectl(["-n", NS, "annotate", "--overwrite", "agent", "alice", `example.com/poke=${poke}`]);
    // The witness: a reconcile of alice begun once the operator's cache has the poke, which came after the rotation.
    await until(
      "the operator to see the poke",
      () => manager.caches.get("Agent", NS, "alice")?.metadata?.annotations?.["example.com/poke"] === poke,
    );
    const seen = Date.now();
    await until("alice reconciled after the poke", () =>
      operatorLog.lines().some((l) => {
        const line = JSON.parse(l);
        return line.msg === "reconciled" && line.key === `${NS}/alice` && Date.parse(line.time) - line.tookMs >= seen;
      }),
    );
    await consistently("the rotated token kept", () => token("alice") === rotated, 5_000);
  });

  it("removes the Service when disabled, keeping the Secret; an unusable token blocks the rollout", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "{service: {enabled: false}}"));
    await until("the Service gone", () => !get("service", "alice-local-api"));
    await until(
      "the flags gone",
      () =>
        !get("deployment", "alice").spec.template.spec.containers[0].args.some((a: string) =>
          a.startsWith("--local-api-"),
        ),
    );
    expect(get("secret", "alice-local-api")).toBeDefined();
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "alice-local-api",
      "--type=merge",
      "-p",
      JSON.stringify({ data: { token: Buffer.from("short").toString("base64") } }),
    ]);
    cp.kubectl(["apply", "-f", "-"], agentYaml("alice", "{service: {enabled: true}}"));
    const blocked = await untilReason("alice", "InvalidLocalApiToken");
    expect(condition(blocked, "Ready").message).toMatch(/alice-local-api needs a key token/);
    // Fixed by hand: the rollout goes on.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "alice-local-api",
      "--type=merge",
      "-p",
      JSON.stringify({ data: { token: Buffer.from("f".repeat(43)).toString("base64") } }),
    ]);
    await until(
      "no longer blocked",
      () => condition(get("agent", "alice"), "Ready")?.reason !== "InvalidLocalApiToken",
    );
    await until("the Service back", () => get("service", "alice-local-api"));
  });

  it("deletes the token with its Agent: one created again under the name gets a new token, and keeps its signing key", {
    timeout: 150_000,
  }, async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("doomed", "{service: {enabled: true}}"));
    await untilReason("doomed", "RuntimeNotReady");
    const first = token("doomed");
    const uid = get("agent", "doomed").metadata.uid;
    const signing = get("secret", "doomed-signing").metadata.uid;
    cp.kubectl(["-n", NS, "delete", "agent", "doomed", "--wait=false"]);
    await until(
      "garbage collection",
      () => !get("service", "doomed-local-api") && !get("deployment", "doomed") && !get("secret", "doomed-local-api"),
      60_000,
      500,
    );
    expect(get("secret", "doomed-signing").metadata.uid).toBe(signing);
    cp.kubectl(["apply", "-f", "-"], agentYaml("doomed", "{service: {enabled: true}}"));
    const again = await untilReason("doomed", "RuntimeNotReady");
    expect(again.metadata.uid).not.toBe(uid);
    expect(token("doomed")).not.toBe(first);
    expect(get("secret", "doomed-signing").metadata.uid).toBe(signing);
  });

  it("refuses a token or hand-off Secret planted under the name before the Agent, even with the operator's labels: never used, never overwritten", {
    timeout: 120_000,
  }, async () => {
    // Whoever may only create Secrets makes them first, with a value they know.
    const known = "k".repeat(43);
    const labels = OPERATOR_LABELS("mallory");
    const planted = {
      api: plantSecret({ name: "mallory-local-api", labels }, { token: known }),
      handoff: plantSecret({ name: "mallory-handoff", labels }, { "handoff.key": known }),
    };
    cp.kubectl(["apply", "-f", "-"], agentYaml("mallory", "{service: {enabled: true}}"));
    await untilRefused(
      "mallory",
      "Secret mallory-local-api, where the operator keeps this Agent's local API token, was not made by the operator for Agent mallory (it lacks the owner reference to it or the operator's labels); it is neither used nor overwritten: delete Secret mallory-local-api and the operator makes a new one",
    );
    await consistently(
      "nothing rendered, the planted Secret untouched",
      () =>
        !get("deployment", "mallory") && get("secret", "mallory-local-api").metadata.resourceVersion === planted.api,
      5_000,
    );
    // Deleted: the operator makes its own, with a token nobody chose, and renders the Agent.
    cp.kubectl(["-n", NS, "delete", "secret", "mallory-local-api"]);
    await untilReason("mallory", "RuntimeNotReady");
    expect(token("mallory")).not.toBe(known);
    expect(get("secret", "mallory-local-api").metadata.ownerReferences[0].uid).toBe(
      get("agent", "mallory").metadata.uid,
    );
    // The hand-off secret, once the Agent has a handler.
    cp.kubectl(
      ["apply", "-f", "-"],
      `${agentYaml("mallory", "{service: {enabled: true}}")}  handler: {url: http://127.0.0.1:8080}\n`,
    );
    const handoff = await untilReason("mallory", "ForeignSecret");
    expect(condition(handoff, "Ready").message).toMatch(
      /^Secret mallory-handoff, where the operator keeps this Agent's hand-off signing secret, was not made by the operator for Agent mallory/,
    );
    await consistently(
      "no hand-off secret mounted, the planted Secret untouched",
      () => {
        const d = get("deployment", "mallory");
        return (
          !d?.spec.template.spec.volumes?.some((v: any) => v.secret?.secretName === "mallory-handoff") &&
          get("secret", "mallory-handoff").metadata.resourceVersion === planted.handoff
        );
      },
      5_000,
    );
  });

  it("refuses a signing key planted under the default name before the Agent, with the operator's labels: never mounted, never published", {
    timeout: 120_000,
  }, async () => {
    const planted = generateSigningKey();
    const rv = plantSecret(
      {
        name: "victim-signing",
        labels: { ...OPERATOR_LABELS("victim"), "ifp.dev/agent": "victim" },
        annotations: { "ifp.dev/public-key": planted.publicKey, "ifp.dev/generated-mark": "x".repeat(43) },
      },
      { "signing.key": planted.privateKeyPem },
    );
    cp.kubectl(["apply", "-f", "-"], agentYaml("victim", "{service: {enabled: true}}"));
    await untilRefused(
      "victim",
      "Secret victim-signing, where the operator keeps this Agent's signing key, was not generated by the operator for Agent victim (it carries no mark of the operator's for the key it holds, and the Agent's status publishes no such key); it is neither used nor overwritten: delete Secret victim-signing and the operator generates a new key, or, if this Agent may sign with the key it holds, name it in spec.signing.secretName and label it ifp.dev/agent=victim",
    );
    await consistently(
      "nothing rendered or published, the planted Secret untouched",
      () => {
        const a = get("agent", "victim");
        return (
          !get("deployment", "victim") &&
          a.status.signingKey === undefined &&
          a.status.signingKeys === undefined &&
          get("secret", "victim-signing").metadata.resourceVersion === rv
        );
      },
      5_000,
    );
    // Deleted: the operator generates a key nobody chose, marks it, and signs with it.
    cp.kubectl(["-n", NS, "delete", "secret", "victim-signing"]);
    const ready = await untilReason("victim", "RuntimeNotReady");
    expect(ready.status.signingKey.publicKey).not.toBe(planted.publicKey);
    expect(get("secret", "victim-signing").metadata.annotations["ifp.dev/generated-mark"]).toMatch(/^[\w-]{43}$/);
    const mounted = get("deployment", "victim").spec.template.spec.volumes.map((v: any) => v.secret?.secretName);
    expect(mounted).toContain("victim-signing");
  });

  it("refuses a token Secret with the Agent's owner reference and the operator's labels but not the operator's mark", {
    timeout: 120_000,
  }, async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("trent", "{service: {enabled: false}}"));
    await untilReason("trent", "RuntimeNotReady");
    // Once the Agent exists, its uid is there to copy.
    const uid = get("agent", "trent").metadata.uid;
    const rv = plantSecret(
      {
        name: "trent-local-api",
        labels: OPERATOR_LABELS("trent"),
        ownerReferences: [
          {
            apiVersion: "ifp.dev/v1alpha1",
            kind: "Agent",
            name: "trent",
            uid,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      { token: "k".repeat(43) },
    );
    cp.kubectl(["apply", "-f", "-"], agentYaml("trent", "{service: {enabled: true}}"));
    await untilRefused(
      "trent",
      "Secret trent-local-api, where the operator keeps this Agent's local API token, was not made by the operator for Agent trent (it carries no mark of the operator's); it is neither used nor overwritten: delete Secret trent-local-api and the operator makes a new one",
    );
    await consistently(
      "the planted token neither mounted nor overwritten",
      () =>
        !get("deployment", "trent")?.spec.template.spec.volumes?.some(
          (v: any) => v.secret?.secretName === "trent-local-api",
        ) && get("secret", "trent-local-api").metadata.resourceVersion === rv,
      5_000,
    );
  });

  it("leaves a serving-certificate Secret with the Agent's owner reference but not the operator's mark alone: ChildConflict, never mounted", {
    timeout: 120_000,
  }, async () => {
    // While spec.tls names a Secret of the user's, the operator makes no tess-tls of its own.
    cp.kubectl(
      ["apply", "-f", "-"],
      `${agentYaml("tess", "{service: {enabled: false}}")}  tls: {secretName: tess-own}\n`,
    );
    await untilReason("tess", "TLSSecretMissing");
    const agent = get("agent", "tess");
    const { cert, key } = await selfSignedServing("tess", ["tess"]);
    const rv = plantSecret(
      {
        name: "tess-tls",
        labels: OPERATOR_LABELS("tess"),
        ownerReferences: [
          {
            apiVersion: "ifp.dev/v1alpha1",
            kind: "Agent",
            name: "tess",
            uid: agent.metadata.uid,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      { "tls.crt": cert, "tls.key": key },
    );
    cp.kubectl(["apply", "-f", "-"], agentYaml("tess", "{service: {enabled: false}}"));
    const conflict = await untilReason("tess", "ChildConflict");
    expect(condition(conflict, "Ready").message).toMatch(
      /Secret tess-tls already exists and was not made by the operator for this Agent/,
    );
    await consistently(
      "the planted certificate neither mounted nor overwritten",
      () =>
        !get("deployment", "tess")?.spec.template.spec.volumes?.some((v: any) => v.secret?.secretName === "tess-tls") &&
        get("secret", "tess-tls").metadata.resourceVersion === rv,
      5_000,
    );
  });

  it("has colliding ports refused by the API server", () => {
    expect(() => cp.kubectl(["apply", "-f", "-"], agentYaml("bad", "{service: {enabled: true, port: 8443}}"))).toThrow(
      /8443 is the runtime's HTTPS port/,
    );
    expect(() => cp.kubectl(["apply", "-f", "-"], agentYaml("bad", "{port: 9443, service: {enabled: true}}"))).toThrow(
      /must differ from localApi.port/,
    );
  });
});
