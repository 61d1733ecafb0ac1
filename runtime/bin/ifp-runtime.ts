#!/usr/bin/env node
import { enableCompileCache } from "../src/util/compile-cache.ts";

enableCompileCache();

const { main } = await import("../src/cli/runtime.ts");

await main();
