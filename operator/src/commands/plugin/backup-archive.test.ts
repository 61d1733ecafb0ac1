import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type ArchiveInput, isPlainPath, MANIFEST, MANIFEST_SUM, readArchive, writeArchive } from "./backup-archive.ts";
import { tar } from "./report.ts";

const input = (): ArchiveInput => ({
  created: "2026-12-02T14:00:00.000Z",
  plugin: "kubectl-ifp 0.1.0 (commit unknown)",
  install: { operatorNamespace: "ifp-system", caSecret: "ifp-operator-ca" },
  files: [
    { path: "secrets/team/bob-signing.json", kind: "secret", content: Buffer.from('{"data":{}}') },
    { path: "resources/team/agent-bob.json", kind: "resource", content: Buffer.from('{"kind":"Agent"}') },
    { path: "jetstream/team/bob/IFP_INBOX.json", kind: "stream-meta", content: Buffer.from("{}") },
    { path: "jetstream/team/bob/IFP_INBOX.tar.s2", kind: "stream-data", content: Buffer.alloc(3000, 7) },
  ],
  streams: [
    {
      owner: { kind: "Agent", namespace: "team", name: "bob" },
      stream: "IFP_INBOX",
      meta: "jetstream/team/bob/IFP_INBOX.json",
      data: "jetstream/team/bob/IFP_INBOX.tar.s2",
      messages: 3,
      lastSeq: 3,
    },
  ],
});
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
/** A tar of these entries with a manifest that lists them all (checksums right), as an attacker would make it. */
function forged(entries: [string, Buffer][], manifest: object = {}): Buffer {
  const m = Buffer.from(
    JSON.stringify({
      format: "ifp-backup",
      version: 1,
      created: "x",
      plugin: "x",
      install: { operatorNamespace: "ifp-system", caSecret: "ca" },
      files: entries.map(([path, c]) => ({ path, sha256: sha(c), size: c.length, kind: "secret" })),
      streams: [],
      ...manifest,
    }),
  );
  return tar(new Map([[MANIFEST, m], [MANIFEST_SUM, Buffer.from(sha(m))], ...entries]));
}

describe("the backup archive", () => {
  it("reads back what it wrote: the manifest with every file's checksum, and the files", async () => {
    const a = await readArchive(writeArchive(input()));
    expect(a.manifest.version).toBe(1);
    expect(a.manifest.files.map((f) => [f.path, f.size])).toEqual([
      ["secrets/team/bob-signing.json", 11],
      ["resources/team/agent-bob.json", 16],
      ["jetstream/team/bob/IFP_INBOX.json", 2],
      ["jetstream/team/bob/IFP_INBOX.tar.s2", 3000],
    ]);
    expect(a.files.get("jetstream/team/bob/IFP_INBOX.tar.s2")).toEqual(Buffer.alloc(3000, 7));
    expect(a.manifest.streams[0]?.messages).toBe(3);
  });

  it("refuses an archive with any byte changed: in a file, in the manifest, in a header, in the padding", async () => {
    const good = writeArchive(input());
    const at = (needle: string) => good.indexOf(needle);
    const offsets = {
      file: good.indexOf(Buffer.alloc(16, 7)) + 100,
      manifest: at('"caSecret"') + 2,
      header: at("secrets/team/bob-signing.json") + 1,
      padding: good.indexOf('{"kind":"Agent"}') + 20,
      end: good.length - 10,
    };
    for (const [where, offset] of Object.entries(offsets)) {
      const bad = Buffer.from(good);
      bad[offset] = bad[offset]! ^ 0x20;
      await expect(readArchive(bad), where).rejects.toThrow(/changed|damaged|checksum|readable|match/);
    }
  });

  it("refuses a version it cannot read, another format, and what is no tar at all", async () => {
    await expect(readArchive(forged([], { version: 2 }))).rejects.toThrow(
      /archive version 2: this plugin reads version 1/,
    );
    await expect(readArchive(forged([], { format: "other" }))).rejects.toThrow(/not a backup archive/);
    await expect(readArchive(Buffer.from("hello"))).rejects.toThrow(/not a (readable )?backup archive/);
    await expect(readArchive(tar(new Map([["x.json", Buffer.from("{}")]])))).rejects.toThrow(/no manifest.json/);
  });

  it("refuses entries that climb out, start at the root, or are not listed; checks nothing is written anywhere", async () => {
    for (const path of ["../escape.json", "secrets/../../etc/passwd", "/etc/passwd", "a/./b", "a\\b"]) {
      await expect(readArchive(forged([[path, Buffer.from("x")]])), path).rejects.toThrow(/plain relative path/);
    }
    const m = forged([["secrets/a.json", Buffer.from("x")]]);
    const extra = tar(new Map([...(await readArchive(m)).files, [MANIFEST, Buffer.from("")]]));
    await expect(readArchive(extra)).rejects.toThrow(/no manifest.json at its start/);
  });

  it("refuses a file the manifest does not list, and a listed file that is missing", async () => {
    const a = forged([["secrets/a.json", Buffer.from("x")]], { files: [] });
    await expect(readArchive(a)).rejects.toThrow(/not in its manifest/);
    const b = forged([], {
      files: [{ path: "secrets/a.json", sha256: sha(Buffer.from("x")), size: 1, kind: "secret" }],
    });
    await expect(readArchive(b)).rejects.toThrow(/missing from the archive/);
  });

  it("knows a plain path", () => {
    expect(isPlainPath("jetstream/team/bob/KV_x.tar.s2")).toBe(true);
    for (const p of ["", "..", "a//b", "a/", "/a", "a/../b", "a b"]) expect(isPlainPath(p), p).toBe(false);
  });
});
