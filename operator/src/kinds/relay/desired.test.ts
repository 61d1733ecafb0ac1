import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { relayStreamConfig } from "../../../../runtime/src/contract/relay-stream.ts";
import { Relay } from "../../../../runtime/src/resources/relay.ts";
import { desiredRelayChildren, retentionLoss, type RelayResource } from "./desired.ts";
import { relayStatus } from "./status.ts";

const meta = { name: "hub", namespace: "team", uid: "uid-2", generation: 1 };
const relay = (retention: Record<string, unknown> = {}): RelayResource => ({
  ...Relay.parse({
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Relay",
    metadata: meta,
    spec: { url: "https://hub.example", retention },
  }),
  metadata: meta,
});
const settings = { runtimeImage: "img:1", runtimeImagePullPolicy: "IfNotPresent", natsUrl: "nats://n:4222" };
const H = 3600e9;

describe("desiredRelayChildren", () => {
  it("runs the relay mode without a signing key or an API token", () => {
    const children = desiredRelayChildren(relay(), { settings, tlsSecret: "hub-tls" });
    expect(children.map((c) => `${c.kind}/${c.metadata!.name}`)).toEqual([
      "ConfigMap/hub-manifest",
      "Service/hub",
      "Deployment/hub",
    ]);
    const d = children[2] as any;
    expect(d.spec.template.spec.containers[0].args).toEqual([
      "relay",
      "--manifest=/etc/ifp/manifest/manifest.yaml",
      "--port=8443",
      "--metrics-port=9090",
      "--tls-cert=/etc/ifp/tls/tls.crt",
      "--tls-key=/etc/ifp/tls/tls.key",
      "--nats=nats://n:4222",
      "--ca-file=/etc/ifp/trust/ca.crt",
    ]);
    // The Relay's own ServiceAccount, and no token anywhere: the relay runtime does not call the API server (identity.ts).
    expect(d.spec.template.spec.serviceAccountName).toBe("hub-runtime");
    expect(d.spec.template.spec.automountServiceAccountToken).toBe(false);
    expect(d.spec.template.spec.volumes.map((v: any) => v.name)).not.toContain("kube-api");
    expect(Relay.safeParse(parse((children[0] as any).data["manifest.yaml"])).success).toBe(true);
  });

  it.each([
    {
      name: "default",
      extra: {},
      sc: { runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001, seccompProfile: { type: "RuntimeDefault" } },
      pull: undefined,
    },
    {
      name: "none and pull secrets",
      extra: { runtimeRunAsUser: null, runtimeRunAsGroup: null, runtimeImagePullSecrets: ["regcred"] },
      sc: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
      pull: [{ name: "regcred" }],
    },
  ])("runs the relay pod with the install's security and pull secrets: $name", ({ extra, sc, pull }) => {
    const spec = (
      desiredRelayChildren(relay(), { settings: { ...settings, ...extra }, tlsSecret: "hub-tls" })[2] as any
    ).spec.template.spec;
    expect(spec.securityContext).toEqual(sc);
    expect(spec.imagePullSecrets).toEqual(pull);
    expect(spec.containers[0].securityContext).toEqual({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ["ALL"] },
    });
  });

  it("names the stream after namespace/name and follows spec.retention", () => {
    const c = relayStreamConfig(
      relay({ maxAge: "72h", maxBytes: 1000, maxMessages: 10, replicas: 3, duplicateWindow: "1h" }),
    );
    expect(c).toMatchObject({
      name: "IFP_RELAY_team_2Fhub",
      subjects: ["ifp.relay.team_2Fhub.>"],
      max_age: 72 * H,
      max_bytes: 1000,
      max_msgs: 10,
      num_replicas: 3,
      duplicate_window: H,
      discard: "new",
      storage: "file",
      allow_msg_ttl: true,
    });
    expect(relayStreamConfig(relay({ maxAge: "24h" })).duplicate_window).toBe(24 * H);
  });
});

describe("retentionLoss", () => {
  const now = Date.parse("2026-01-10T00:00:00Z");
  const cases: { name: string; current: object; state: object; want: object; loss: RegExp | undefined }[] = [
    {
      name: "raising limits loses nothing",
      current: { max_age: 24 * H, max_msgs: 10, max_bytes: 100 },
      state: { messages: 5, bytes: 50 },
      want: { max_age: 48 * H, max_msgs: 20, max_bytes: 200 },
      loss: undefined,
    },
    {
      name: "a shorter maxAge expires messages sooner",
      current: { max_age: 168 * H },
      state: { messages: 0, bytes: 0 },
      want: { max_age: 72 * H },
      loss: /maxAge lowered from 168h to 72h: unacknowledged messages will expire sooner/,
    },
    {
      name: "a shorter maxAge deletes older stored messages now",
      current: { max_age: 168 * H },
      state: { messages: 3, bytes: 10, first_ts: "2026-01-05T00:00:00Z" },
      want: { max_age: 72 * H },
      loss: /stored messages older than that are deleted now/,
    },
    {
      name: "from unlimited",
      current: { max_age: 0 },
      state: { messages: 0, bytes: 0 },
      want: { max_age: 72 * H },
      loss: /from unlimited/,
    },
    {
      name: "fewer messages than stored refuses new ones",
      current: { max_msgs: -1 },
      state: { messages: 50, bytes: 0 },
      want: { max_msgs: 10 },
      loss: /50 stored messages exceed maxMessages 10/,
    },
    {
      name: "fewer bytes than stored refuses new ones",
      current: { max_bytes: -1 },
      state: { messages: 1, bytes: 500 },
      want: { max_bytes: 100 },
      loss: /500 stored bytes exceed maxBytes 100/,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const got = retentionLoss(c.current, c.state as never, c.want, now);
      if (c.loss) expect(got).toMatch(c.loss);
      else expect(got).toBeUndefined();
    });
  }
});

describe("relayStatus", () => {
  const ready = {
    metadata: { generation: 1 },
    spec: { replicas: 1 },
    status: { observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1 },
  };
  const config = relayStreamConfig(relay()) as never;
  it("is Ready only with the stream in sync too", () => {
    const ok = relayStatus(relay(), {
      applied: [],
      deployment: ready,
      stream: { ok: true, config, action: "created" },
    });
    expect(ok.conditions.map((c) => `${c.type}=${c.status}/${c.reason}`)).toEqual([
      "Ready=True/RuntimeReady",
      "Reconciling=False/Reconciled",
      "Stalled=False/Reconciled",
      "StreamReady=True/StreamInSync",
    ]);
    expect(ok.status.stream).toMatchObject({ name: "IFP_RELAY_team_2Fhub", maxAge: "604800s", storage: "file" });
    // What the scale subresource reads: pods that exist and the selector they are found by.
    expect(ok.status).toMatchObject({
      replicas: 1,
      readyReplicas: 1,
      selector: `app.kubernetes.io/instance=${relay().metadata.name},app.kubernetes.io/name=ifp-runtime`,
    });
    const away = relayStatus(
      relay(),
      { applied: [], deployment: ready, stream: { ok: false, reason: "NatsUnavailable", message: "m" } },
      { stream: ok.status.stream },
    );
    expect(away.conditions.map((c) => `${c.type}=${c.status}/${c.reason}`)).toEqual([
      "Ready=False/NatsUnavailable",
      "Reconciling=True/NatsUnavailable",
      "Stalled=False/Progressing",
      "StreamReady=False/NatsUnavailable",
    ]);
    expect(away.status.stream).toEqual(ok.status.stream);
    const conflict = relayStatus(relay(), {
      applied: [],
      deployment: ready,
      stream: { ok: false, reason: "StreamConflict", message: "m" },
    });
    expect(conflict.conditions.find((c) => c.type === "Stalled")).toMatchObject({
      status: "True",
      reason: "StreamConflict",
    });
  });
});
