#!/usr/bin/env node
// The operator image's code: the compiled operator (tsc's output under dist/, tsconfig.build.json)
// and every package it imports, linked and minified by rolldown into a few ES module files that
// need no node_modules. Run from the directory that holds dist/ (the Dockerfile's build stage):
//
//   node operator/bundle.ts
//
// writes dist/bundle/operator/ (what the image copies to /app/operator):
//   bin/ifp-operator.js          the entry point (ENTRYPOINT node operator/bin/ifp-operator.js)
//   lib/*.js                     the chunks it loads: one for the controllers and one for each of
//                                `reload-nats` and `repair-nats-store`, which the entry imports
//                                only when asked for (the NATS pods' sidecar and init container
//                                load no Kubernetes client), and the code they share
//   THIRD-PARTY-LICENSES.txt     name, version, licence and licence files of each package bundled
// and the source maps, kept out of the image, under dist/bundle-maps/operator/. The bundling itself
// is runtime/bundle.ts's, which makes the runtime image's bundle too.
//
// Why: Node keeps the source of every module it loads in the heap, and each module of
// node_modules is a file opened, read and compiled on its own. The operator loads about 1,900 of
// them (the Kubernetes client's generated API layer most of all); one minified bundle of the same
// code is about a third less resident memory at start (docs/operator.md).
import { pathToFileURL } from "node:url";
import { bundleCommand } from "../runtime/bundle.ts";

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await bundleCommand({
    image: "ifp-operator",
    code: "the operator",
    entries: { "ifp-operator": "dist/operator/bin/ifp-operator.js" },
    outDir: "dist/bundle/operator",
    mapsDir: "dist/bundle-maps/operator",
  });
}
