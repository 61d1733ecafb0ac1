// Pure: the introduction tokens of spec.inbox.introductionTokens (IFP-5 level 0), mounted from
// the Secret the Agent names and handed to the runtime as --introduction-secret-file.
import type { V1Deployment } from "@kubernetes/client-node";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";

export const INTRODUCTION_DIR = "/etc/ifp/introduction";
export const INTRODUCTION_FILE = `${INTRODUCTION_DIR}/tokens`;

/** The Deployment with the introduction tokens mounted, or unchanged when the Agent names none. */
export function withIntroductionTokens(deployment: V1Deployment, agent: Pick<Agent, "spec">): V1Deployment {
  const tokens = agent.spec.inbox.introductionTokens;
  if (!tokens) return deployment;
  const d = structuredClone(deployment);
  const pod = d.spec!.template.spec!;
  const c = pod.containers.find((x) => x.name === "runtime")!;
  c.args = [...(c.args ?? []), `--introduction-secret-file=${INTRODUCTION_FILE}`];
  c.volumeMounts = [...(c.volumeMounts ?? []), { name: "introduction", mountPath: INTRODUCTION_DIR, readOnly: true }];
  // The runtime re-reads the file when the kubelet updates it: a new token needs no restart.
  pod.volumes = [
    ...(pod.volumes ?? []),
    { name: "introduction", secret: { secretName: tokens.secretName, items: [{ key: tokens.key, path: "tokens" }] } },
  ];
  return d;
}
