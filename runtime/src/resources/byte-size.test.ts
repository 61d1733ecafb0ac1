import { describe, expect, it } from "vitest";
import { Agent } from "./agent.ts";
import { BYTE_SIZE_RE, ByteSize } from "./fields.ts";
import { bytesOf, bytesQuantity } from "./quantity.ts";
import { Relay } from "./relay.ts";

const agent = (inbox: Record<string, unknown>) =>
  Agent.safeParse({ apiVersion: "ifp.dev/v1alpha1", kind: "Agent", spec: { agentId: "a", inbox } });
const relay = (spec: Record<string, unknown>) =>
  Relay.safeParse({ apiVersion: "ifp.dev/v1alpha1", kind: "Relay", spec: { url: "https://relay.example", ...spec } });
const MI = 1024 * 1024;

describe("bytesOf", () => {
  it.each([
    [1048576, 1048576],
    ["1048576", 1048576],
    ["64Mi", 64 * MI],
    ["1Gi", 1024 * MI],
    ["500k", 500_000],
    ["2M", 2_000_000],
    ["1.5k", 1500],
    ["0.5Ki", 512],
    ["1e6", 1_000_000],
    ["0", 0],
  ])("%j is %d bytes", (q, want) => expect(bytesOf(q)).toBe(want));

  it.each(["64Mo", "-5Mi", "0.5", "1500m", "1e400", "99999999Ei", "8Ei", "", " ", "Mi", "1.2.3", "0x10"])(
    "%j is no number of bytes",
    (q) => expect(bytesOf(q)).toBeUndefined(),
  );

  it.each([-1, 0.5, Number.MAX_SAFE_INTEGER + 1, Number.NaN, Number.POSITIVE_INFINITY])(
    "the number %d is no number of bytes",
    (n) => expect(bytesOf(n)).toBeUndefined(),
  );

  it("writes bytes back the shortest exact way", () => {
    expect([1024, 16 * 1024, MI, 64 * MI, 2 ** 50, 1500, 0].map(bytesQuantity)).toEqual([
      "1Ki",
      "16Ki",
      "1Mi",
      "64Mi",
      "1Pi",
      "1500",
      "0",
    ]);
  });
});

describe("ByteSize", () => {
  it("gives bytes for an integer or a quantity, in every size field of an Agent and a Relay", () => {
    const a = agent({ maxBytes: "64Mi", maxMessageBytes: "512Ki", rateLimit: { perSenderBytesPerHour: "2M" } });
    expect(a.success).toBe(true);
    expect(a.data!.spec.inbox).toMatchObject({
      maxBytes: 64 * MI,
      maxMessageBytes: 512 * 1024,
      rateLimit: { perSenderBytesPerHour: 2_000_000 },
    });
    const r = relay({
      retention: { maxBytes: "1Gi" },
      limits: { maxMessageBytes: "500k", perAgentBytesPerHour: "1G" },
      publishers: { limits: { perSenderBytesPerHour: "16Mi", perRecipientBytesPerHour: 65536 } },
    });
    expect(r.success).toBe(true);
    expect(r.data!.spec.retention.maxBytes).toBe(1024 * MI);
    expect(r.data!.spec.limits).toMatchObject({ maxMessageBytes: 500_000, perAgentBytesPerHour: 1_000_000_000 });
    expect(r.data!.spec.publishers.limits).toMatchObject({
      perSenderBytesPerHour: 16 * MI,
      perRecipientBytesPerHour: 65536,
    });
  });

  it("takes integers, gives the defaults, and keeps -1 for an unbounded relay stream", () => {
    expect(agent({ maxBytes: 2 * MI }).data!.spec.inbox.maxBytes).toBe(2 * MI);
    expect(agent({}).data!.spec.inbox).toMatchObject({ maxBytes: 64 * MI, maxMessageBytes: MI });
    expect(relay({}).data!.spec.retention.maxBytes).toBe(1024 * MI);
    expect(relay({ retention: { maxBytes: -1 } }).data!.spec.retention.maxBytes).toBe(-1);
    // -1 is for none only where none is allowed, and only as the number.
    expect(agent({ maxBytes: -1 }).success).toBe(false);
    expect(relay({ retention: { maxBytes: "-1" } }).success).toBe(false);
  });

  it.each([
    "64Mo",
    "-5Mi",
    "0.5",
    "1e400",
    "99999999Ei",
    "",
    " ",
    " 64Mi",
    "64Mi ",
    "64 Mi",
    "1000m",
    "+64Mi",
    "1.5Mi",
    "0.5Ki",
    "none",
    0.5,
    true,
    null,
    {},
    [64],
    9e15,
  ])("refuses %j with the field's path and what it takes", (bad) => {
    const r = agent({ maxBytes: bad });
    expect(r.success).toBe(false);
    expect(r.error!.issues).toEqual([
      expect.objectContaining({
        path: ["spec", "inbox", "maxBytes"],
        message: expect.stringMatching(/^must be a whole number of bytes, or one with a binary .* from 1Mi to 1Pi$/),
      }),
    ]);
  });

  it("holds each field to its range, in bytes however it is written", () => {
    expect(agent({ maxBytes: "1536Ki" }).data?.spec.inbox.maxBytes).toBe(1536 * 1024);
    expect(agent({ maxBytes: "2e6" }).data?.spec.inbox.maxBytes).toBe(2_000_000);
    expect(agent({ maxMessageBytes: "16Mi" }).success).toBe(true);
    expect(agent({ maxMessageBytes: "17M" }).success).toBe(false);
    expect(agent({ maxMessageBytes: "1023" }).success).toBe(false);
    expect(agent({ maxBytes: "1Mi" }).success).toBe(true);
    expect(agent({ maxBytes: "1M" }).success).toBe(false);
    expect(agent({ maxBytes: "1Pi" }).success).toBe(true);
    expect(agent({ maxBytes: "1025Ti" }).success).toBe(false);
  });

  it("is an int-or-string in the CRD, with the pattern and a CEL rule the API server checks", () => {
    const meta = (ByteSize({ min: 1024 }) as unknown as { meta(): Record<string, unknown> }).meta();
    expect(meta).toMatchObject({ "x-kubernetes-int-or-string": true, pattern: BYTE_SIZE_RE.source });
    // CEL reads the pattern as written: no backslash to escape.
    expect(BYTE_SIZE_RE.source).not.toContain("\\");
    const [rule] = meta["x-kubernetes-validations"] as { rule: string }[];
    expect(rule!.rule).toContain("quantity(self).isInteger()");
  });
});
