#!/usr/bin/env node
// The example application: `node examples/app/main.ts`, configured by environment variables
// (examples/README.md). Exits 2 on a configuration mistake, 1 when it cannot listen.
import { ConfigError, configFromEnv, consoleLog, startApp } from "./app.ts";

let config: ReturnType<typeof configFromEnv>;
try {
  config = configFromEnv(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`ifp example app: ${err.message}\n`);
  process.exit(2);
}

let app: Awaited<ReturnType<typeof startApp>>;
try {
  app = await startApp(config, consoleLog);
} catch (err) {
  process.stderr.write(`ifp example app: cannot listen on ${config.host}:${config.port}: ${(err as Error).message}\n`);
  process.exit(1);
}

const stop = () => {
  void app.close().then(() => process.exit(0));
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
