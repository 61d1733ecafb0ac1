import { describe, expect, it } from "vitest";
import { accountLimitsOf, DEFAULT_ACCOUNT_LIMITS } from "./account-limits.ts";

const MIB = 1024 * 1024;
const d = DEFAULT_ACCOUNT_LIMITS;

describe("accountLimitsOf", () => {
  it("reads a size as the API server holds it (a quantity) the same as parsed bytes", () => {
    const written = accountLimitsOf({ kind: "Agent", spec: { inbox: { maxBytes: "128Mi" } } }, d, false);
    const parsed = accountLimitsOf({ kind: "Agent", spec: { inbox: { maxBytes: 128 * MIB } } }, d, false);
    expect(written).toEqual(parsed);
    expect(written.disk_storage).toBe(128 * MIB + d.dataBytes);
    const relay = accountLimitsOf({ kind: "Relay", spec: { retention: { maxBytes: "2Gi", replicas: 3 } } }, d, true);
    expect(relay.disk_storage).toBe(3 * d.dataBytes + 3 * 2048 * MIB);
  });

  it("keeps -1 for an unbounded relay stream, and the CRD's default for what is absent or not a size", () => {
    expect(accountLimitsOf({ kind: "Relay", spec: { retention: { maxBytes: -1 } } }, d, false).disk_storage).toBe(
      d.dataBytes + d.unboundedRelayBytes,
    );
    expect(accountLimitsOf({ kind: "Relay", spec: { retention: { maxBytes: "64Mo" } } }, d, false).disk_storage).toBe(
      d.dataBytes + 1024 * MIB,
    );
    expect(accountLimitsOf({ kind: "Agent", spec: { inbox: { maxBytes: "0.5" } } }, d, false).disk_storage).toBe(
      64 * MIB + d.dataBytes,
    );
  });
});
