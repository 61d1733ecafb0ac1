import { describe, expect, it } from "vitest";
import { mergeConditions, runtimeConditions, type DeploymentLike, type RuntimeObservation } from "./conditions.ts";

const dep = (o: {
  gen?: number;
  observed?: number;
  want?: number;
  total?: number;
  updated?: number;
  ready?: number;
  progressing?: { status: string; reason: string; message: string };
}): DeploymentLike => ({
  metadata: { generation: o.gen ?? 1 },
  spec: { replicas: o.want ?? 1 },
  status: {
    observedGeneration: o.observed ?? o.gen ?? 1,
    replicas: o.total ?? 0,
    updatedReplicas: o.updated ?? 0,
    readyReplicas: o.ready ?? 0,
    conditions: o.progressing ? [{ type: "Progressing", ...o.progressing }] : [],
  },
});

describe("runtimeConditions", () => {
  const cases: {
    name: string;
    o: RuntimeObservation;
    ready: string;
    reason: string;
    reconciling: string;
    reconcilingReason?: string;
    stalled: string;
  }[] = [
    {
      name: "a blocker stalls",
      o: {
        applied: [],
        deployment: dep({ total: 1, updated: 1, ready: 1 }),
        blocker: { reason: "TLSSecretMissing", message: "m" },
      },
      ready: "False",
      reason: "TLSSecretMissing",
      reconciling: "False",
      stalled: "True",
    },
    {
      name: "children written this pass",
      o: { applied: ["Service/a"], deployment: dep({ total: 1, updated: 1, ready: 1 }) },
      ready: "False",
      reason: "ChildrenApplied",
      reconciling: "True",
      stalled: "False",
    },
    {
      name: "Deployment not cached yet",
      o: { applied: [], deployment: undefined },
      ready: "False",
      reason: "DeploymentPending",
      reconciling: "True",
      stalled: "False",
    },
    {
      name: "generation not observed",
      o: { applied: [], deployment: dep({ gen: 3, observed: 2, total: 1, updated: 1, ready: 1 }) },
      ready: "False",
      reason: "RolloutPending",
      reconciling: "True",
      stalled: "False",
    },
    {
      name: "pods of the new spec not all created",
      o: { applied: [], deployment: dep({ want: 2, total: 2, updated: 1, ready: 2 }) },
      ready: "False",
      reason: "RolloutInProgress",
      reconciling: "True",
      stalled: "False",
    },
    {
      name: "old pods still around",
      o: { applied: [], deployment: dep({ want: 1, total: 2, updated: 1, ready: 1 }) },
      ready: "False",
      reason: "RolloutInProgress",
      reconciling: "True",
      stalled: "False",
    },
    {
      name: "Ready-able: pods exist, not ready",
      o: { applied: [], deployment: dep({ total: 1, updated: 1, ready: 0 }) },
      ready: "False",
      reason: "RuntimeNotReady",
      reconciling: "True",
      reconcilingReason: "WaitingForRuntime",
      stalled: "False",
    },
    {
      name: "a certificate being issued",
      o: {
        applied: [],
        deployment: dep({ total: 1, updated: 1, ready: 0 }),
        waiting: { reason: "CertificateNotReady", message: "m" },
      },
      ready: "False",
      reason: "CertificateNotReady",
      reconciling: "True",
      reconcilingReason: "WaitingForRuntime",
      stalled: "False",
    },
    {
      name: "rollout past its deadline",
      o: {
        applied: [],
        deployment: dep({
          total: 1,
          updated: 1,
          progressing: { status: "False", reason: "ProgressDeadlineExceeded", message: "too slow" },
        }),
      },
      ready: "False",
      reason: "RolloutStalled",
      reconciling: "False",
      stalled: "True",
    },
    {
      name: "all ready",
      o: { applied: [], deployment: dep({ want: 2, total: 2, updated: 2, ready: 2 }) },
      ready: "True",
      reason: "RuntimeReady",
      reconciling: "False",
      stalled: "False",
    },
    {
      name: "scaled to zero",
      o: { applied: [], deployment: dep({ want: 0 }) },
      ready: "True",
      reason: "ScaledToZero",
      reconciling: "False",
      stalled: "False",
    },
    {
      name: "scaling to zero",
      o: { applied: [], deployment: dep({ want: 0, total: 1 }) },
      ready: "False",
      reason: "ScalingDown",
      reconciling: "True",
      stalled: "False",
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const [ready, reconciling, stalled] = runtimeConditions(c.o);
      expect(ready).toMatchObject({ type: "Ready", status: c.ready, reason: c.reason });
      expect(reconciling).toMatchObject({
        type: "Reconciling",
        status: c.reconciling,
        ...(c.reconcilingReason ? { reason: c.reconcilingReason } : {}),
      });
      expect(stalled).toMatchObject({ type: "Stalled", status: c.stalled });
      for (const x of [ready, reconciling, stalled]) expect(x!.reason).toMatch(/^[A-Z][A-Za-z]+$/);
    });
  }
});

describe("mergeConditions", () => {
  const t0 = new Date("2026-01-01T00:00:00.123Z");
  const t1 = new Date("2026-01-02T00:00:00Z");
  it("writes every message printable: a name or an error from outside carries no escape or control", () => {
    const message = "Secret x\x1b]52;c;ZXZpbA==\x07\x1b[1A\x1b[2K\x9dtitle\x9c was not made\nReady True\u202E";
    const [c] = mergeConditions(
      undefined,
      [{ type: "Ready", status: "False", reason: "ForeignSecret", message }],
      1,
      t0,
    );
    expect(c!.message).toBe("Secret x was not made Ready True");
  });
  it("keeps lastTransitionTime unless the status flips, and stamps the generation", () => {
    const first = mergeConditions(undefined, [{ type: "Ready", status: "False", reason: "A", message: "a" }], 1, t0);
    expect(first).toEqual([
      {
        type: "Ready",
        status: "False",
        reason: "A",
        message: "a",
        observedGeneration: 1,
        lastTransitionTime: "2026-01-01T00:00:00Z",
      },
    ]);
    const sameStatus = mergeConditions(first, [{ type: "Ready", status: "False", reason: "B", message: "b" }], 2, t1);
    expect(sameStatus[0]).toMatchObject({
      reason: "B",
      observedGeneration: 2,
      lastTransitionTime: "2026-01-01T00:00:00Z",
    });
    const flipped = mergeConditions(sameStatus, [{ type: "Ready", status: "True", reason: "C", message: "c" }], 2, t1);
    expect(flipped[0]!.lastTransitionTime).toBe("2026-01-02T00:00:00Z");
  });
});
