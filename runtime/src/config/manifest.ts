// The Agent or Relay manifest a runtime starts from: read from a YAML or JSON file and validated
// with the resource's schema, defaults applied.
import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { describeIssues } from "../contract/issues.ts";

/**
 * Read a custom resource (Agent or Relay) from a YAML or JSON file — the same document
 * `kubectl apply` takes — and validate it with the resource's schema, defaults applied.
 */
export async function loadManifest<S extends z.ZodType>(path: string, schema: S): Promise<z.output<S>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new Error(`cannot read manifest ${path}: ${(err as Error).message}`);
  }
  return parseManifest(text, schema, path);
}

export function parseManifest<S extends z.ZodType>(text: string, schema: S, source = "manifest"): z.output<S> {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new Error(`${source} is not valid YAML or JSON: ${(err as Error).message}`);
  }
  const result = schema.safeParse(doc);
  if (!result.success) throw new Error(`${source} is not a valid resource: ${describeIssues(result.error, 10)}`);
  return result.data;
}
