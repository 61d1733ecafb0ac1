#!/usr/bin/env node
import { main } from "../src/cli/runtime.ts";

await main();
