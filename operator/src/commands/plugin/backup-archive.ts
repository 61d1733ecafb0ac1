// Pure: the archive `kubectl ifp backup` writes and `kubectl ifp restore` reads (docs/backup.md).
// A POSIX tar of `manifest.json` (the format's version, what is inside and the SHA-256 of every
// other file), its own SHA-256 in `manifest.sha256`, and the files the manifest lists. Reading is
// strict: the tar is parsed by the `tar` package, every entry must be a regular file at a plain
// relative path the manifest lists (no `..`, no absolute path, no link, no directory, no name
// twice), every checksum must match, and the archive must be byte for byte the one these files
// make again, so no byte of it can change unnoticed. Nothing of an archive is ever written to disk.
import { createHash } from "node:crypto";
import { Parser, type ReadEntry } from "tar";
import { z } from "zod";
import { tar } from "./report.ts";

/** The archive format's name and the one version this plugin writes and reads. */
export const FORMAT = "ifp-backup";
export const FORMAT_VERSION = 1;
export const MANIFEST = "manifest.json";
export const MANIFEST_SUM = "manifest.sha256";

/** A file's path in the archive: relative, plain segments of letters, digits, `.`, `_` and `-`, none of them `.` or `..`. */
const SEGMENT = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,253}$/;
export function isPlainPath(path: string): boolean {
  const parts = path.split("/");
  return parts.length <= 8 && parts.every((p) => SEGMENT.test(p));
}

const Name = z.string().regex(/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/);
const Path = z.string().refine(isPlainPath, "not a plain relative path");
const Sha256 = z.string().regex(/^[0-9a-f]{64}$/);
const Owner = z.object({ kind: z.enum(["Agent", "Relay"]), namespace: Name, name: Name }).strict();

export const FileEntry = z
  .object({
    path: Path,
    sha256: Sha256,
    size: z.number().int().min(0),
    /** What the file holds: a Secret, an Agent or Relay, or a JetStream stream's snapshot (its request and its data). */
    kind: z.enum(["secret", "resource", "stream-meta", "stream-data"]),
  })
  .strict();

/** A stream of the backup: the account it came from (a runtime's own, or the install's shared one), its files. */
export const StreamEntry = z
  .object({
    /** The runtime whose account held it; absent: the shared account. */
    owner: Owner.optional(),
    stream: z.string().regex(/^[A-Za-z0-9_-]{1,255}$/),
    meta: Path,
    data: Path,
    messages: z.number().int().min(0),
    lastSeq: z.number().int().min(0),
  })
  .strict();

export const Manifest = z
  .object({
    format: z.literal(FORMAT),
    version: z.number().int(),
    created: z.string(),
    plugin: z.string(),
    install: z
      .object({
        operatorNamespace: Name,
        caSecret: Name,
        natsAccountSecret: Name.optional(),
        /** The public key of the install's NATS account (account.pub), when it has one. */
        account: z.string().optional(),
      })
      .strict(),
    files: z.array(FileEntry).max(100_000),
    streams: z.array(StreamEntry).max(100_000),
  })
  .strict();
export type Manifest = z.infer<typeof Manifest>;
export type FileKind = z.infer<typeof FileEntry>["kind"];

export class ArchiveError extends Error {}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** Files to archive, each with its kind; the manifest is made from them. */
export interface ArchiveInput {
  created: string;
  plugin: string;
  install: Manifest["install"];
  files: { path: string; kind: FileKind; content: Buffer }[];
  streams: Manifest["streams"];
}

/** The archive of `input`: the manifest, its checksum, then the files in the order given. */
export function writeArchive(input: ArchiveInput, mtime = Math.floor(Date.now() / 1000)): Buffer {
  const manifest: Manifest = {
    format: FORMAT,
    version: FORMAT_VERSION,
    created: input.created,
    plugin: input.plugin,
    install: input.install,
    files: input.files.map((f) => ({ path: f.path, sha256: sha256(f.content), size: f.content.length, kind: f.kind })),
    streams: input.streams,
  };
  const parsed = Manifest.safeParse(manifest);
  if (!parsed.success) throw new ArchiveError(`cannot write the manifest: ${parsed.error.issues[0]?.message}`);
  const m = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
  const entries = new Map<string, Buffer>([
    [MANIFEST, m],
    [MANIFEST_SUM, Buffer.from(`${sha256(m)}\n`)],
  ]);
  for (const f of input.files) {
    if (entries.has(f.path)) throw new ArchiveError(`${f.path} twice`);
    entries.set(f.path, f.content);
  }
  return tar(entries, mtime);
}

/** An archive read and checked: its manifest and every file it lists, by path. */
export interface Archive {
  manifest: Manifest;
  files: Map<string, Buffer>;
}

/** The entries of a tar, in order, each a regular file; anything else is refused. */
async function entriesOf(buf: Buffer): Promise<{ entries: [string, Buffer][]; mtime: number | undefined }> {
  const entries: [string, Buffer][] = [];
  let mtime: number | undefined;
  let failure: string | undefined;
  await new Promise<void>((resolve) => {
    const parser = new Parser({
      strict: true,
      onReadEntry: (entry: ReadEntry) => {
        const chunks: Buffer[] = [];
        if (entry.type !== "File" && entry.type !== "OldFile") failure ??= `${entry.path}: a ${entry.type}, not a file`;
        mtime ??= entry.mtime ? Math.floor(entry.mtime.getTime() / 1000) : undefined;
        entry.on("data", (c: Buffer) => chunks.push(c));
        entry.on("end", () => entries.push([entry.path, Buffer.concat(chunks)]));
      },
    });
    parser.on("error", (err: Error) => {
      failure ??= err.message;
      resolve();
    });
    parser.on("end", () => resolve());
    parser.on("close", () => resolve());
    parser.end(buf);
  });
  if (failure) throw new ArchiveError(`not a readable backup archive: ${failure}`);
  return { entries, mtime };
}

/**
 * The archive in `buf`, checked: a tar of regular files at plain paths, the manifest first with
 * its checksum, of this format and a version this plugin reads, every file it lists there once
 * with its size and SHA-256 and nothing else, and no byte other than those these files make.
 */
export async function readArchive(buf: Buffer): Promise<Archive> {
  const { entries, mtime } = await entriesOf(buf);
  if (entries[0]?.[0] !== MANIFEST || entries[1]?.[0] !== MANIFEST_SUM)
    throw new ArchiveError(`not a backup archive of kubectl ifp: no ${MANIFEST} at its start`);
  for (const [path] of entries)
    if (!isPlainPath(path))
      throw new ArchiveError(`the archive names ${JSON.stringify(path)}: not a plain relative path`);
  const [[, m], [, sum]] = entries as [[string, Buffer], [string, Buffer]];
  if (sum.toString("utf8").trim() !== sha256(m)) throw new ArchiveError(`${MANIFEST} does not match ${MANIFEST_SUM}`);
  let raw: unknown;
  try {
    raw = JSON.parse(m.toString("utf8"));
  } catch {
    throw new ArchiveError(`${MANIFEST} is not JSON`);
  }
  const head = raw as { format?: unknown; version?: unknown };
  if (head?.format !== FORMAT)
    throw new ArchiveError(`not a backup archive of kubectl ifp (format ${JSON.stringify(head?.format)})`);
  if (head.version !== FORMAT_VERSION)
    throw new ArchiveError(
      `archive version ${JSON.stringify(head.version)}: this plugin reads version ${FORMAT_VERSION} (use the kubectl ifp that wrote it)`,
    );
  const parsed = Manifest.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ArchiveError(`${MANIFEST}: ${issue?.path.join(".")}: ${issue?.message}`);
  }
  const manifest = parsed.data;
  const listed = new Map(manifest.files.map((f) => [f.path, f]));
  if (listed.size !== manifest.files.length) throw new ArchiveError(`${MANIFEST} lists a file twice`);
  const files = new Map<string, Buffer>();
  for (const [path, content] of entries.slice(2)) {
    const f = listed.get(path);
    if (!f) throw new ArchiveError(`${path} is in the archive but not in its manifest`);
    if (files.has(path)) throw new ArchiveError(`${path} is in the archive twice`);
    if (content.length !== f.size || sha256(content) !== f.sha256)
      throw new ArchiveError(`${path} does not match its checksum in the manifest: the archive was changed or damaged`);
    files.set(path, content);
  }
  for (const f of manifest.files)
    if (!files.has(f.path)) throw new ArchiveError(`${f.path} is missing from the archive`);
  for (const s of manifest.streams)
    for (const p of [s.meta, s.data])
      if (!files.has(p)) throw new ArchiveError(`stream ${s.stream}: ${p} is not in the archive`);
  // Every byte accounted for: the same files make the same archive again.
  if (!tar(new Map(entries), mtime).equals(buf))
    throw new ArchiveError("the archive has bytes outside its files: it was changed or damaged");
  return { manifest, files };
}
