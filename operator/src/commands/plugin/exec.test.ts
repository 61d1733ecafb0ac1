import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { exitCodeOf, IMAGE_IFP, IMAGE_NODE } from "./exec.ts";

const root = new URL("../../../../", import.meta.url).pathname;

describe("the command kubectl ifp send|tail runs in the runtime container", () => {
  it("is the runtime image's node and its bundled ifp, as runtime/Dockerfile lays them out", () => {
    const dockerfile = readFileSync(`${root}runtime/Dockerfile`, "utf8");
    // The final stage: node at IMAGE_NODE, the bundle of runtime/ under WORKDIR /app.
    const final = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));
    expect(final).toContain(`ENTRYPOINT ["${IMAGE_NODE}", "runtime/bin/ifp-runtime.js"]`);
    expect(final).toMatch(/^WORKDIR \/app$/m);
    expect(final).toMatch(/^COPY --from=build \/app\/dist\/bundle\/runtime \.\/runtime$/m);
    expect(IMAGE_IFP).toBe("/app/runtime/bin/ifp.js");
    // ifp.js is the bundle's entry of runtime/bin/ifp.ts (runtime/bundle.ts), which the package
    // names as its ifp command.
    expect(readFileSync(`${root}runtime/bundle.ts`, "utf8")).toContain('ifp: "dist/runtime/bin/ifp.js"');
    expect(existsSync(`${root}runtime/bin/ifp.ts`)).toBe(true);
    const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8")) as { bin: Record<string, string> };
    expect(pkg.bin.ifp).toBe("runtime/bin/ifp.ts");
  });

  it("reads the exit code from the exec's final Status", () => {
    expect(exitCodeOf({ status: "Success" })).toBe(0);
    expect(
      exitCodeOf({
        status: "Failure",
        reason: "NonZeroExitCode",
        details: { causes: [{ reason: "ExitCode", message: "2" }] },
      }),
    ).toBe(2);
    expect(exitCodeOf({ status: "Failure", message: "OCI runtime exec failed" })).toBeUndefined();
    expect(exitCodeOf(undefined)).toBeUndefined();
  });
});
