#!/usr/bin/env node
// The kubectl plugin: `kubectl ifp status|describe|report|send|tail` once this file (or a link named
// kubectl-ifp to it) is on PATH — docs/kubectl-plugin.md.
import { main } from "../src/plugin/main.ts";

process.exitCode = await main();
