#!/usr/bin/env node
// `reload-nats`, the NATS pods' sidecar, loads only its own module (no Kubernetes or NATS
// client): it runs beside every NATS server and should cost little memory.
const [command, ...rest] = process.argv.slice(2);
if (command === "reload-nats") await (await import("../src/nats-reloader.ts")).reloadNatsMain(rest);
else await (await import("../src/main.ts")).main();
