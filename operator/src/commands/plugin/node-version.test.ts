import { describe, expect, it } from "vitest";
import { nodeTooOld, PLUGIN_NODE } from "./node-version.ts";

describe("nodeTooOld", () => {
  it("admits the plugin's Node and every later one", () => {
    for (const v of [`v${PLUGIN_NODE}`, "v20.19.1", "v20.20.2", "v21.0.0", "v22.23.3", "v24.21.0", "v100.0.0"])
      expect(nodeTooOld(v, "/usr/bin/node"), v).toBeUndefined();
  });

  it("refuses an older one in one line naming the Node it needs and the one it has", () => {
    for (const v of ["v20.18.2", "v20.18.0", "v20.17.9", "v20.0.0", "v18.20.8", "v16.20.2", "v12.22.12", "v0.10.48"])
      expect(nodeTooOld(v, "/usr/bin/node"), v).toBe(
        `needs Node.js ${PLUGIN_NODE} or later on PATH; /usr/bin/node is Node.js ${v}`,
      );
  });

  it("compares each part as a number, not as text, and reads a malformed version as old", () => {
    expect(nodeTooOld("v20.9.0", "node", "20.18.1")).toMatch(/^needs/);
    expect(nodeTooOld("v3.0.0", "node", "20.18.1")).toMatch(/^needs/);
    expect(nodeTooOld("v20.18.10", "node", "20.18.9")).toBeUndefined();
    expect(nodeTooOld("", "node")).toMatch(/^needs/);
    expect(nodeTooOld("garbage", "node")).toMatch(/^needs/);
    // A pre-release of the minimum is the minimum (Node never ships one as a release).
    expect(nodeTooOld(`v${PLUGIN_NODE}-pre`, "node")).toBeUndefined();
  });
});
