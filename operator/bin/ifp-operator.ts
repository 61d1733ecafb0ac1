#!/usr/bin/env node
// `reload-nats` and `repair-nats-store`, run beside and before the NATS servers, load only their
// own modules (no Kubernetes or NATS client): they should cost little memory and start fast.
import { enableCompileCache } from "../../runtime/src/util/compile-cache.ts";

enableCompileCache();

const [command, ...rest] = process.argv.slice(2);
if (command === "reload-nats") await (await import("../src/commands/reload-nats.ts")).reloadNatsMain(rest);
else if (command === "repair-nats-store")
  await (await import("../src/commands/repair-nats-store.ts")).repairNatsStoreMain(rest);
else await (await import("../src/commands/main.ts")).main();
