import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { privateKeyFromPem, rawPublicKey } from "../runtime/src/protocol/keys.ts";
import { Agent } from "../runtime/src/resources/agent.ts";
import { relayStreamConfig } from "../runtime/src/contract/relay-stream.ts";
import { Relay } from "../runtime/src/resources/relay.ts";

const dir = new URL("../examples/", import.meta.url);
const docs = readdirSync(dir)
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((f) => parseAllDocuments(readFileSync(new URL(f, dir), "utf8")).map((d) => ({ file: f, doc: d.toJSON() })))
  .filter((d) => d.doc);

describe("examples/", () => {
  it("are valid resources", () => {
    const kinds = docs.map((d) => d.doc.kind);
    expect(kinds).toEqual(expect.arrayContaining(["Agent", "Agent", "Relay", "Secret"]));
    for (const { file, doc } of docs) {
      if (doc.kind === "Agent") expect(Agent.safeParse(doc).error, file).toBeUndefined();
      if (doc.kind === "Relay") expect(Relay.safeParse(doc).error, file).toBeUndefined();
    }
  });

  it("trust exactly the public halves of the demo signing keys", () => {
    const publicOf = Object.fromEntries(
      docs
        .filter((d) => d.doc.kind === "Secret" && d.doc.stringData?.["signing.key"])
        .map((d) => [d.doc.metadata.name, rawPublicKey(privateKeyFromPem(d.doc.stringData["signing.key"]))]),
    );
    const agents = docs.filter((d) => d.doc.kind === "Agent").map((d) => Agent.parse(d.doc));
    const keyOf = Object.fromEntries(agents.map((a) => [a.spec.agentId, publicOf[a.spec.signing.secretName!]]));
    for (const a of agents)
      for (const p of a.spec.peers)
        expect(p.keys[0]!.publicKey, `${a.spec.agentId} trusts ${p.agentId}`).toBe(keyOf[p.agentId]);
    const relay = Relay.parse(docs.find((d) => d.doc.kind === "Relay")!.doc);
    for (const a of relay.spec.agents) expect(a.keys[0]!.publicKey).toBe(keyOf[a.agentId]);
  });

  it("keep a relay's messages at least 7 days, the specification's persistence (spec 3, 8), in the stream that npm start makes too", () => {
    const relay = Relay.parse(docs.find((d) => d.doc.kind === "Relay")!.doc);
    const sevenDaysNs = 7 * 24 * 3600 * 1e9;
    expect(relayStreamConfig(relay).max_age).toBeGreaterThanOrEqual(sevenDaysNs);
    expect(relay.spec.retention.maxAge).toBe("168h");
  });

  it("live in namespaces they create, and name each other by their Services in those namespaces", () => {
    const namespaces = docs.filter((d) => d.doc.kind === "Namespace").map((d) => d.doc.metadata.name);
    for (const { file, doc } of docs) {
      if (doc.kind === "Namespace") continue;
      expect(namespaces, `${file}: ${doc.kind} ${doc.metadata.name}`).toContain(doc.metadata.namespace);
      // `kubectl apply -f examples/` goes file by file in name order: a namespace is created first.
      const creator = docs.find((d) => d.doc.kind === "Namespace" && d.doc.metadata.name === doc.metadata.namespace)!;
      expect(creator.file <= file, `${file} comes after ${creator.file}`).toBe(true);
    }
    const serviceUrl = (kind: string, agentOrName: string) => {
      const d = docs.find(
        (x) => x.doc.kind === kind && (x.doc.spec?.agentId === agentOrName || x.doc.metadata.name === agentOrName),
      )!.doc;
      return `https://${d.metadata.name}.${d.metadata.namespace}.svc`;
    };
    const agents = docs.filter((d) => d.doc.kind === "Agent").map((d) => d.doc);
    expect(new Set(agents.map((a) => a.metadata.namespace)).size).toBe(agents.length);
    for (const a of agents)
      for (const p of a.spec.peers)
        expect(p.url, `${a.spec.agentId}'s peer ${p.agentId}`).toBe(serviceUrl("Agent", p.agentId));
    const relay = docs.find((d) => d.doc.kind === "Relay")!.doc;
    expect(relay.spec.url).toBe(serviceUrl("Relay", relay.metadata.name));
    for (const a of agents) for (const u of a.spec.relay?.urls ?? []) expect(u).toBe(relay.spec.url);
  });
});
