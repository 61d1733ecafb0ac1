import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Values } from "../../../charts/ifp-operator/values.schema.ts";
import { agentCrd, generatedFiles, structural } from "./generate.ts";

const root = new URL("../../../", import.meta.url);

describe("generated files", () => {
  for (const [path, text] of Object.entries(generatedFiles())) {
    it(`${path} is up to date (npm run gen)`, () => {
      expect(readFileSync(new URL(path, root), "utf8")).toBe(text);
    });
  }

  it("values.yaml holds exactly the schema's defaults", () => {
    const yaml = parse(readFileSync(new URL("charts/ifp-operator/values.yaml", root), "utf8"));
    expect(yaml).toEqual(Values.parse({}));
  });
});

describe("structural schemas", () => {
  it("turn free-form objects into preserved unknown fields and drop JSON-Schema-only keys", () => {
    expect(structural({ type: "object", additionalProperties: {} })).toEqual({ type: "object", "x-kubernetes-preserve-unknown-fields": true });
    expect(structural({ type: "object", additionalProperties: { type: "string" } })).toEqual({ type: "object", additionalProperties: { type: "string" } });
    expect(structural({ type: "number", enum: [1, 3, 5] })).toEqual({ type: "integer", enum: [1, 3, 5] });
    expect(structural({ type: "integer", maximum: Number.MAX_SAFE_INTEGER, $schema: "x" })).toEqual({ type: "integer" });
  });

  it("contain no $ref, anyOf or oneOf anywhere", () => {
    const text = JSON.stringify(agentCrd());
    expect(text).not.toMatch(/"\$ref"|"anyOf"|"oneOf"/);
  });
});
