// The hand-off secret (docs/agent.md#hand-off-signature): with spec.handler, a Secret
// `<name>-handoff` made once, mounted into the runtime (which signs each hand-off with it) and
// given to the pod's sidecars as IFP_HANDOFF_SECRET (so that the application beside the runtime
// can check the signature without configuration).
import type { V1Deployment } from "@kubernetes/client-node";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import type { AgentContext } from "./context.ts";
import type { Owner } from "../../reconcile/settings.ts";
import { ensureGeneratedSecret, type LocalApiOutcome } from "./local-api.ts";

export const HANDOFF_SECRET_DIR = "/etc/ifp/handoff";
export const HANDOFF_SECRET_KEY = "handoff.key";
export const HANDOFF_SECRET_ENV = "IFP_HANDOFF_SECRET";
export const handoffSecretName = (agentName: string) => `${agentName}-handoff`;

/** The runtime Deployment with the secret mounted and passed, and the sidecars given it (pure; a copy). */
export function withHandoffSecret(deployment: V1Deployment, owner: Owner): V1Deployment {
  const d = structuredClone(deployment);
  const pod = d.spec!.template.spec!;
  const secretName = handoffSecretName(owner.metadata.name);
  for (const c of pod.containers) {
    if (c.name === "runtime") {
      c.args = [...(c.args ?? []), `--handoff-secret-file=${HANDOFF_SECRET_DIR}/${HANDOFF_SECRET_KEY}`];
      c.volumeMounts = [...(c.volumeMounts ?? []), { name: "handoff", mountPath: HANDOFF_SECRET_DIR, readOnly: true }];
    } else if (!(c.env ?? []).some((e) => e.name === HANDOFF_SECRET_ENV)) {
      c.env = [
        ...(c.env ?? []),
        { name: HANDOFF_SECRET_ENV, valueFrom: { secretKeyRef: { name: secretName, key: HANDOFF_SECRET_KEY } } },
      ];
    }
  }
  pod.volumes = [
    ...(pod.volumes ?? []),
    { name: "handoff", secret: { secretName, items: [{ key: HANDOFF_SECRET_KEY, path: HANDOFF_SECRET_KEY }] } },
  ];
  return d;
}

/**
 * With spec.handler: the secret, made once and kept while the Agent is (rotate it by writing a new
 * value and restarting the pods); one the operator did not make for this Agent is refused.
 */
export async function ensureHandoffSecret(
  ctx: AgentContext,
  obj: CustomObject,
  owner: Owner,
  agent: Pick<Agent, "spec">,
): Promise<LocalApiOutcome> {
  if (!agent.spec.handler) return { applied: [] };
  return ensureGeneratedSecret(ctx, obj, owner, {
    name: handoffSecretName(owner.metadata.name),
    key: HANDOFF_SECRET_KEY,
    reason: "GeneratedHandoffSecret",
    invalidReason: "InvalidHandoffSecret",
    what: "hand-off signing secret",
  });
}
