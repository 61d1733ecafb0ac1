import { randomBytes } from "node:crypto";
import { decode, encodeAccount, encodeUser } from "@nats-io/jwt";
import { createAccount, createOperator, createUser, fromPublic, fromSeed, Prefix } from "@nats-io/nkeys";
import { describe, expect, it } from "vitest";
import { keyPairOfRawSeed, keyPairOfSeed, newKeyPair } from "./key-pair.ts";

const te = new TextEncoder();

describe("keyPairOfSeed", () => {
  it("is the key pair @nats-io/nkeys makes of the same seed, for every signing role", () => {
    for (const theirs of [createOperator(), createAccount(), createUser(), createOperator(), createAccount()]) {
      const seed = new TextDecoder().decode(theirs.getSeed());
      const ours = keyPairOfSeed(seed);
      expect(ours.getPublicKey()).toBe(theirs.getPublicKey());
      expect(ours.getSeed()).toEqual(theirs.getSeed());
      expect(ours.getPrivateKey()).toEqual(theirs.getPrivateKey());
      const data = randomBytes(200);
      // Ed25519 is deterministic: the same signature, which each side verifies.
      expect(ours.sign(data)).toEqual(theirs.sign(data));
      expect(fromPublic(theirs.getPublicKey()).verify(data, ours.sign(data))).toBe(true);
      expect(ours.verify(data, theirs.sign(data))).toBe(true);
      const flipped = ours.sign(data);
      flipped[7]! ^= 1;
      expect(ours.verify(data, flipped)).toBe(false);
    }
  });

  it("derives from a raw seed what nkeys derives, and makes fresh pairs of the role asked", () => {
    const raw = randomBytes(32);
    const theirs = fromSeed(te.encode(new TextDecoder().decode(keyPairOfRawSeed(Prefix.Account, raw).getSeed())));
    expect(keyPairOfRawSeed(Prefix.Account, raw).getPublicKey()).toBe(theirs.getPublicKey());
    expect(newKeyPair(Prefix.User).getPublicKey()).toMatch(/^U[A-Z2-7]{55}$/);
    expect(newKeyPair(Prefix.User).getPublicKey()).not.toBe(newKeyPair(Prefix.User).getPublicKey());
  });

  it("refuses what is not a seed, and a pair cleared", () => {
    expect(() => keyPairOfSeed("SAAGARBAGE")).toThrow();
    expect(() => keyPairOfSeed(fromSeed(createAccount().getSeed()).getPublicKey())).toThrow();
    expect(() => keyPairOfRawSeed(Prefix.Account, new Uint8Array(31))).toThrow(/32 bytes/);
    const kp = newKeyPair(Prefix.Account);
    kp.clear();
    expect(() => kp.sign(te.encode("x"))).toThrow(/cleared/);
  });

  it("signs account and user JWTs that read back with the issuer and subject asked", async () => {
    const operator = keyPairOfSeed(new TextDecoder().decode(createOperator().getSeed()));
    const account = newKeyPair(Prefix.Account);
    const accountJwt = await encodeAccount("a", account.getPublicKey(), {}, { signer: operator });
    expect(decode(accountJwt)).toMatchObject({ iss: operator.getPublicKey(), sub: account.getPublicKey() });
    const user = newKeyPair(Prefix.User);
    const userJwt = await encodeUser("u", user, account);
    expect(decode(userJwt)).toMatchObject({ iss: account.getPublicKey(), sub: user.getPublicKey() });
    // The signature is over the header and claims, by the issuer's key.
    const [h, c, sig] = userJwt.split(".");
    expect(fromPublic(account.getPublicKey()).verify(te.encode(`${h}.${c}`), Buffer.from(sig!, "base64url"))).toBe(
      true,
    );
  });
});
