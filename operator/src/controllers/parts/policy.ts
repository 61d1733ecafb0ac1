// What an Agent or Relay may ask of its pods, checked before anything mounts it: the runtime
// image (--allowed-images), the pod settings (pod-policy.ts), the ServiceAccount it names
// (identity.ts) and, for an Agent, the Secret of its introduction tokens.
import type { V1Secret } from "@kubernetes/client-node";
import type { Blocker } from "../conditions.ts";
import type { ReconcileContext } from "../context.ts";
import { serviceAccountRefusal } from "../identity.ts";
import type { Part } from "../pipeline.ts";
import { podSettingsRefusal, readSecret } from "../pod-policy.ts";
import { imageRefusal, secretUsableBy } from "../references.ts";
import type { Owner } from "../settings.ts";
import type { RuntimePass, RuntimeSpec } from "./pass.ts";

type IntroductionSpec = { spec: { inbox?: { introductionTokens?: { secretName: string } } } };

/**
 * The first refusal, if any: the workload is held while there is one (a Relay's stream is still
 * kept). With `ends` (an Agent) the pass ends there, before anything is made for the resource
 * (its signing key, local API token, hand-off secret, certificate, NATS credential, children):
 * the status and a Warning say why, and the first pass after the fix makes them as usual.
 */
export function policyPart<R extends RuntimeSpec & Partial<IntroductionSpec>>(
  opts: { ends?: boolean } = {},
): Part<RuntimePass<R>> {
  return {
    name: "policy",
    async ensure(ctx, pass) {
      const blocked = await policyRefusal(ctx, pass);
      return blocked ? { blocked, holds: true, ...(opts.ends ? { ends: true } : {}) } : {};
    },
  };
}

async function policyRefusal<R extends RuntimeSpec & Partial<IntroductionSpec>>(
  ctx: ReconcileContext,
  { owner, resource: { spec } }: RuntimePass<R>,
): Promise<Blocker | undefined> {
  return (
    imageRefusal(spec.image, ctx.settings) ??
    (await introductionSecretRefusal(ctx, owner, spec.inbox?.introductionTokens)) ??
    (await podSettingsRefusal(readSecret(ctx), owner, spec.deployment, ctx.settings)) ??
    (await serviceAccountRefusal(ctx, owner, spec.deployment))
  );
}

/** The Secret of spec.inbox.introductionTokens must exist and be made or labelled for this Agent before a pod mounts it. */
async function introductionSecretRefusal(
  ctx: ReconcileContext,
  owner: Owner,
  ref: { secretName: string } | undefined,
): Promise<Blocker | undefined> {
  if (!ref) return undefined;
  const field = "spec.inbox.introductionTokens.secretName";
  const secret = await ctx.kube.read<V1Secret>("v1", "Secret", owner.metadata.namespace, ref.secretName);
  if (!secret)
    return {
      reason: "IntroductionSecretMissing",
      message: `${field}: Secret ${ref.secretName} does not exist in namespace ${owner.metadata.namespace}`,
    };
  return secretUsableBy(secret, owner, field);
}
