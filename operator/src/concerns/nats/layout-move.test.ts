import { describe, expect, it } from "vitest";
import { accountLimitsOf, DEFAULT_ACCOUNT_LIMITS } from "./account-limits.ts";
import { CredentialIssuer, generateKeys } from "./credential-issuer.ts";
import { layoutOfAccountJwt } from "./layout-move.ts";
import { dataAccountOf, sharedRuntimeAccountJwt } from "./shared-accounts.ts";

describe("layoutOfAccountJwt", () => {
  it("tells a runtime account of the isolated layout (its import of $JS.API.INFO) from one of the per-agent layout", async () => {
    const keys = generateKeys();
    const issuer = CredentialIssuer.fromKeys(keys);
    const account = issuer.accountOf("uid-1");
    const k = issuer.sharedLayoutKeys();
    const limits = accountLimitsOf(undefined, DEFAULT_ACCOUNT_LIMITS, false);
    const isolated = (opts?: Parameters<typeof sharedRuntimeAccountJwt>[5]) =>
      sharedRuntimeAccountJwt(k.operator, account, "agent:a/b", dataAccountOf(keys.signing, "a"), k.signingKey, opts);
    expect(layoutOfAccountJwt(await issuer.runtimeAccountJwt(account, "agent:a/b", limits))).toBe("per-agent");
    // Fenced for a move, it is still the per-agent layout's.
    expect(layoutOfAccountJwt(await issuer.runtimeAccountJwt(account, "agent:a/b", limits, 1))).toBe("per-agent");
    expect(layoutOfAccountJwt(await isolated())).toBe("isolated");
    // Imports of another kind make no account isolated.
    expect(layoutOfAccountJwt(await isolated({ imports: [] }))).toBe("per-agent");
  });
});
