#!/usr/bin/env node
import { enableCompileCache } from "../src/util/compile-cache.ts";

enableCompileCache();

const { main } = await import("../src/cli/ifp.ts");

process.exitCode = await main();
