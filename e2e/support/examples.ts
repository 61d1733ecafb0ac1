// What a user does before `helm install` to run the examples: create their namespaces
// (examples/namespaces.yaml) and list them in watchNamespaces, since the chart's operator watches
// only its own namespace and the listed ones unless clusterWide.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

export const EXAMPLES_NAMESPACES_FILE = "examples/namespaces.yaml";

/** The examples' namespaces, as examples/namespaces.yaml creates them. */
export function exampleNamespaces(): string[] {
  return parseAllDocuments(readFileSync(EXAMPLES_NAMESPACES_FILE, "utf8"))
    .map((d) => d.toJSON() as { kind?: string; metadata?: { name?: string } } | null)
    .filter((d) => d?.kind === "Namespace")
    .map((d) => d!.metadata!.name!);
}

/** The chart value that makes the operator watch them, as the README's install command sets it. */
export function exampleWatchValue(): string {
  return `watchNamespaces={${exampleNamespaces().join(",")}}`;
}
