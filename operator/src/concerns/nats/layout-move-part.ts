// An Agent whose data is on another NATS layout than the install's (operator/src/concerns/nats/layout-move.ts).
//
// On an install of `--nats-layout isolated`, an Agent whose runtime account is still the
// per-agent layout's, with streams in it, is moved before anything of the isolated layout is
// made for it: its Deployment scaled to zero, the pass ended (Ready False, `MovingNatsLayout`)
// until no client of its account is connected, then its data moved into its namespace's data
// account and the pass goes on: its account pushed with the isolated layout's JWT, its
// credential, consumers and Deployment rendered for the isolated layout (its replicas back).
//
// On a per-agent install, an Agent whose account is the isolated layout's (moved by an
// isolated install, then rolled back) is refused: Ready False, `OnIsolatedNatsLayout`, nothing
// rendered or pushed for it, so its data stays where it is and its running runtime as it is.
import type { V1Deployment, V1Secret } from "@kubernetes/client-node";
import { parseDuration } from "../../../../runtime/src/resources/fields.ts";
import { API_VERSION } from "../../../../runtime/src/resources/schema.ts";
import type { Agent } from "../../../../runtime/src/resources/agent.ts";
import { agentKeyOf } from "../../reconcile/finalizers.ts";
import { childNames } from "../../reconcile/names.ts";
import { SHARED_ACCOUNT_ANNOTATION, natsCredsSecretName } from "./runtime-credential.ts";
import { layoutOfAccountJwt, moveToIsolated, perAgentStreams } from "./layout-move.ts";
import type { NatsAccounts } from "./accounts.ts";
import type { AccountResource } from "./account-limits.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";
import type { NatsContext } from "./context.ts";
import type { Part } from "../../reconcile/part.ts";
import { tenantRefusal } from "./credential-part.ts";

/** How soon a move waiting for the runtime to stop looks again. */
const MOVE_RETRY_MS = 2_000;

/** A set of accounts per process (its NatsAccounts). */
function accountSet(): (a: NatsAccounts) => Set<string> {
  const sets = new WeakMap<NatsAccounts, Set<string>>();
  return (a) => sets.get(a) ?? sets.set(a, new Set()).get(a)!;
}
/** Accounts known to be on the install's layout in this process (only this process pushes them). */
const settledOf = accountSet();
/** Accounts this process fenced for a move (NatsAccounts.fence). */
const fencedOf = accountSet();

export const natsLayoutMovePart: Part<
  Agent,
  object,
  object,
  Pick<ReconcileContext, "kube" | "caches" | "log" | "settings"> &
    Pick<NatsContext, "natsIssuer" | "natsAccounts" | "dataAccounts">
> = {
  name: "nats-layout-move",
  async ensure(ctx, { owner, resource }) {
    const accounts = ctx.natsAccounts;
    if (!ctx.natsIssuer || !accounts || !(await accounts.isolating())) return {};
    const { namespace, name, uid } = owner.metadata;
    // A runtime kept in the shared account of an install from before accounts per runtime moves with its next spec change.
    const secret = ctx.caches.get<V1Secret>("Secret", namespace, natsCredsSecretName(name));
    if (secret?.metadata?.annotations?.[SHARED_ACCOUNT_ANNOTATION] !== undefined) return {};
    const account = ctx.natsIssuer.accountOf(uid);
    const done = settledOf(accounts);
    if (done.has(account)) return {};
    const jwt = await accounts.claimsOf(account);
    const layout = jwt ? layoutOfAccountJwt(jwt) : undefined;
    const isolated = ctx.settings.natsLayout === "isolated";
    if (!isolated) {
      if (layout !== "isolated") {
        done.add(account);
        return {};
      }
      return {
        blocked: {
          reason: "OnIsolatedNatsLayout",
          message:
            "this Agent's messages and state were moved to its namespace's data account by an install of the isolated NATS layout, which this install's per-agent layout does not read: nothing is rendered or renewed for it here. Run the operator with --nats-layout isolated again (helm upgrade --set runtime.natsLayout=isolated); docs/scale.md#moving-an-install-to-the-isolated-layout",
        },
        holds: true,
        ends: true,
        requeueAfterMs: 60_000,
      };
    }
    if (layout !== "per-agent" || !(await perAgentStreams(accounts, account, agentKeyOf(owner))).length) {
      done.add(account);
      return {};
    }
    const waiting = (message: string) => ({
      blocked: {
        reason: "MovingNatsLayout",
        message: `moving this Agent's messages and state from its own NATS account to its namespace's data account (the isolated NATS layout): ${message}`,
      },
      holds: true,
      ends: true,
      requeueAfterMs: MOVE_RETRY_MS,
    });
    // No runtime of it may take in or hand on anything while its data moves: none of its
    // credentials connects any more (one still running answers 503), and its pods go.
    if (!fencedOf(accounts).has(account)) {
      await accounts.fence(uid, `agent:${namespace}/${name}`, {
        kind: owner.kind,
        spec: resource.spec,
      } as AccountResource);
      fencedOf(accounts).add(account);
    }
    const deploymentName = childNames(name).deployment;
    const deployment = await ctx.kube.read<V1Deployment>("apps/v1", "Deployment", namespace, deploymentName);
    if (deployment && (deployment.spec?.replicas ?? 1) > 0) {
      await ctx.kube.replace({ ...deployment, spec: { ...deployment.spec!, replicas: 0 } });
      return {
        ...waiting("its Deployment scaled to zero until its runtime has stopped"),
        applied: [`Deployment/${deploymentName} scaled to 0`],
      };
    }
    const clients = await accounts.clientsOf(account);
    if (clients > 0) return waiting(`waiting for its runtime to stop (${clients} connected)`);
    let dataAccount: string;
    try {
      dataAccount = await ctx.dataAccounts!.ensure(namespace);
      await ctx.dataAccounts!.ensureAgent(
        namespace,
        account,
        resource.spec.handler ? parseDuration(resource.spec.handler.timeout) : undefined,
      );
    } catch (err) {
      return tenantRefusal(err);
    }
    const moved = await moveToIsolated(accounts, {
      account,
      dataAccount,
      storeKey: agentKeyOf(owner),
      appConsumer: resource.spec.handler ? "handler" : "application",
    });
    ctx.log.info({ namespace, name, account, dataAccount, ...moved }, "moved the Agent to the isolated NATS layout");
    await ctx.kube.event(
      { apiVersion: API_VERSION, kind: owner.kind, metadata: { name, namespace, uid } },
      "Normal",
      "MovedNatsLayout",
      `moved to the namespace's data account (the isolated NATS layout): ${moved.waiting} inbox messages not yet handed on and ${moved.handedOn} handed on, ${moved.inboxDead} inbound dead letters, ${moved.outbox} outbox entries, ${moved.keys} KV records; deleted ${moved.deleted.join(", ") || "nothing"}`,
    );
    done.add(account);
    return {
      applied: [
        `moved to the isolated NATS layout (${moved.waiting + moved.handedOn} inbox, ${moved.outbox} outbox, ${moved.keys} records)`,
      ],
    };
  },
};
