// The listings of KV keys that the isolated NATS layout keeps among an Agent's own keys, where it
// cannot list a bucket's keys: what each runtime bucket indexes, shared by the runtime (which
// writes them) and the operator (which writes them too when it moves an Agent onto the layout).

/**
 * The listings of a bucket's keys that a layout listing no keys keeps itself: `of` the indexes a
 * key is listed in (none: []), `for` the index that answers a `keys()` filter (undefined: that
 * filter is not served). `replaces`: whether listing `key` in index `name` takes the place of a
 * key listed there already (one key per peer, say: the latest); without it, only `key` itself.
 */
export interface KeyIndex {
  of(key: string): string[];
  for(filter: string): string | undefined;
  replaces?(name: string, key: string, listed: string): boolean;
}

/** The most keys one index lists: past it the oldest listed are forgotten (their records are kept). */
export const MAX_INDEXED_KEYS = 1000;

const LATEST_OF_EACH_PEER = "peers";
/** A record key's peer and conversation tokens. */
const recordKey = (key: string) => /^c\.([^.]+)\.([^.]+)$/.exec(key);

/**
 * A conversation's records (`c.<peer>.<conversation>`), listed where the layout lists no keys
 * (nats/layout.ts): per conversation (`c.*.<conversation>`), and the latest record made of each
 * peer (`c.>`, one key per peer, most recent last), which recentPeers() reads.
 */
export const PEERS_OF_CONVERSATION: KeyIndex = {
  of: (key) => {
    const m = recordKey(key);
    return m ? [`c.${m[2]}`, LATEST_OF_EACH_PEER] : [];
  },
  for: (filter) =>
    filter === "c.>" ? LATEST_OF_EACH_PEER : /^c\.\*\.([^.*>]+)$/.exec(filter)?.[1]?.replace(/^/, "c."),
  replaces: (name, key, listed) => name === LATEST_OF_EACH_PEER && recordKey(listed)?.[1] === recordKey(key)?.[1],
};

/** The dead letters' keys (`dead.<id>`), listed where the layout lists no keys (nats/layout.ts). */
export const DEAD_LETTER_INDEX: KeyIndex = {
  of: (key) => (key.startsWith("dead.") ? ["dead"] : []),
  for: (filter) => (filter === "dead.>" ? "dead" : undefined),
};

/**
 * The listings of the bucket's keys that a layout listing no keys keeps (the isolated one): a
 * caller's tasks (ListTasks), a task id's keys whoever made it (the local API), a task's push
 * configs, and every config (the push notifications' watch, from its current values).
 */
export const TASK_INDEX: KeyIndex = {
  of(key) {
    const [kind, owner, id, more] = key.split(".");
    if (kind === "t" && owner && id && more === undefined) return [`t.${owner}`, `task.${id}`];
    if (kind === "p" && owner && id && more) return [`p.${owner}.${id}`, "p"];
    return [];
  },
  for(filter) {
    if (filter === "p.>") return "p";
    const [kind, owner, id, more, ...rest] = filter.split(".");
    if (rest.length || !owner || !id) return undefined;
    if (kind === "t" && owner !== "*" && id === "*" && more === undefined) return `t.${owner}`;
    if (kind === "t" && owner === "*" && id !== "*" && more === undefined) return `task.${id}`;
    if (kind === "p" && owner !== "*" && id !== "*" && more === "*") return `p.${owner}.${id}`;
    return undefined;
  },
};
