// The Node the release's kubectl plugin needs (operator/plugin-bundle.ts): its bundle runs on the
// user's own Node, whatever that is, so its launcher asks first, before it loads the bundle.

/**
 * The oldest Node the plugin's bundle runs on: the newest floor of the `engines.node` of the
 * packages it bundles (@noble/hashes' 20.19.0; undici 7, which the bundle uses for the Kubernetes
 * client's HTTP, needs 20.18.1, where the undici 8 the images run needs Node 22.19).
 * operator/plugin-bundle.ts refuses to bundle a package that asks for more (but for the few it
 * names, whose `engines` is their support policy), and lowers the bundle's syntax to this version.
 */
export const PLUGIN_NODE = "20.19.0";

/**
 * Bundled packages whose `engines.node` asks for a newer Node than they use, with what they
 * use: each runs on PLUGIN_NODE (e2e/release/plugin.test.ts runs the bundle's commands that
 * reach them on Node 20).
 */
export const ENGINES_ABOVE_NEED: Readonly<Record<string, string>> = {
  "@nats-io/nuid": "crypto.getRandomValues and string building (NATS inbox names)",
  canonicalize: "JSON.stringify and Object.keys (RFC 8785 canonical JSON)",
};

/**
 * Pure: why Node `version` (`v18.20.8`, process.version) cannot run the plugin, as one line
 * naming the Node it needs and the one it has (`node`, its path); undefined when it can.
 */
export function nodeTooOld(version: string, node: string, minimum = PLUGIN_NODE): string | undefined {
  const have = version.replace(/^v/, "").split(".");
  const want = minimum.split(".");
  for (let i = 0; i < 3; i++) {
    const a = Number.parseInt(have[i] || "0", 10) || 0;
    const b = Number.parseInt(want[i] || "0", 10);
    if (a > b) return undefined;
    if (a < b) return `needs Node.js ${minimum} or later on PATH; ${node} is Node.js ${version}`;
  }
  return undefined;
}
