#!/usr/bin/env node
// The kubectl plugin: `kubectl ifp status|describe|report|send|tail` once this file (or a link named
// kubectl-ifp to it) is on PATH — docs/kubectl-plugin.md.
import { enableCompileCache } from "../../runtime/src/util/compile-cache.ts";

enableCompileCache();

const { main } = await import("../src/commands/plugin/main.ts");

process.exitCode = await main();
