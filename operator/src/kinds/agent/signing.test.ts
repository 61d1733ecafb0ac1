import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadKeyring } from "../../../../runtime/src/agent/keyring.ts";
import { generateSigningKey } from "../../../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem, generateEncryptionKey } from "../../../../runtime/src/protocol/encryption.ts";
import { AgentSpec } from "../../../../runtime/src/resources/agent.ts";
import { planSigningKeys } from "./signing.ts";

const b64 = (s: string) => Buffer.from(s).toString("base64");
const spec = (s: object = {}) => AgentSpec.parse({ agentId: "a", signing: s }).signing;
const t0 = new Date("2026-11-01T00:00:00Z");
const base = () => ({ "signing.key": b64(generateSigningKey().privateKeyPem), "encryption.key": b64("x25519") });

describe("planSigningKeys", () => {
  it("leaves the Secret alone without a request, and keeps other keys through a rotation", () => {
    const data = base();
    expect(planSigningKeys(data, spec(), "", t0)).toMatchObject({
      data: undefined,
      set: { keys: [{ keyId: "key-1", status: "active" }] },
    });
    const r = planSigningKeys(data, spec({ rotate: "a" }), "", t0);
    expect(r.data!["encryption.key"]).toBe(data["encryption.key"]);
    expect(r.data!["retired-1.key"]).toBe(data["signing.key"]);
    expect(r.nextDue).toBe(t0.getTime() + 168 * 3600_000);
  });

  it("refuses a key set that is not one, or that does not name signing.key as active", () => {
    const data = base();
    expect(planSigningKeys({ ...data, "keys.json": b64("{not json") }, spec(), "", t0).error).toMatch(
      /keys.json is not a key set/,
    );
    expect(
      planSigningKeys(
        { ...data, "keys.json": b64(JSON.stringify({ keys: [{ keyId: "k", publicKey: "p", status: "revoked" }] })) },
        spec(),
        "",
        t0,
      ).error,
    ).toMatch(/does not name signing.key/);
    const other = planSigningKeys(base(), spec({ rotate: "a" }), "", t0).data!;
    expect(planSigningKeys({ ...other, "signing.key": data["signing.key"] }, spec(), "", t0).error).toMatch(
      /does not name signing.key/,
    );
    expect(planSigningKeys({ "signing.key": b64("garbage") }, spec(), "", t0).error).toMatch(/PKCS#8/);
    expect(planSigningKeys({}, spec(), "", t0).error).toMatch(/no signing.key/);
  });

  it("revokes on request a retired key at once, ignores unknown ids, refuses the active key", () => {
    const rotated = planSigningKeys(base(), spec({ rotate: "a" }), "", t0).data!;
    const revoked = planSigningKeys(rotated, spec({ rotate: "a", revoke: ["key-1", "nope"] }), "", t0);
    expect(revoked.set.keys.map((k) => k.status)).toEqual(["revoked", "active"]);
    expect(revoked.data!["retired-1.key"]).toBeUndefined();
    expect(planSigningKeys(revoked.data!, spec({ rotate: "a", revoke: ["key-1-r2"] }), "", t0).error).toMatch(
      /names the active key key-1-r2/,
    );
  });

  it("gives the runtime a start-up error for a key set that does not match its key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ifp-keyring-"));
    const data = planSigningKeys(base(), spec({ rotate: "a" }), "", t0).data!;
    for (const [k, v] of Object.entries(data)) writeFileSync(join(dir, k), Buffer.from(v, "base64"));
    const ok = await loadKeyring(join(dir, "signing.key"), "a", "key-1");
    expect(ok.signing.keyId).toBe("key-1-r2");
    expect(ok.signing.transition?.map((t) => t.keyId)).toEqual(["key-1"]);
    writeFileSync(join(dir, "signing.key"), generateSigningKey().privateKeyPem);
    await expect(loadKeyring(join(dir, "signing.key"), "a", "key-1")).rejects.toThrow(/does not name/);
    writeFileSync(join(dir, "keys.json"), "[]");
    await expect(loadKeyring(join(dir, "signing.key"), "a", "key-1")).rejects.toThrow(/not a signing key set/);
  });

  it("replaces the encryption key with the signing key, retiring the old one alongside until both are revoked", () => {
    const first = generateEncryptionKey();
    const data = { "signing.key": b64(generateSigningKey().privateKeyPem), "encryption.key": b64(first.privateKeyPem) };
    const rotated = planSigningKeys(data, spec({ rotate: "a" }), "2026-10-01T00:00:00Z", t0);
    const next = encryptionKeyFromPem(Buffer.from(rotated.data!["encryption.key"]!, "base64"));
    expect(next.keyId).not.toBe(first.keyId);
    expect(rotated.data!["retired-encryption-1.key"]).toBe(data["encryption.key"]);
    expect(rotated.set.encryption).toEqual([
      {
        keyId: first.keyId,
        publicKey: first.publicKey,
        status: "retired",
        created: "2026-10-01T00:00:00Z",
        retired: "2026-11-01T00:00:00Z",
        revokeAt: "2026-11-08T00:00:00Z",
        file: "retired-encryption-1.key",
      },
      { keyId: next.keyId, publicKey: next.publicKey, status: "active", created: "2026-11-01T00:00:00Z" },
    ]);
    expect(rotated.events).toContainEqual(expect.stringMatching(/^generated encryption key /));
    // Nothing to do until the transition ends; then both retired keys are revoked and their files go.
    expect(
      planSigningKeys(rotated.data!, spec({ rotate: "a" }), "", new Date("2026-11-07T00:00:00Z")).data,
    ).toBeUndefined();
    const due = planSigningKeys(rotated.data!, spec({ rotate: "a" }), "", new Date("2026-11-08T00:00:01Z"));
    expect(due.set.encryption!.map((k) => k.status)).toEqual(["revoked", "active"]);
    expect(due.data!["retired-encryption-1.key"]).toBeUndefined();
    expect(due.data!["retired-1.key"]).toBeUndefined();
    // Revoking the signing key at once revokes the encryption key retired beside it; naming the encryption key too.
    for (const revoke of [["key-1"], [first.keyId]]) {
      const now = planSigningKeys(rotated.data!, spec({ rotate: "a", revoke }), "", t0);
      expect(now.set.encryption!.map((k) => k.status)).toEqual(["revoked", "active"]);
      expect(now.data!["retired-encryption-1.key"]).toBeUndefined();
    }
    // A second rotation retires the second key, and the first stays as it was.
    const again = planSigningKeys(due.data!, spec({ rotate: "b" }), "", new Date("2026-11-09T00:00:00Z"));
    expect(
      again.set.encryption!.map(
        (k) => `${k.keyId === next.keyId ? "next" : k.keyId === first.keyId ? "first" : "third"} ${k.status}`,
      ),
    ).toEqual(["first revoked", "next retired", "third active"]);
    expect(again.data!["retired-encryption-2.key"]).toBe(rotated.data!["encryption.key"]);
  });

  it("leaves an unusable encryption key as it is through a rotation", () => {
    const r = planSigningKeys(base(), spec({ rotate: "a" }), "", t0);
    expect(r.error).toBeUndefined();
    expect(r.set.encryption).toBeUndefined();
  });

  it("gives the runtime the retired encryption keys to decrypt with, and the revoked ids", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ifp-keyring-"));
    const first = generateEncryptionKey();
    const rotated = planSigningKeys(
      { "signing.key": b64(generateSigningKey().privateKeyPem), "encryption.key": b64(first.privateKeyPem) },
      spec({ rotate: "a" }),
      "",
      t0,
    ).data!;
    for (const [k, v] of Object.entries(rotated)) writeFileSync(join(dir, k), Buffer.from(v, "base64"));
    const ring = await loadKeyring(join(dir, "signing.key"), "a", "key-1");
    expect(ring.encryption!.retired.map((k) => k.keyId)).toEqual([first.keyId]);
    expect(ring.encryption!.published.map((k) => [k.status, k.type, k.use])).toEqual([
      ["retired", "x25519", "encryption"],
      ["active", "x25519", "encryption"],
    ]);
    writeFileSync(join(dir, "retired-encryption-1.key"), generateEncryptionKey().privateKeyPem);
    await expect(loadKeyring(join(dir, "signing.key"), "a", "key-1")).rejects.toThrow(
      /not the private half of retired encryption key/,
    );
  });
});
