import { describe, expect, it } from "vitest";
import { generateSigningKey, privateKeyFromPem, rawPublicKey } from "../../../../runtime/src/protocol/keys.ts";
import { encryptionKeyFromPem } from "../../../../runtime/src/protocol/encryption.ts";
import { resyncs, until } from "../../support/helpers.ts";

import {
  NS,
  agentYaml,
  condition,
  events,
  get,
  cp,
  manager,
  poke,
  readyAgent,
  secretYaml,
  untilObserved,
  untilReason,
  useOperator,
} from "../../support/operator.ts";

useOperator();

describe("Agent", () => {
  it("adds an encryption key to a signing Secret it made without one, and never replaces it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("gina"));
    const first = await until("gina's signing Secret", () =>
      get("secret", "gina-signing")?.data?.["encryption.key"] ? get("secret", "gina-signing") : undefined,
    );
    // As an operator before encryption keys would have left it: the signing key alone.
    const { "encryption.key": _dropped, ...rest } = first.data;
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "secret",
      "gina-signing",
      "--type=json",
      "-p",
      JSON.stringify([{ op: "remove", path: "/data/encryption.key" }]),
    ]);
    cp.kubectl(["-n", NS, "patch", "agent", "gina", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    const added = await until("the encryption key added again", () => {
      const s = get("secret", "gina-signing");
      return s.data["encryption.key"] && s.data["encryption.key"] !== first.data["encryption.key"] ? s : undefined;
    });
    expect(added.data["signing.key"]).toBe(rest["signing.key"]);
    const pub = encryptionKeyFromPem(Buffer.from(added.data["encryption.key"], "base64").toString()).publicKey;
    await until(
      "status with the new key",
      () => get("agent", "gina").status?.encryptionKey?.publicKey === pub || undefined,
    );
    // Later passes leave it as it is.
    cp.kubectl(["-n", NS, "patch", "agent", "gina", "--type=merge", "-p", '{"spec":{"replicas":1}}']);
    await untilObserved("agent", "gina", 3);
    await resyncs(manager, 1);
    expect(get("secret", "gina-signing").data["encryption.key"], "the encryption key").toBe(
      added.data["encryption.key"],
    );
    expect(events("gina").map((e) => e.reason)).toContain("GeneratedEncryptionKey");
  });

  it("signs with the Secret spec.signing names: used as it is, never written, its public key in status", async () => {
    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("frank-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "frank" }),
    );
    const own = get("secret", "frank-key");
    const agent = await readyAgent("frank", "  signing: {secretName: frank-key}\n");
    expect(agent.status.signingKey).toEqual({
      keyId: "key-1",
      publicKey: key.publicKey,
      secretName: "frank-key",
      created: own.metadata.creationTimestamp,
    });
    const pod = get("deployment", "frank").spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === "signing").secret.secretName).toBe("frank-key");
    expect(pod.containers[0].args).toContain("--signing-key=/etc/ifp/signing/signing.key");
    // The user's Secret has no encryption.key: none is added, none mounted, none in status.
    expect(pod.containers[0].args).not.toContain("--encryption-key=/etc/ifp/signing/encryption.key");
    expect(pod.volumes.find((v: any) => v.name === "signing").secret.items).toBeUndefined();
    expect(agent.status.encryptionKey).toBeUndefined();
    expect(get("configmap", "frank-manifest").data["manifest.yaml"]).toContain(
      `ifp.dev/signing-key-created: ${own.metadata.creationTimestamp}`,
    );
    // No key of its own: nothing generated, no Secret under the default name.
    expect(get("secret", "frank-signing")).toBeUndefined();
    expect(events("frank").map((e) => e.reason)).not.toContain("GeneratedSigningKey");
    // A second pass (a spec change) reads the Secret again and still leaves it as it was.
    cp.kubectl(["-n", NS, "patch", "agent", "frank", "--type=merge", "-p", '{"spec":{"replicas":2}}']);
    await untilObserved("agent", "frank", 2);
    await resyncs(manager, 1);
    const now = get("secret", "frank-key");
    expect(now.metadata.resourceVersion, "the user's signing Secret written").toBe(own.metadata.resourceVersion);
    expect(now.data["signing.key"]).toBe(own.data["signing.key"]);
    expect(now.metadata.ownerReferences).toBeUndefined();
    expect(now.metadata.labels).toEqual({ "ifp.dev/agent": "frank" });
    expect(get("agent", "frank").status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("waits for a signing Secret named in spec.signing.secretName that does not exist yet, and never makes it", async () => {
    cp.kubectl(["apply", "-f", "-"], agentYaml("hank", "  signing: {secretName: hank-key}\n"));
    const blocked = await untilReason("agent", "hank", "SigningSecretMissing");
    expect(condition(blocked, "Ready")).toMatchObject({
      status: "False",
      message:
        "Secret hank-key named in spec.signing.secretName does not exist in namespace ifp-test; nothing is rendered until it does",
    });
    expect(blocked.status.signingKey).toBeUndefined();
    expect(get("secret", "hank-key")).toBeUndefined();
    expect(get("deployment", "hank")).toBeUndefined();

    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("hank-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "hank" }),
    );
    poke("agent", "hank"); // the Secret is not watched (not ours)
    const fixed = await untilReason("agent", "hank", "RuntimeNotReady");
    expect(fixed.status.signingKey.publicKey).toBe(key.publicKey);
    // The Secret stays as the user made it: no key of the operator's own was put in.
    expect(Object.keys(get("secret", "hank-key").data)).toEqual(["signing.key"]);
  });

  it("reports a signing Secret without a usable key as InvalidSigningKey, and applies nothing until it is fixed", async () => {
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("grace-key", { "other.key": "not a key" }, { "ifp.dev/agent": "grace" }),
    );
    const rv = get("secret", "grace-key").metadata.resourceVersion;
    cp.kubectl(["apply", "-f", "-"], agentYaml("grace", "  signing: {secretName: grace-key}\n"));
    const blocked = await untilReason("agent", "grace", "InvalidSigningKey");
    expect(condition(blocked, "Ready")).toMatchObject({
      status: "False",
      message: "Secret grace-key has no signing.key",
    });
    expect(condition(blocked, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSigningKey" });
    expect(blocked.status.signingKey).toBeUndefined();
    expect(get("deployment", "grace")).toBeUndefined();
    // Never overwritten with a key of the operator's own, though it holds none.
    expect(get("secret", "grace-key").metadata.resourceVersion).toBe(rv);
    // The Event follows the status write: wait for it rather than race it.
    await until("the Warning/InvalidSigningKey Event", () =>
      events("grace").some((e) => `${e.type}/${e.reason}` === "Warning/InvalidSigningKey"),
    );

    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("grace-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "grace" }),
    );
    poke("agent", "grace"); // the Secret is not watched (not ours)
    const fixed = await untilReason("agent", "grace", "RuntimeNotReady");
    expect(fixed.status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("refuses a signing Secret neither made nor labelled for the Agent: Ready False, Stalled, an Event, nothing applied", async () => {
    const key = generateSigningKey();
    cp.kubectl(
      ["apply", "-f", "-"],
      secretYaml("eve-key", { "signing.key": key.privateKeyPem }, { "ifp.dev/agent": "someone-else" }),
    );
    await readyAgent("victim");
    for (const [name, secret] of [
      ["eve", "eve-key"],
      ["mallory", "victim-signing"],
    ] as const) {
      cp.kubectl(["apply", "-f", "-"], agentYaml(name, `  signing: {secretName: ${secret}}\n`));
      const refused = await untilReason("agent", name, "ForeignSecret");
      expect(condition(refused, "Ready")).toMatchObject({ status: "False", reason: "ForeignSecret" });
      expect(condition(refused, "Ready").message).toMatch(
        new RegExp(`spec.signing.secretName: Secret ${secret} .*ifp.dev/agent=${name}`),
      );
      expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "ForeignSecret" });
      expect(refused.status.signingKey).toBeUndefined();
      expect(get("deployment", name)).toBeUndefined();
      await until(`the Warning/ForeignSecret Event of ${name}`, () =>
        events(name).some((e) => `${e.type}/${e.reason}` === "Warning/ForeignSecret"),
      );
    }
    // Labelled for eve by its owner: used.
    cp.kubectl(["-n", NS, "label", "secret", "eve-key", "--overwrite", "ifp.dev/agent=eve"]);
    poke("agent", "eve");
    const ok = await untilReason("agent", "eve", "RuntimeNotReady");
    expect(ok.status.signingKey.publicKey).toBe(key.publicKey);
  });

  it("rotates the signing key on request: both published during the transition, the old one revoked after it", async () => {
    const first = await readyAgent("rot");
    const oldKey = first.status.signingKey.publicKey;
    const hash = (name: string) => get("deployment", name).spec.template.metadata.annotations;
    const before = JSON.stringify(hash("rot"));
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "rot",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"first","transition":"4s"}}}',
    ]);
    const rotated = await until("two keys in status", () => {
      const a = get("agent", "rot");
      return a.status.signingKeys?.length === 2 ? a : undefined;
    });
    expect(rotated.status.signingKeys.map((k: any) => [k.keyId, k.status, k.publicKey === oldKey])).toEqual([
      ["key-1", "retired", true],
      ["key-1-r2", "active", false],
    ]);
    expect(rotated.status.signingKeys[0].revokeAt).toBeDefined();
    expect(rotated.status.signingKey).toMatchObject({ keyId: "key-1-r2" });
    const secret = get("secret", "rot-signing");
    // The encryption key rotates with it: the old one kept beside the retired signing key.
    expect(Object.keys(secret.data).sort()).toEqual([
      "encryption.key",
      "keys.json",
      "retired-1.key",
      "retired-encryption-1.key",
      "signing.key",
    ]);
    await until(
      "the new encryption key in status",
      () => get("agent", "rot").status.encryptionKey?.keyId !== first.status.encryptionKey.keyId,
    );
    expect(rawPublicKey(privateKeyFromPem(Buffer.from(secret.data["retired-1.key"], "base64").toString()))).toBe(
      oldKey,
    );
    await until("the pods rolled for the new key", () => JSON.stringify(hash("rot")) !== before);
    await until("the RotatedSigningKey Event", () => events("rot").some((e) => e.reason === "RotatedSigningKey"));
    // On schedule, without any change to the Agent: revoked, its private half gone.
    const revoked = await until("key-1 revoked", () => {
      const a = get("agent", "rot");
      return a.status.signingKeys?.[0]?.status === "revoked" ? a : undefined;
    });
    expect(revoked.status.signingKeys[0].revoked).toBeDefined();
    expect(Object.keys(get("secret", "rot-signing").data).sort()).toEqual([
      "encryption.key",
      "keys.json",
      "signing.key",
    ]);
    // Revoking the active key is refused: rotate first.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "rot",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1-r2"]}}}',
    ]);
    const refused = await untilReason("agent", "rot", "InvalidSigningKey");
    expect(condition(refused, "Ready").message).toMatch(/names the active key key-1-r2/);
  });

  it("revokes a retired signing key at once when spec.signing.revoke names it, long before its transition ends", async () => {
    const first = await readyAgent("hasty");
    const oldKey = first.status.signingKey.publicKey;
    const keysJson = () =>
      JSON.parse(Buffer.from(get("secret", "hasty-signing").data["keys.json"], "base64").toString());
    // A rotation with a week's transition: nothing is due for revocation before then.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"rotate":"2026-11","transition":"168h"}}}',
    ]);
    const rotated = await until("two keys in status", () => {
      const a = get("agent", "hasty");
      return a.status.signingKeys?.length === 2 ? a : undefined;
    });
    expect(rotated.status.signingKeys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    const revokeAt = rotated.status.signingKeys[0].revokeAt;
    expect(Date.parse(revokeAt) - Date.now()).toBeGreaterThan(160 * 3600_000);
    expect(Object.keys(get("secret", "hasty-signing").data)).toContain("retired-1.key");
    expect(keysJson().keys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "retired"],
      ["key-1-r2", "active"],
    ]);
    const activeBefore = get("secret", "hasty-signing").data["signing.key"];

    // Known to be compromised: revoked now.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1"]}}}',
    ]);
    const revoked = await until("key-1 revoked in status", () => {
      const a = get("agent", "hasty");
      return a.status.signingKeys?.[0]?.status === "revoked" ? a : undefined;
    });
    const record = revoked.status.signingKeys[0];
    expect(record).toMatchObject({ keyId: "key-1", publicKey: oldKey, status: "revoked" });
    expect(record.revokeAt).toBeUndefined();
    expect(Date.parse(record.revoked)).toBeLessThan(Date.parse(revokeAt));
    expect(revoked.status.signingKeys[1]).toMatchObject({ keyId: "key-1-r2", status: "active" });
    expect(revoked.status.signingKey).toMatchObject({ keyId: "key-1-r2" });
    // In the Secret: revoked in keys.json, its private half (and the encryption key retired with it) gone, the active key as it was.
    const secret = get("secret", "hasty-signing");
    expect(Object.keys(secret.data).sort()).toEqual(["encryption.key", "keys.json", "signing.key"]);
    expect(secret.data["signing.key"]).toBe(activeBefore);
    expect(keysJson().keys).toEqual([
      expect.objectContaining({ keyId: "key-1", publicKey: oldKey, status: "revoked", revoked: record.revoked }),
      expect.objectContaining({ keyId: "key-1-r2", status: "active" }),
    ]);
    expect(keysJson().keys[0].file).toBeUndefined();
    const event = await until("the RevokedSigningKey Event", () =>
      events("hasty").find(
        (e) => e.reason === "RevokedSigningKey" && /(^|; )revoked signing key key-1(;|$)/.test(e.message),
      ),
    );
    expect(event.type).toBe("Normal");

    // The active key cannot be revoked: an agent always has a key to sign with.
    cp.kubectl([
      "-n",
      NS,
      "patch",
      "agent",
      "hasty",
      "--type=merge",
      "-p",
      '{"spec":{"signing":{"revoke":["key-1","key-1-r2"]}}}',
    ]);
    const refused = await untilReason("agent", "hasty", "InvalidSigningKey");
    expect(condition(refused, "Ready")).toMatchObject({
      status: "False",
      message:
        "Secret hasty-signing spec.signing.revoke names the active key key-1-r2; set spec.signing.rotate to replace it first",
    });
    expect(condition(refused, "Stalled")).toMatchObject({ status: "True", reason: "InvalidSigningKey" });
    await until("the Warning/InvalidSigningKey Event", () =>
      events("hasty").some((e) => `${e.type}/${e.reason}` === "Warning/InvalidSigningKey"),
    );
    expect(get("secret", "hasty-signing").data["signing.key"]).toBe(activeBefore);
    expect(keysJson().keys.map((k: any) => [k.keyId, k.status])).toEqual([
      ["key-1", "revoked"],
      ["key-1-r2", "active"],
    ]);
  });
});
