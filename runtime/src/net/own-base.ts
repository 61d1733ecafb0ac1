// The base URL an agent's documents name (its identity document's endpoints, its A2A card's
// interfaces and `jku`). The operator always gives the runtime spec.baseUrl; a runtime run
// without one may name the Host a request came with only when that Host is one of the agent's
// own names, so that no request makes the agent publish, or sign, URLs on a host someone else
// chose.
import type { Agent } from "../resources/agent.ts";
import { canonicalHost } from "./host-name.ts";

/** Host names that are this machine's own: a document naming them points nowhere else. */
const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * The names an agent answers to by itself: its Service's (`<name>`, `<name>.<namespace>`,
 * `….svc`, `….svc.cluster.local`), the host of an https agent id, and loopback.
 */
function ownNames(agent: Agent): Set<string> {
  const name = agent.metadata.name ?? "agent";
  const namespace = agent.metadata.namespace ?? "default";
  const own = new Set([
    ...LOOPBACK,
    name,
    `${name}.${namespace}`,
    `${name}.${namespace}.svc`,
    `${name}.${namespace}.svc.cluster.local`,
  ]);
  if (/^https:\/\//i.test(agent.spec.agentId)) {
    try {
      own.add(canonicalHost(new URL(agent.spec.agentId).hostname));
    } catch {
      // An agent id that is no URL names no host.
    }
  }
  return own;
}

/**
 * The base URL an agent's documents name for a request with Host `host`
 * (docs/security.md#what-an-agent-or-relay-may-reference): spec.baseUrl; without one, the
 * request's Host only when it is one of the agent's own names (ownNames, any port), and
 * otherwise the agent's Service URL, `https://<name>.<namespace>.svc`.
 */
export function ownBaseUrl(agent: Agent, host: string | undefined): string {
  if (agent.spec.baseUrl) return agent.spec.baseUrl.replace(/\/+$/, "");
  const name = agent.metadata.name ?? "agent";
  const namespace = agent.metadata.namespace ?? "default";
  if (host !== undefined && /^[a-zA-Z0-9.:[\]-]{1,300}$/.test(host)) {
    const port = /:(\d{1,5})$/.exec(host)?.[1];
    const hostname = canonicalHost(port === undefined ? host : host.slice(0, -port.length - 1));
    if (ownNames(agent).has(hostname)) return `https://${hostname}${port === undefined ? "" : `:${port}`}`;
  }
  return `https://${name}.${namespace}.svc`;
}
