import { describe, expect, it } from "vitest";
import { NOTE_REASONS, type ReconcileContext } from "./context.ts";
import type { Part, Pass } from "./part.ts";
import { checkPartOrder, filled, note, passReason, recordNotes, runParts, withNotes } from "./pipeline.ts";

describe("the order of a kind's parts", () => {
  const provider: Part<unknown, object, { plan: string }> = {
    name: "plan",
    provides: ["plan"],
    ensure: async () => ({ provides: { plan: "the plan" } }),
  };
  const reader: Part<unknown, { plan: string }> = {
    name: "apply",
    needs: ["plan"],
    ensure: async (_ctx, { found }) => ({ applied: [found.plan] }),
  };

  it("refuses, when the list is built, a part that reads a slot only a later part fills", () => {
    expect(() => checkPartOrder([reader, provider])).toThrow(
      "part apply needs plan, which no part before it provides (parts: apply, plan)",
    );
    expect(() => checkPartOrder([reader])).toThrow(/part apply needs plan/);
  });

  it("takes a list whose every slot is filled before it is read, and hands what a part provides on", async () => {
    const parts = checkPartOrder([provider, reader]);
    const pass = { obj: {}, resource: {}, owner: {}, found: {} } as Pass<unknown>;
    const report = await runParts({} as ReconcileContext, pass, parts);
    expect(report.applied).toEqual(["the plan"]);
    expect(pass.found).toEqual({ plan: "the plan" });
  });

  it("names a slot the status reads that no part filled", () => {
    expect(filled<{ stream: string }, "stream">({ stream: "s" }, "stream")).toBe("s");
    expect(() => filled<{ stream: string }, "stream">({}, "stream")).toThrow("no part of the pass filled stream");
  });
});

describe("recordNotes", () => {
  const recorder = () => {
    const events: string[] = [];
    const kube = {
      event: async (_o: unknown, type: string, reason: string, message: string) =>
        void events.push(`${type} ${reason}: ${message}`),
    };
    return { events, ctx: { kube } as unknown as ReconcileContext };
  };
  const obj = { kind: "Agent", metadata: { name: "a", namespace: "n" } };

  it("records what one pass did as one Normal Event, its messages in the order they happened", async () => {
    const { events, ctx } = recorder();
    const pass = withNotes(ctx);
    await note(pass, obj, "GeneratedSigningKey", "generated a key");
    await note(pass, obj, "IssuedCertificate", "issued a certificate");
    await note(pass, obj, "Applied", "applied Deployment/a");
    expect(events).toEqual([]);
    await recordNotes(pass, obj);
    expect(events).toEqual(["Normal GeneratedSigningKey: generated a key; issued a certificate; applied Deployment/a"]);
    await recordNotes(pass, obj);
    expect(events).toHaveLength(1);
  });

  it("takes the reason of the pass's most significant action, not of the first a part made", async () => {
    const { events, ctx } = recorder();
    const pass = withNotes(ctx);
    await note(pass, obj, "Deleted", "deleted Ingress/a-0, no longer in spec.expose");
    await note(pass, obj, "IssuedCertificate", "issued a certificate");
    await note(pass, obj, "Applied", "applied Deployment/a");
    await note(pass, obj, "StreamCreated", "created JetStream stream S");
    await recordNotes(pass, obj);
    expect(events).toEqual([
      "Normal StreamCreated: deleted Ingress/a-0, no longer in spec.expose; issued a certificate; applied Deployment/a; created JetStream stream S",
    ]);
  });

  it("ranks every reason by one fixed order: identity first, children applied last", () => {
    const notes = (...reasons: (typeof NOTE_REASONS)[number][]) => reasons.map((reason) => ({ reason, message: "" }));
    expect(passReason(notes("Applied", "Deleted"))).toBe("Deleted");
    expect(passReason(notes("Applied", "RenewedCertificate", "RotatedSigningKey"))).toBe("RotatedSigningKey");
    expect(passReason(notes("RotatedSigningKey", "RevokedSigningKey"))).toBe("RevokedSigningKey");
    expect(passReason(notes("Applied"))).toBe("Applied");
    // Any order of the same notes gives the same reason.
    for (const r of NOTE_REASONS) expect(passReason(notes("Applied", r))).toBe(passReason(notes(r, "Applied")));
    expect(NOTE_REASONS.at(-1)).toBe("Applied");
  });

  it("records at once outside a pass, and nothing for a pass that did nothing", async () => {
    const { events, ctx } = recorder();
    await recordNotes(withNotes(ctx), obj);
    expect(events).toEqual([]);
    await note(ctx, obj, "Applied", "applied Service/a");
    expect(events).toEqual(["Normal Applied: applied Service/a"]);
  });
});
