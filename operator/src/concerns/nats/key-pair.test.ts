import { randomBytes } from "node:crypto";
import { decode, encodeAccount, encodeUser } from "@nats-io/jwt";
import { createAccount, createOperator, createUser, fromPublic, fromSeed, Prefix } from "@nats-io/nkeys";
import { describe, expect, it } from "vitest";
import { decodeVerified, keyPairOfRawSeed, keyPairOfSeed, newKeyPair } from "./key-pair.ts";

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

describe("decodeVerified", () => {
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString("base64url");

  it("reads every JWT @nats-io/jwt's decode reads as it does: operator, account and user claims", async () => {
    const operator = createOperator();
    const account = newKeyPair(Prefix.Account);
    const signing = createAccount();
    const jwts = [
      await encodeAccount("a", account.getPublicKey(), { limits: { conn: 3 } }, { signer: operator }),
      await encodeUser("u", newKeyPair(Prefix.User), account, { pub: { allow: ["x.>"] } }, { exp: 2_000_000_000 }),
      await encodeUser("s", createUser(), signing, {}, { signer: signing }),
    ];
    for (const jwt of jwts) expect(decodeVerified(jwt)).toEqual(decode(jwt));
  });

  it("refuses what decode refuses: altered claims, another key's signature, a foreign header, not three parts", async () => {
    const account = newKeyPair(Prefix.Account);
    const jwt = await encodeUser("u", newKeyPair(Prefix.User), account, {}, { exp: 2_000_000_000 });
    const [h, c, sig] = jwt.split(".") as [string, string, string];
    const claims = JSON.parse(Buffer.from(c, "base64url").toString());
    const longer = `${h}.${b64({ ...claims, exp: 4_000_000_000 })}.${sig}`;
    // Signed by a stranger's key, in the name of the account: iss is the key that must verify.
    const stranger = newKeyPair(Prefix.Account);
    const strangers = `${h}.${c}.${Buffer.from(stranger.sign(te.encode(`${h}.${c}`))).toString("base64url")}`;
    const wrongIss = `${h}.${b64({ ...claims, iss: stranger.getPublicKey() })}.${sig}`;
    const notPublic = `${h}.${b64({ ...claims, iss: new TextDecoder().decode(stranger.getSeed()) })}.${sig}`;
    const foreignAlg = `${b64({ typ: "JWT", alg: "HS256" })}.${c}.${sig}`;
    for (const bad of [longer, strangers, wrongIss, notPublic, foreignAlg, `${h}.${c}`, "", `${jwt}.x`]) {
      expect(() => decode(bad), bad).toThrow();
      expect(() => decodeVerified(bad), bad).toThrow();
    }
  });
});
