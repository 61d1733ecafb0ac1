// The Agent controller: its parts in the order they run, what its finalizer cleans up and its
// status. Level-triggered: it gets only namespace/name (pipeline.ts runs the pass).
import type { V1Deployment } from "@kubernetes/client-node";
import { agentInboxPrefix, agentPermissions } from "../../../../runtime/src/contract/nats-permissions.ts";
import { sharedAgentPermissions } from "../../../../runtime/src/contract/shared-layout.ts";
import { Agent } from "../../../../runtime/src/resources/agent.ts";
import { defaultBaseUrl } from "../../../../runtime/src/resources/expose.ts";
import type { ReconcileResult } from "../../kube/controller.ts";
import { desiredAgentChildren, type AgentResource } from "./desired.ts";
import { agentIdClaim, selectedPeers } from "./directory.ts";
import { localApiDnsNames } from "./local-api.ts";
import { agentStatus } from "./status.ts";
import type { CustomObject } from "../../reconcile/context.ts";
import type { AgentContext } from "./context.ts";
import { ensureDisruptionBudget } from "../../concerns/workload/disruption.ts";
import { exposedHosts } from "../../concerns/exposure/expose.ts";
import { AGENT_FINALIZER, agentKeyOf, agentLeftovers, deleteAgentJetStream } from "../../reconcile/finalizers.ts";
import { certificateDnsNames, childNames, serviceDnsNames } from "../../reconcile/names.ts";
import type { Pass } from "../../reconcile/part.ts";
import { checkPartOrder, finalizerPart, reconcile, type Cleanup, type Controller } from "../../reconcile/pipeline.ts";
import { requestedHosts } from "../../reconcile/references.ts";
import { deleteRuntimeData } from "../../concerns/nats/runtime-account.ts";
import { agentIdPart } from "./agent-id.ts";
import { handoffPart, localApiPart, signingKeyPart, type SigningSlots } from "./secrets.ts";
import { exposurePart, exposurePrunePart, type ExposureSlots } from "../../concerns/exposure/part.ts";
import { legacyAccessPart, releaseLegacyAccess } from "../../concerns/workload/legacy-access-part.ts";
import { natsCredentialPart, type NatsAccountSlots } from "../../concerns/nats/credential-part.ts";
import { natsLayoutGate, sharedConsumersPart } from "../../concerns/nats/layout-part.ts";
import { natsLayoutMovePart } from "../../concerns/nats/layout-move-part.ts";
import { networkPolicyPrunePart } from "../../concerns/network-policy/part.ts";
import { policyPart } from "../../concerns/pod-policy/part.ts";
import { tlsPart, tlsRefusalGate, type TlsNames, type TlsSlots } from "../../concerns/tls/part.ts";
import { trustPart } from "../../concerns/tls/trust-part.ts";
import { workloadPart } from "../../concerns/workload/part.ts";

type AgentPass = Pass<AgentResource>;

/** What an Agent's parts fill, for the parts after them and its status. */
type AgentSlots = TlsSlots & ExposureSlots & NatsAccountSlots & SigningSlots;

/** Every name the certificate may carry: the Agent's own Services' names, else one the install allows. */
const tlsNames: TlsNames<AgentPass> = {
  own: ({ owner, resource }) => [...serviceDnsNames(owner), ...localApiDnsNames(owner, resource)],
  requested: ({ resource }) => requestedHosts("spec.baseUrl", resource.spec.baseUrl, resource.spec.expose),
  dnsNames: ({ owner, resource: { spec } }) =>
    certificateDnsNames(owner, defaultBaseUrl(spec.baseUrl, spec.expose), [
      ...localApiDnsNames(owner, { spec }),
      ...(spec.tls?.dnsNames ?? []),
      ...exposedHosts(spec.expose),
    ]),
};

/** The agent's streams and buckets go with it unless spec.retention.keepOnDelete. */
const cleanup: Cleanup<AgentContext> = {
  finalizer: AGENT_FINALIZER,
  wanted: (obj) =>
    (obj.spec as { retention?: { keepOnDelete?: unknown } } | undefined)?.retention?.keepOnDelete !== true,
  what: "the agent's streams and buckets",
  // In the agent's own account: every stream there, then the account itself; its keys of the shared bucket purged.
  run: (ctx, obj) => deleteRuntimeData(ctx, obj, (jsm) => deleteAgentJetStream(jsm, agentKeyOf(obj))),
  leftovers: (obj) => agentLeftovers(agentKeyOf(obj)),
  forget(ctx, obj) {
    for (const [id, uid] of ctx.agentIds ?? []) if (uid === obj.metadata?.uid) ctx.agentIds!.delete(id);
    ctx.rollouts?.forget(`${obj.metadata?.namespace}/${obj.metadata?.name}`);
  },
};

export const agentController: Controller<Agent, AgentSlots, AgentContext> = {
  kind: "Agent",
  plural: "agents",
  schema: Agent,
  cleanup,
  blockedRetryMs: 30_000,
  gone: releaseLegacyAccess("Agent"),
  parts: checkPartOrder([
    // Refused before anything is made for it.
    agentIdPart,
    natsLayoutGate,
    tlsRefusalGate(tlsNames),
    policyPart({ ends: true }),
    finalizerPart(cleanup),
    signingKeyPart,
    localApiPart,
    handoffPart,
    tlsPart(tlsNames),
    trustPart(),
    // Before its account is pushed for this install's layout: its data moved there first, or the Agent refused.
    natsLayoutMovePart,
    natsCredentialPart(({ resource }, account, ctx) =>
      ctx.dataAccounts
        ? sharedAgentPermissions(agentInboxPrefix(resource.spec.agentId), account)
        : agentPermissions(resource.spec.agentId, agentKeyOf(resource), { a2a: resource.spec.a2a?.enabled === true }),
    ),
    sharedConsumersPart,
    exposurePart(),
    exposurePrunePart({ needsUnheld: true }),
    networkPolicyPrunePart({ needsUnheld: true }),
    workloadPart<AgentResource, SigningSlots & TlsSlots & ExposureSlots, AgentContext>({
      needs: ["signing", "tlsSecret", "exposure"],
      read: async (ctx, pass) => ({ directory: await directoryPeers(ctx, pass.obj, pass.resource) }),
      children: (ctx, { resource, found }, { directory }) =>
        desiredAgentChildren(resource, {
          settings: ctx.settings,
          signing: found.signing,
          tlsSecret: found.tlsSecret,
          exposure: found.exposure,
          directory: directory as AgentResource["spec"]["peers"] | undefined,
        }),
      gated: true,
      extras: [(ctx, { owner, resource }) => ensureDisruptionBudget(ctx, owner, resource.spec)],
    }),
    legacyAccessPart(),
  ]),
  status(ctx, { obj, owner, resource, found }, report) {
    const { namespace, name } = owner.metadata;
    const deployment = ctx.caches.get<V1Deployment>("Deployment", namespace, childNames(name).deployment);
    // Refused: nothing was made for it, and the status says only why. The keys it published
    // before (a running Agent refused later: its pods are held, not stopped) stay, as its Secret
    // was not touched; never for a duplicate agent id, whose key is never listed.
    if (report.ended) {
      const refused = agentStatus(resource, { applied: [], deployment, blocker: report.blocker });
      if (report.blocker?.reason === "DuplicateAgentId") return refused;
      return { ...refused, status: { ...publishedKeys(obj.status), ...refused.status } };
    }
    // Whether the directory may list it under its agent id: it runs either way.
    const claim = agentIdClaim(resource.spec.agentId, { namespace, name }, found.signing?.publicKey, ctx.settings);
    const { status, conditions } = agentStatus(resource, {
      applied: report.applied,
      deployment,
      blocker: report.blocker,
      waiting: found.tlsWaiting,
      queued: report.queued,
      signing: found.signing,
      tlsSecret: found.tlsSecret,
      claim,
    });
    const listedBefore = (
      (obj.status?.conditions as { type: string; status: string; message?: string }[] | undefined) ?? []
    ).find((c) => c.type === "DirectoryListed");
    const notVouched =
      !claim.vouched && (listedBefore?.status !== "False" || listedBefore.message !== claim.message)
        ? [{ reason: "AgentIdNotVouched", message: claim.message }]
        : [];
    return { status, conditions, warnings: notVouched };
  },
};

export function reconcileAgent(ctx: AgentContext, namespace: string, name: string): Promise<ReconcileResult> {
  return reconcile(agentController, ctx, namespace, name);
}

/** The peers spec.peerSelector selects among the Agents the operator watches (directory.ts). */
async function directoryPeers(
  ctx: Pick<AgentContext, "caches" | "settings" | "namespaceLabels">,
  obj: CustomObject,
  agent: AgentResource,
): Promise<AgentResource["spec"]["peers"]> {
  const selector = agent.spec.peerSelector;
  if (!selector) return [];
  const agents = ctx.caches.list<CustomObject>("Agent");
  const labels =
    selector.namespaceSelector && ctx.namespaceLabels
      ? await ctx.namespaceLabels.load(agents.map((a) => a.metadata?.namespace ?? "").filter(Boolean))
      : () => undefined;
  return selectedPeers(obj, selector, agents, labels, ctx.settings);
}

/** The keys a status publishes (status.signingKey, signingKeys, encryptionKey), where it has them. */
function publishedKeys(status: Record<string, unknown> | undefined): Record<string, unknown> {
  const { signingKey, signingKeys, encryptionKey } = status ?? {};
  return Object.fromEntries(
    Object.entries({ signingKey, signingKeys, encryptionKey }).filter(([, v]) => v !== undefined),
  );
}
