// Leader election against skewed clocks: a candidate judges the holder's lease by its own clock
// (when it last saw the record change), never by the holder's renewTime. A real kube-apiserver.
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { startControlPlane, type ControlPlane } from "../../../e2e/support/controlplane.ts";
import { consistently } from "../../../e2e/support/wait.ts";
import { LeaderElector, microTime } from "../../src/commands/leader.ts";
import { capturedLog, until } from "../support/helpers.ts";

let cp: ControlPlane;
beforeAll(async () => {
  cp = await startControlPlane({ crds: [], controllerManager: false });
  cp.kubectl(["create", "namespace", "ops"]);
}, 300_000);
afterAll(async () => {
  await cp?.stop();
});

const HOUR = 3_600_000;
/** A Lease held by "other", stamped with the given renewTime (the other node's clock). */
const holdAs = (name: string, renewTime: Date) =>
  cp.kubectl(
    ["apply", "-f", "-"],
    JSON.stringify({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name, namespace: "ops" },
      spec: {
        holderIdentity: "other",
        leaseDurationSeconds: 3,
        renewTime: microTime(renewTime),
        acquireTime: microTime(renewTime),
        leaseTransitions: 0,
      },
    }),
  );
const holder = (name: string) => cp.json(["-n", "ops", "get", "lease", name]).spec.holderIdentity;
/** A candidate "me" whose clock runs skewMs off the real one. */
const candidate = (name: string, skewMs = 0) => {
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  const e = new LeaderElector(kc, {
    namespace: "ops",
    name,
    identity: "me",
    annotations: { "ifp.dev/version": "9.9.9" },
    log: capturedLog().log,
    leaseSeconds: 3,
    retryMs: 250,
    now: () => Date.now() + skewMs,
  });
  onTestFinished(() => e.stop());
  let leadingSince = 0;
  void e.run(() => {}).then(() => (leadingSince = Date.now()));
  return { e, since: () => leadingSince };
};

describe("the leader's version", () => {
  it("is written on the Lease it creates, and on one it takes over, keeping the other annotations", async () => {
    const created = candidate("fresh");
    await until("leading a new Lease", () => created.e.isLeader);
    expect(cp.json(["-n", "ops", "get", "lease", "fresh"]).metadata.annotations).toEqual({
      "ifp.dev/version": "9.9.9",
    });
    holdAs("taken", new Date(Date.now() - HOUR));
    cp.kubectl(["-n", "ops", "annotate", "lease", "taken", "team.example/owner=ops"]);
    const taker = candidate("taken");
    await until("taking the Lease over", () => taker.e.isLeader);
    expect(cp.json(["-n", "ops", "get", "lease", "taken"]).metadata.annotations).toMatchObject({
      "ifp.dev/version": "9.9.9",
      "team.example/owner": "ops",
    });
  });
});

describe("leader election with skewed clocks", () => {
  it("leaves a lease alone while its holder, whose clock is an hour behind, keeps renewing; takes it once renewals stop", {
    timeout: 60_000,
  }, async () => {
    let stamp = new Date(Date.now() - HOUR);
    holdAs("behind", stamp);
    let renewing = true;
    const renewer = setInterval(() => {
      if (!renewing) return;
      stamp = new Date(stamp.getTime() + 1_000);
      holdAs("behind", stamp);
    }, 1_000);
    onTestFinished(() => clearInterval(renewer));
    const c = candidate("behind");
    // Twice the lease duration of renewals: an hour-old renewTime must not count as expired.
    await consistently(
      "the candidate to stay a standby",
      () => !c.e.isLeader && holder("behind") === "other",
      6_000,
      250,
    );
    renewing = false;
    const stopped = Date.now();
    await until("the candidate to take the lease", () => c.e.isLeader && holder("behind") === "me", 30_000);
    // It waited about the lease duration (3 s) of its own clock after the last change it saw,
    // which came up to a renewal period (1 s, plus the time a loaded machine takes to apply it)
    // before the renewals stopped; taking it at once would have taken one retry (0.25 s).
    expect(c.since() - stopped).toBeGreaterThanOrEqual(1_500);
  });

  it("takes a lease whose holder, an hour ahead, stopped renewing after the lease duration, not an hour later", {
    timeout: 60_000,
  }, async () => {
    holdAs("ahead", new Date(Date.now() + HOUR));
    const begun = Date.now();
    // The candidate's own clock is off too (10 min behind): only its differences count.
    const c = candidate("ahead", -600_000);
    await until("the candidate to take the lease", () => c.e.isLeader && holder("ahead") === "me", 30_000);
    expect(c.since() - begun).toBeGreaterThanOrEqual(2_500);
  });
});
