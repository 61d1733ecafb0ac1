// What an Agent or Relay may ask of its pods, checked before anything mounts it: the runtime
// image (--allowed-images), the pod settings and the ServiceAccount it names (pod-policy.ts) and,
// for an Agent, the Secret of its introduction tokens.
import type { V1Secret } from "@kubernetes/client-node";
import type { Blocker } from "../../reconcile/conditions.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { Part, Pass } from "../../reconcile/part.ts";
import { podSettingsRefusal, readSecret, serviceAccountRefusal } from "./pod-policy.ts";
import { imageRefusal, secretUsableBy } from "../../reconcile/references.ts";
import type { Owner } from "../../reconcile/settings.ts";
import type { DeploymentSettings } from "../../../../runtime/src/resources/deployment.ts";

/** What of a resource's spec the policy reads; for an Agent, also the Secret of its introduction tokens. */
type PolicySpec = {
  spec: {
    image?: string;
    deployment?: DeploymentSettings;
    inbox?: { introductionTokens?: { secretName: string } };
  };
};

/** The part of the context the policy reads. */
type PolicyContext = Pick<ReconcileContext, "kube" | "caches" | "settings">;

/**
 * The first refusal, if any: the workload is held while there is one (a Relay's stream is still
 * kept). With `ends` (an Agent) the pass ends there, before anything is made for the resource
 * (its signing key, local API token, hand-off secret, certificate, NATS credential, children):
 * the status and a Warning say why, and the first pass after the fix makes them as usual.
 */
export function policyPart<R extends PolicySpec>(
  opts: { ends?: boolean } = {},
): Part<R, object, object, PolicyContext> {
  return {
    name: "policy",
    async ensure(ctx, pass) {
      const blocked = await policyRefusal(ctx, pass);
      return blocked ? { blocked, holds: true, ...(opts.ends ? { ends: true } : {}) } : {};
    },
  };
}

async function policyRefusal<R extends PolicySpec>(
  ctx: PolicyContext,
  { owner, resource: { spec } }: Pass<R>,
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
  ctx: Pick<ReconcileContext, "kube">,
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
