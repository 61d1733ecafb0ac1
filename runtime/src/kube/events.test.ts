import { describe, expect, it } from "vitest";
import { buildEvent } from "./events.ts";

describe("buildEvent", () => {
  const agent = {
    apiVersion: "ifp.dev/v1alpha1",
    kind: "Agent",
    metadata: { name: "pete", namespace: "team", uid: "u-1" },
  };
  const now = new Date("2026-03-04T12:00:00Z");
  const source = { component: "ifp-runtime", host: "pod-1" };

  it("points at the object and says who reported it", () => {
    expect(buildEvent(agent, "Warning", "Undeliverable", "message m1 to bob: 503", source, now, () => 0.5)).toEqual({
      metadata: { name: `pete.${now.getTime().toString(16)}7fff`, namespace: "team" },
      involvedObject: { apiVersion: "ifp.dev/v1alpha1", kind: "Agent", name: "pete", namespace: "team", uid: "u-1" },
      type: "Warning",
      reason: "Undeliverable",
      message: "message m1 to bob: 503",
      source: { component: "ifp-runtime", host: "pod-1" },
      reportingComponent: "ifp.dev/ifp-runtime",
      reportingInstance: "pod-1",
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    });
  });

  it("names each Event apart and keeps the message within 1 KiB", () => {
    const a = buildEvent(agent, "Normal", "Applied", "x".repeat(5000), source, now, () => 0);
    const b = buildEvent(agent, "Normal", "Applied", "x", source, now, () => 0.999);
    expect(a.metadata.name).toBe(`pete.${now.getTime().toString(16)}0000`);
    expect(a.metadata.name).not.toBe(b.metadata.name);
    expect(a.message).toHaveLength(1024);
  });

  it("writes a stranger's message id and error printable: no OSC 52, no cursor moves, no C1 or bidi controls", () => {
    const id = "m-1\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[1A\x1b[2K\x9b2J\u202E";
    const e = buildEvent(
      agent,
      "Warning",
      "HandlerDeadLetter",
      `message ${id} was not taken by the handler: 500`,
      source,
      now,
    );
    expect(e.message).toBe("message m-1 was not taken by the handler: 500");
    const refused = buildEvent(
      agent,
      "Warning",
      "DeliveryRefused\x1b[31m",
      `message ${id} to x: boom\r\nReady True`,
      source,
      now,
    );
    expect([refused.reason, refused.message]).toEqual(["DeliveryRefused", "message m-1 to x: boom Ready True"]);
  });
});
