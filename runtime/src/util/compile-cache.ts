// Node's on-disk compile cache for the project's commands (`ifp`, `kubectl-ifp`, `ifp-runtime`,
// `ifp-operator`): V8's compiled code of every module a command loads, type-stripped TypeScript
// included, kept between runs, so that a command started again compiles nothing it compiled
// before (what that saves: docs/benchmarks.md). Each command turns it on first, before it loads
// the modules it runs (enableCompileCache). The cache lives in the user's own cache directory, not in a shared /tmp;
// NODE_COMPILE_CACHE names another, NODE_DISABLE_COMPILE_CACHE=1 turns it off, and a directory
// that cannot be written (a container's read-only file system) leaves it off without a word.
import module from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

/** Where the commands keep their compile cache: NODE_COMPILE_CACHE, or `<XDG_CACHE_HOME or ~/.cache>/ifp-operator/node-compile-cache`. */
export function compileCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.NODE_COMPILE_CACHE) return env.NODE_COMPILE_CACHE;
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "ifp-operator", "node-compile-cache");
}

/**
 * Turn the compile cache on for this process, for the modules it loads from now on: a command
 * calls it before it imports anything else. Node 20 has no compile cache (the package allows
 * it): the command then starts as before.
 */
export function enableCompileCache(): void {
  module.enableCompileCache?.(compileCacheDir());
}
