#!/usr/bin/env node
import { main } from "../src/cli/ifp.ts";

process.exitCode = await main();
