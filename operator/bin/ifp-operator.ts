#!/usr/bin/env node
import { main } from "../src/main.ts";

await main();
