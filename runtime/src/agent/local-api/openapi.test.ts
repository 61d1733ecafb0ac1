import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { LOCAL_API_OPENAPI, localApiOpenApi, localApiOpenApiText } from "./openapi.ts";

describe("docs/local-api.openapi.yaml", () => {
  it("is what the routes' schemas generate (npm run gen writes it)", async () => {
    const committed = readFileSync(new URL(`../../../../${LOCAL_API_OPENAPI}`, import.meta.url), "utf8");
    expect(committed, "docs/local-api.openapi.yaml drifted from the routes: run npm run gen").toBe(
      await localApiOpenApiText(),
    );
  });

  it("describes every route with its request and answer schemas", async () => {
    const doc = (await localApiOpenApi()) as any;
    const send = doc.paths["/outbox"].post;
    expect(send.requestBody.content["application/json"].schema.anyOf).toEqual([
      { $ref: "#/components/schemas/OutboxRequest" },
      { $ref: "#/components/schemas/Message" },
    ]);
    expect(send.responses["202"].content["application/json"].schema.properties.message).toEqual({
      $ref: "#/components/schemas/Message",
    });
    expect(send.responses["400"]).toEqual({ $ref: "#/components/responses/Error" });
    expect(doc.components.schemas.OutboxRequest.additionalProperties).toBe(false);
    expect(doc.paths["/messages"].get.parameters.map((p: { name: string }) => p.name)).toEqual(["limit", "wait"]);
    expect(doc.paths["/peers/{agent}/capabilities"].get.parameters[0]).toMatchObject({
      name: "agent",
      in: "path",
      required: true,
      schema: { type: "string", minLength: 1, maxLength: 512 },
    });
    // Every $ref points at something the document has.
    const text = JSON.stringify(doc);
    for (const [, kind, name] of text.matchAll(/"#\/components\/(schemas|responses)\/([^"]+)"/g))
      expect(doc.components[kind!][name!], `${kind}/${name}`).toBeDefined();
    expect(parse(readFileSync(new URL(`../../../../${LOCAL_API_OPENAPI}`, import.meta.url), "utf8")).openapi).toBe(
      "3.1.0",
    );
  });
});
