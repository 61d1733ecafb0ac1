import { decode } from "@nats-io/jwt";
import { fromPublic } from "@nats-io/nkeys";
import { describe, expect, it } from "vitest";
import { CredentialIssuer, generateKeys, keyPair } from "./credential-issuer.ts";
import { dataAccountJwt, dataAccountOf, sharedRuntimeAccountJwt } from "./shared-accounts.ts";

const te = new TextEncoder();

/** Whether the JWT's signature is the operator's, over its header and claims. */
function signedBy(jwt: string, operator: string): boolean {
  const [h, c, sig] = jwt.split(".");
  return fromPublic(operator).verify(te.encode(`${h}.${c}`), Buffer.from(sig!, "base64url"));
}

describe("the isolated layout's account JWTs", () => {
  const keys = generateKeys();
  const issuer = CredentialIssuer.fromKeys(keys);
  const k = issuer.sharedLayoutKeys();
  const operator = keyPair(keys.operator, "O").getPublicKey();
  const data = dataAccountOf(keys.signing, "team");
  const runtime = issuer.accountOf("uid-1");

  it("are signed with the issuer's operator key pair as with the operator's seed", async () => {
    expect(k.operator.getPublicKey()).toBe(operator);
    const bySeed = await sharedRuntimeAccountJwt(keys.operator, runtime, "agent:team/a", data, k.signingKey);
    const byPair = await sharedRuntimeAccountJwt(k.operator, runtime, "agent:team/a", data, k.signingKey);
    for (const jwt of [bySeed, byPair]) {
      expect(decode(jwt)).toMatchObject({ iss: operator, sub: runtime });
      expect(signedBy(jwt, operator)).toBe(true);
    }
    expect(decode(byPair).nats).toEqual(decode(bySeed).nats);
    const limits = { diskBytes: 1024, memBytes: 0 };
    const dataJwt = await dataAccountJwt(k.operator, data, k.signingKey, "team", limits);
    expect(decode(dataJwt)).toMatchObject({ iss: operator, sub: data });
    expect(signedBy(dataJwt, operator)).toBe(true);
    expect(decode(dataJwt).nats).toEqual(
      decode(await dataAccountJwt(keys.operator, data, k.signingKey, "team", limits)).nats,
    );
  });

  it("are not signed with a key pair or a seed of anything but an operator", async () => {
    const account = keyPair(keys.signing, "A");
    await expect(sharedRuntimeAccountJwt(account, runtime, "agent:team/a", data, k.signingKey)).rejects.toThrow(
      /not an operator's key pair/,
    );
    await expect(dataAccountJwt(account, data, k.signingKey, "team", { diskBytes: 1, memBytes: 0 })).rejects.toThrow(
      /not an operator's key pair/,
    );
    await expect(sharedRuntimeAccountJwt(keys.signing, runtime, "agent:team/a", data, k.signingKey)).rejects.toThrow(
      /not an NKey seed of an operator/,
    );
  });
});
