// The images built without a Docker engine follow the Dockerfiles: these read them as
// e2e/images/build.ts does (no build, no root needed).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { builderKind, dockerignore, IMAGES, ignoreFilePath, imageContextFiles, parseDockerfile, readDockerfile, stageContextFiles } from "./build.ts";

const ignored = dockerignore(readFileSync(".dockerignore", "utf8"));

describe("the Dockerfiles as e2e/images/build.ts reads them", () => {
  it("runtime: Node 24, production dependencies, the runtime compiled to JavaScript without tests, user node, the ifp-runtime entrypoint", () => {
    const plan = readDockerfile("runtime/Dockerfile");
    expect(plan).toMatchObject({ base: "node:24-slim", nodeMajor: 24, workdir: "/app", user: "node", expose: ["8443"], entrypoint: ["node", "runtime/bin/ifp-runtime.js"], env: { NODE_ENV: "production" } });
    expect(plan.copies.filter((c) => c.from !== undefined)).toEqual([
      { from: "deps", sources: ["/app/node_modules"], dest: "/app/node_modules", destIsDir: false },
      { from: "build", sources: ["/app/dist/runtime"], dest: "/app/runtime", destIsDir: false },
    ]);
    expect(builderKind(plan.stages.deps, plan.base)).toBe("deps");
    expect(builderKind(plan.stages.build, plan.base)).toBe("build");
    expect(imageContextFiles(plan, ignored, "runtime/Dockerfile").map((f) => f.dest)).toEqual(["/app/package.json"]);
    // What the build stage compiles: the configs and the sources, never tests or benchmarks.
    const compiled = stageContextFiles(plan.stages.build!, ignored, "runtime/Dockerfile").map((f) => f.dest);
    for (const d of ["/app/package.json", "/app/tsconfig.json", "/app/tsconfig.build.json", "/app/runtime/bin/ifp-runtime.ts", "/app/operator/src/main.ts"]) expect(compiled).toContain(d);
    expect(compiled.some((d) => d.startsWith("/app/runtime/src/agent/"))).toBe(true);
    expect(compiled.filter((d) => /\.test\.ts$|\/test\/|\/bench\//.test(d))).toEqual([]);
  });

  it("operator: its own code compiled, the CRDs and the runtime's code it imports", () => {
    const plan = readDockerfile("operator/Dockerfile");
    expect(plan).toMatchObject({ user: "node", expose: ["8080"], entrypoint: ["node", "operator/bin/ifp-operator.js"] });
    expect(plan.copies.filter((c) => c.from === "build").map((c) => [c.sources, c.dest])).toEqual([
      [["/app/dist/operator"], "/app/operator"],
      [["/app/dist/runtime"], "/app/runtime"],
    ]);
    const dests = imageContextFiles(plan, ignored, "operator/Dockerfile").map((f) => f.dest);
    expect(dests).toContain("/app/crds/agents.ifp.dev.yaml");
    expect(dests.filter((d) => /\.ts$/.test(d))).toEqual([]);
  });

  it("example app: Node's built-ins and the typed client only, no dependencies, its own ignore file, user node", () => {
    const plan = readDockerfile("examples/app/Dockerfile");
    expect(plan).toMatchObject({ base: "node:24-slim", nodeMajor: 24, workdir: "/app", user: "node", expose: ["8080"], entrypoint: ["node", "examples/app/main.ts"] });
    expect(plan.copies.filter((c) => c.from !== undefined)).toEqual([]);
    // The root .dockerignore leaves out examples/: this Dockerfile has its own, as BuildKit reads it.
    expect(ignoreFilePath("examples/app/Dockerfile")).toBe("examples/app/Dockerfile.dockerignore");
    expect(ignoreFilePath("runtime/Dockerfile")).toBe(".dockerignore");
    const own = dockerignore(readFileSync("examples/app/Dockerfile.dockerignore", "utf8"));
    const dests = imageContextFiles(plan, own, "examples/app/Dockerfile").map((f) => f.dest).sort();
    expect(dests).toEqual(["/app/examples/app/app.ts", "/app/examples/app/main.ts", "/app/package.json", "/app/runtime/src/client/handoff-signature.ts", "/app/runtime/src/client/local.ts", "/app/runtime/src/net/sse.ts"]);
    // What the client imports beyond itself is Node built-ins, types (which Node strips), the
    // SSE reader and the hand-off signature, which import nothing: the image needs no more of runtime/src.
    const code = (file: string) => (readFileSync(file, "utf8").match(/^(?:import|export) (?!type )[^;]*? from "[^"]+";$/gm) ?? []).filter((line) => !/from "node:[a-z/]+";$/.test(line));
    expect(code("runtime/src/client/local.ts").map((line) => line.replace(/.* from /, ""))).toEqual(['"../net/sse.ts";', '"./handoff-signature.ts";']);
    expect(code("runtime/src/net/sse.ts")).toEqual([]);
    expect(code("runtime/src/client/handoff-signature.ts")).toEqual([]);
    expect(Object.keys(IMAGES)).toContain("app");
  });

  it("refuses what it does not know how to build, so that a Dockerfile cannot drift from it silently", () => {
    const base = readFileSync("runtime/Dockerfile", "utf8");
    expect(() => parseDockerfile(base.replace("USER node", "RUN apt-get install -y curl\nUSER node"), "x")).toThrow(/does not know how to build "RUN apt-get/);
    expect(() => parseDockerfile(base.replaceAll("node:24-slim", "debian:12"), "x")).toThrow(/FROM debian:12/);
    expect(() => parseDockerfile(base.replace("npm ci --omit=dev", "npm ci"), "x")).toThrow(/COPY --from=deps/);
    expect(() => parseDockerfile(base.replace("npx tsc -p tsconfig.build.json", "npx tsc -p tsconfig.build.json && curl x"), "x")).toThrow(/COPY --from=build/);
    expect(() => parseDockerfile(base.replace("RUN npm ci --ignore-scripts", "RUN npm ci --omit=dev --ignore-scripts"), "x")).toThrow(/COPY --from=build/);
    expect(() => parseDockerfile(base.replace("/app/dist/runtime", "/app/node_modules"), "x")).toThrow(/COPY --from=build/);
    expect(() => parseDockerfile(base.replace("ENTRYPOINT", "HEALTHCHECK CMD true\nENTRYPOINT"), "x")).toThrow(/HEALTHCHECK/);
  });

  it(".dockerignore patterns: at the root unless they start with **, directories with everything under them", () => {
    const m = dockerignore("node_modules\n**/*.test.ts\n**/test/\ne2e\n");
    expect(m("node_modules/yaml/index.js")).toBe(true);
    expect(m("runtime/node_modules")).toBe(false);
    expect(m("runtime/src/agent/inbox.test.ts")).toBe(true);
    expect(m("runtime/src/agent/inbox.ts")).toBe(false);
    expect(m("runtime/test/vectors.json")).toBe(true);
    expect(m("e2e/node.test.ts")).toBe(true);
    expect(m("e2e2/x.ts")).toBe(false);
  });
});
