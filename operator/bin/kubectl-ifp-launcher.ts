// The release's `kubectl-ifp` (operator/plugin-bundle.ts), the file kubectl runs: it checks the
// Node that runs it before it loads the plugin's bundle (kubectl-ifp.mjs beside it), so that an
// older Node ends with one line naming the Node it needs (exit 1), not with a syntax error or a
// missing API of the bundle. The bundle makes it CommonJS with ES2015 syntax, which any Node
// since 12 parses.
import { enableCompileCache } from "../../runtime/src/util/compile-cache.ts";
import { nodeTooOld } from "../src/commands/plugin/node-version.ts";

const tooOld = nodeTooOld(process.version, process.execPath);
if (tooOld) {
  process.stderr.write(`kubectl ifp: ${tooOld}\n`);
  process.exit(1);
}
enableCompileCache();
void import(new URL("./kubectl-ifp.mjs", import.meta.url).href);
