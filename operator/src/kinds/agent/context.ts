// What an Agent's pass runs in: the pass's own context and what its concerns declare (TLS, the
// NATS identity, the workload), with what only the Agent uses: its agent ids' claims and the
// namespaces' labels its peer selectors read.
import type { TlsContext } from "../../concerns/tls/context.ts";
import type { NatsContext } from "../../concerns/nats/context.ts";
import type { WorkloadContext } from "../../concerns/workload/context.ts";
import type { NamespaceLabels } from "../../kube/namespace-labels.ts";
import type { ReconcileContext } from "../../reconcile/context.ts";

export type AgentContext = ReconcileContext &
  TlsContext &
  NatsContext &
  WorkloadContext & {
    /**
     * The Agent (uid) this process last rendered under each agent id: its claim holds from that
     * moment, before its status (which a restarted operator goes by) reaches the cache.
     */
    agentIds?: Map<string, string>;
    /** Namespaces' labels, for spec.peerSelector.namespaceSelector. */
    namespaceLabels?: NamespaceLabels;
  };
