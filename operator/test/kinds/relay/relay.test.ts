// The operator reconciling Relays against a real control plane and a real nats-server: the relay's
// JetStream stream from spec.retention, kept or deleted with the Relay, never made again empty,
// its storage never changed in place; a certificate only for its own or an allowed name.
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { withNatsDown } from "../../../../e2e/support/nats.ts";
import { consistently, waitFor } from "../../../../e2e/support/wait.ts";
import { resyncs, until } from "../../support/helpers.ts";

import {
  NS,
  RESYNC_MS,
  condition,
  deleteStream,
  events,
  get,
  manager,
  nats,
  cp,
  operatorLog,
  poke,
  stream,
  streamName,
  untilReason,
  useOperator,
} from "../../support/operator.ts";

useOperator();

describe("Relay", () => {
  const relayYaml = (name: string, retention: string) => `apiVersion: ifp.dev/v1alpha1
kind: Relay
metadata: {name: ${name}, namespace: ${NS}}
spec:
  url: https://${name}.relays.example
  retention: ${retention}
`;
  /** Apply a Relay and wait until its stream is in sync with the spec (and return the Relay). */
  const syncedRelay = async (name: string, retention: string) => {
    cp.kubectl(["apply", "-f", "-"], relayYaml(name, retention));
    return await untilReason("relay", name, "StreamInSync", "StreamReady");
  };

  it("issues a Relay no certificate for a name that is not its own or allowed, and still keeps its stream", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      `${relayYaml("spoof", "{maxAge: 1h}")}  tls: {dnsNames: [relay.other-team.svc]}\n`,
    );
    const refused = await untilReason("relay", "spoof", "DNSNameNotAllowed");
    expect(condition(refused, "Ready").message).toMatch(
      /^spec.tls.dnsNames: relay.other-team.svc is neither a name of this resource's Services \(spoof, [^)]*spoof.ifp-test.svc.cluster.local\) nor allowed/,
    );
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "DNSNameNotAllowed" });
    expect(get("secret", "spoof-tls")).toBeUndefined();
    expect(get("deployment", "spoof")).toBeUndefined();
    await until("its stream, all the same", () => stream(streamName("spoof")));
    // The host of spec.url is held to the same list: the installed NATS's name is refused.
    cp.kubectl(
      ["apply", "-f", "-"],
      relayYaml("spoof", "{maxAge: 1h}").replace(
        "url: https://spoof.relays.example",
        "url: https://nats.ifp-system.svc",
      ),
    );
    await until("spoof refused for spec.url", () =>
      condition(get("relay", "spoof"), "Ready")?.message?.startsWith("spec.url: nats.ifp-system.svc is neither"),
    );
    expect(get("secret", "spoof-tls")).toBeUndefined();
    expect(get("deployment", "spoof")).toBeUndefined();
    // A host the install allows the namespace (*.relays.example): issued.
    cp.kubectl(["apply", "-f", "-"], relayYaml("spoof", "{maxAge: 1h}"));
    await untilReason("relay", "spoof", "RuntimeNotReady");
    expect(get("secret", "spoof-tls")).toBeDefined();
  });

  it("creates the relay's JetStream stream from spec.retention, and edits of maxAge reach it", async () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("hub", "{maxAge: 168h, maxMessages: 100000}"));
    const name = streamName("hub");
    const created = await until("the stream", () => stream(name));
    expect(created.config).toMatchObject({
      max_age: 168 * 3600e9,
      max_msgs: 100000,
      max_bytes: 1024 * 1024 * 1024,
      discard: "new",
      allow_msg_ttl: true,
      storage: "file",
      num_replicas: 1,
      duplicate_window: 48 * 3600e9,
    });
    const relay = await untilReason("relay", "hub", "RuntimeNotReady");
    expect(condition(relay, "StreamReady")).toMatchObject({ status: "True", reason: "StreamInSync" });
    expect(relay.status.stream).toEqual({
      name,
      maxAge: `${168 * 3600}s`,
      maxBytes: 1024 * 1024 * 1024,
      maxMessages: 100000,
      replicas: 1,
      storage: "file",
      duplicateWindow: `${48 * 3600}s`,
    });
    const dep = get("deployment", "hub");
    expect(dep.spec.template.spec.containers[0].args[0]).toBe("relay");
    expect(dep.spec.template.spec.containers[0].args).not.toContainEqual(expect.stringMatching(/^--signing-key/));
    // The Relay's own ServiceAccount, which mounts no token, and no Role: the relay runtime does not call the API server.
    expect(dep.spec.template.spec.serviceAccountName).toBe("hub-runtime");
    expect(get("serviceaccount", "hub-runtime").automountServiceAccountToken).toBe(false);
    expect(get("role", "hub-runtime")).toBeUndefined();

    cp.kubectl(["-n", NS, "patch", "relay", "hub", "--type=merge", "-p", '{"spec":{"retention":{"maxAge":"72h"}}}']);
    await until("max_age to follow", async () => (await stream(name))?.config.max_age === 72 * 3600e9);
    const after = await until("status to follow", () => {
      const r = get("relay", "hub");
      return r.status?.stream?.maxAge === `${72 * 3600}s` && r.status.observedGeneration === 2 ? r : undefined;
    });
    expect(after.status.stream.duplicateWindow).toBe(`${48 * 3600}s`);
    // One Normal Event per pass, listing what it did; the Warning on its own, before the change.
    const normal = events("hub")
      .filter((e) => e.type === "Normal" && e.involvedObject.kind === "Relay")
      .map((e) => e.message);
    expect(normal.filter((m) => m.includes(`created JetStream stream ${name}`))).toHaveLength(1);
    // The pass that issued the certificate, applied the children and then created the stream is named for the stream.
    const creating = events("hub").find((e) => e.type === "Normal" && e.message.includes(`created JetStream stream`));
    expect(creating.message).toMatch(
      /^issued a serving certificate .*; applied .*Deployment\/hub.*; created JetStream stream/,
    );
    expect(creating.reason).toBe("StreamCreated");
    expect(normal.filter((m) => m.includes(`updated JetStream stream ${name}`))).toHaveLength(1);
    expect(
      events("hub")
        .filter((e) => e.reason === "RetentionLowered")
        .map((e) => e.type),
    ).toEqual(["Warning"]);
    expect(events("hub").find((e) => e.reason === "RetentionLowered").message).toMatch(
      /maxAge lowered from 168h to 72h/,
    );
  });

  it("says when NATS is away and catches up when it is back", { timeout: 150_000 }, async () => {
    await syncedRelay("ebb", "{maxAge: 24h, maxMessages: 100000}");
    await withNatsDown(nats, async () => {
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "relay",
        "ebb",
        "--type=merge",
        "-p",
        '{"spec":{"retention":{"maxMessages":50000}}}',
      ]);
      // The pass of the patched spec (generation 2) says it; a resync may have said it of generation 1 first.
      const away = await until(
        "relay/ebb StreamReady NatsUnavailable at generation 2",
        () => {
          const o = get("relay", "ebb");
          return condition(o, "StreamReady")?.reason === "NatsUnavailable" && o.status?.observedGeneration === 2
            ? o
            : undefined;
        },
        30_000,
      );
      expect(condition(away, "Ready")).toMatchObject({ status: "False", reason: "NatsUnavailable" });
      expect(condition(away, "Reconciling")).toMatchObject({ status: "True", reason: "NatsUnavailable" });
      expect(away.status.stream.maxMessages).toBe(100000); // the config last applied
      await nats.restart();
    });
    // The operator reconnects and looks again every 10 s while NATS is away.
    const back = await untilReason("relay", "ebb", "StreamInSync", "StreamReady", 60_000);
    expect(back.status.stream.maxMessages).toBe(50000);
    expect((await stream(streamName("ebb")))?.config.max_msgs).toBe(50000);
  });

  it("deletes the stream with the Relay when deleteOnRemoval asks for it", async () => {
    const name = streamName("tidy");
    await syncedRelay("tidy", "{maxAge: 24h, deleteOnRemoval: true}");
    expect(get("relay", "tidy").metadata.finalizers).toContain("ifp.dev/stream");
    expect(await stream(name)).toBeDefined();
    cp.kubectl(["-n", NS, "delete", "relay", "tidy", "--wait=false"]);
    await until("the Relay gone", () => get("relay", "tidy") === undefined);
    // The finalizer goes only after the stream did.
    expect(await stream(name)).toBeUndefined();
  });

  it("keeps the stream when the Relay is deleted without deleteOnRemoval, and drops the finalizer when the field goes back to false", async () => {
    const name = streamName("keeper");
    // The duplicate window never exceeds maxAge (JetStream would refuse it).
    await syncedRelay("keeper", "{maxAge: 24h, deleteOnRemoval: true}");
    expect((await stream(name))?.config.duplicate_window).toBe(24 * 3600e9);
    expect(get("relay", "keeper").metadata.finalizers).toContain("ifp.dev/stream");
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "relay",
      "keeper",
      "--type=merge",
      "-p",
      '{"spec":{"retention":{"deleteOnRemoval":false}}}',
    ]);
    await until(
      "the finalizer removed",
      () => !(get("relay", "keeper").metadata.finalizers ?? []).includes("ifp.dev/stream"),
    );
    cp.kubectl(["-n", NS, "delete", "relay", "keeper"]);
    // The operator has seen the deletion (its cache lost the Relay); the stream is still there after it.
    await until(
      "the operator to see the Relay go",
      () => get("relay", "keeper") === undefined && manager.caches.get("Relay", NS, "keeper") === undefined,
    );
    await consistently("the stream kept", async () => (await stream(name)) !== undefined, RESYNC_MS + 500, 250);
  });

  it("keeps a Relay whose stream it must delete while NATS is away, and deletes both once NATS is back", {
    timeout: 150_000,
  }, async () => {
    const name = streamName("outage");
    await syncedRelay("outage", "{maxAge: 24h, deleteOnRemoval: true}");
    expect(get("relay", "outage").metadata.finalizers).toContain("ifp.dev/stream");
    await withNatsDown(nats, async () => {
      cp.kubectl(["-n", NS, "delete", "relay", "outage", "--wait=false"]);
      // The positive signal: the operator processed the deletion and held it back for NATS.
      await until("the operator to wait for NATS", () =>
        operatorLog.has(
          /waiting for NATS to delete the relay's stream.*ifp-test\/outage|ifp-test\/outage.*waiting for NATS to delete the relay's stream/,
        ),
      );
      await consistently(
        "the Relay Terminating with its finalizer",
        () => {
          const r = get("relay", "outage");
          return !!r?.metadata.deletionTimestamp && r.metadata.finalizers?.includes("ifp.dev/stream");
        },
        3_000,
        250,
      );
      await nats.restart();
    });
    expect(await stream(name)).toBeDefined(); // the store kept it while the server was down
    // Retried every 10 s: the stream goes first, then the Relay.
    await until("the Relay gone", () => get("relay", "outage") === undefined, 40_000, 250);
    expect(await stream(name)).toBeUndefined();
  });

  it("reports a stream of the relay's name made elsewhere with another storage as StreamConflict, and never replaces it", async () => {
    const name = streamName("clash");
    const nc = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc)).streams.add({
        name,
        subjects: [`ifp.relay.${NS}_2Fclash.>`],
        storage: StorageType.Memory,
        retention: RetentionPolicy.Limits,
        max_age: 3600e9,
      });
    } finally {
      await nc.close();
    }
    const before = await stream(name);
    cp.kubectl(["apply", "-f", "-"], relayYaml("clash", "{maxAge: 24h}"));
    const relay = await untilReason("relay", "clash", "StreamConflict", "StreamReady");
    expect(condition(relay, "StreamReady")).toMatchObject({
      status: "False",
      message: expect.stringMatching(/exists with storage memory.*must be recreated by hand/),
    });
    expect(condition(relay, "Ready")).toMatchObject({ status: "False", reason: "StreamConflict" });
    expect(condition(relay, "Stalled")).toMatchObject({ status: "True", reason: "StreamConflict" });
    expect(condition(relay, "Reconciling")).toMatchObject({ status: "False" });
    expect(relay.status.stream).toBeUndefined();
    await waitFor("the StreamConflict Warning Event", () =>
      events("clash").some((e) => `${e.type}/${e.reason}` === "Warning/StreamConflict"),
    );
    // Neither recreated nor edited: the same stream, its own max_age, after further passes.
    await resyncs(manager, 1);
    const after = await stream(name);
    expect(after?.created, "the other stream recreated").toBe(before?.created);
    expect(after?.config).toMatchObject({ storage: "memory", max_age: 3600e9 });

    // Recreated by hand, as the message says: the operator makes its own.
    const nc2 = await connect({ servers: nats.url });
    try {
      await (await jetstreamManager(nc2)).streams.delete(name);
    } finally {
      await nc2.close();
    }
    poke("relay", "clash");
    const synced = await untilReason("relay", "clash", "StreamInSync", "StreamReady");
    expect(condition(synced, "Stalled")).toMatchObject({ status: "False" });
    expect((await stream(name))?.config).toMatchObject({ storage: "file", max_age: 24 * 3600e9 });
  });

  it("applies no more replicas than a single server holds: the stream made with one, ReplicasNotApplied said; in sync once the spec asks for one", async () => {
    const name = streamName("strict");
    // Three replicas on one server that is not part of a cluster: it cannot hold them (and would
    // accept an update to three it could not load after its next start).
    cp.kubectl(["apply", "-f", "-"], relayYaml("strict", "{maxAge: 24h, replicas: 3}"));
    const relay = await untilReason("relay", "strict", "ReplicasNotApplied", "StreamReady");
    expect(condition(relay, "StreamReady")).toMatchObject({
      status: "True",
      message: expect.stringMatching(
        new RegExp(`3 replicas were asked for stream ${name}; the JetStream server is not clustered and holds one`),
      ),
    });
    expect((await stream(name))?.config.num_replicas).toBe(1);
    expect(relay.status.stream).toMatchObject({ name, replicas: 1 });
    await waitFor("the ReplicasNotApplied Warning Event", () =>
      events("strict").some((e) => `${e.type}/${e.reason}` === "Warning/ReplicasNotApplied"),
    );

    cp.kubectl(["-n", NS, "patch", "relay", "strict", "--type=merge", "-p", '{"spec":{"retention":{"replicas":1}}}']);
    const synced = await untilReason("relay", "strict", "StreamInSync", "StreamReady");
    expect(synced.status.stream).toMatchObject({ name, replicas: 1 });
    expect((await stream(name))?.config.num_replicas).toBe(1);
  });

  it("never makes a Relay's stream again empty once it went missing, until the Relay is annotated to start it over", async () => {
    const name = streamName("gone");
    cp.kubectl(["apply", "-f", "-"], relayYaml("gone", "{maxAge: 24h}"));
    await untilReason("relay", "gone", "StreamInSync", "StreamReady");
    // The operator knows the stream was there by the Relay's status in its cache: once the cache
    // has it (a pass on a cache behind its own status write would take the stream for new).
    await waitFor(
      "the operator's cache to show the Relay's stream",
      () =>
        (manager.caches.get("Relay", NS, "gone") as { status?: { stream?: { name?: string } } } | undefined)?.status
          ?.stream?.name === name,
    );
    // What a server that could not load the stream at its start looks like to the operator.
    await deleteStream(name);
    const missing = await untilReason("relay", "gone", "StreamMissing", "StreamReady");
    expect(condition(missing, "Ready")).toMatchObject({ status: "False", reason: "StreamMissing" });
    expect(condition(missing, "Stalled")).toMatchObject({ status: "True", reason: "StreamMissing" });
    expect(condition(missing, "StreamReady")?.message).toMatch(
      /is missing from NATS.*ifp.dev\/recreate-missing-stream=true/,
    );
    expect(await stream(name)).toBeUndefined();
    cp.kubectl(["-n", NS, "annotate", "relay", "gone", "ifp.dev/recreate-missing-stream=true"]);
    await untilReason("relay", "gone", "StreamInSync", "StreamReady");
    expect(await stream(name)).toBeDefined();
  });

  it("refuses to change storage in place", () => {
    cp.kubectl(["apply", "-f", "-"], relayYaml("fixed", "{maxAge: 24h}"));
    expect(() =>
      cp.kubectl([
        "-n",
        NS,
        "patch",
        "relay",
        "fixed",
        "--type=merge",
        "-p",
        '{"spec":{"retention":{"storage":"memory"}}}',
      ]),
    ).toThrow(/retention.storage cannot change in place/);
    expect(() =>
      cp.kubectl(["apply", "-f", "-"], relayYaml("plain", "{maxAge: 24h}").replace("https://plain", "http://plain")),
    ).toThrow(/spec.url: Invalid value.*must be an https:\/\/ URL/);
  });
});
