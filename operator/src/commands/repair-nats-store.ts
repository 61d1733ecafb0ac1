// `ifp-operator repair-nats-store`: the init container of the chart's standalone NATS (one
// server, `nats.replicas: 1`). A standalone nats-server accepts an update of a stream to more
// than one replica, writes it to the stream's meta.inf, and at its next start cannot load the
// stream ("replicas > 1 not supported in non-clustered mode"): the stream and its messages are
// gone from its view while they are still on its disk. Before the server starts, this finds such
// streams in the store and sets their replicas back to one, rewriting meta.inf and its checksum
// (meta.sum: HighwayHash-64 keyed with the SHA-256 of the stream's directory name, as
// nats-server writes and checks it). Nothing else is changed; an encrypted store (a key file
// beside meta.inf) is left alone and reported.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { HighwayHash } from "highwayhasher";
import type { Logger } from "pino";
import { errorMessage } from "../../../runtime/src/util/errors.ts";
import { readFlags, subcommand, UsageError } from "./flags.ts";

const META = "meta.inf";
const SUM = "meta.sum";
const KEY = "meta.key";

export interface RepairOutcome {
  /** `<account>/<stream>` of each stream set back to one replica. */
  repaired: string[];
  /** `<account>/<stream>: why` of each stream that has more replicas and could not be repaired. */
  skipped: string[];
}

/** The checksum nats-server keeps beside a stream's meta.inf. */
export async function metaChecksum(streamDir: string, meta: Uint8Array): Promise<string> {
  const key = createHash("sha256").update(streamDir).digest();
  const hasher = await HighwayHash.loadModule();
  return Buffer.from(hasher.hash64(key, meta)).toString("hex");
}

/**
 * Set every stream of a JetStream store directory (`store_dir/jetstream`, or `store_dir` itself)
 * that has more than one replica back to one. Run only while the server is stopped, and only for
 * a server that is not clustered (a cluster holds such streams).
 */
export async function repairStore(dir: string, log?: Logger): Promise<RepairOutcome> {
  const root = existsSync(join(dir, "jetstream")) ? join(dir, "jetstream") : dir;
  const outcome: RepairOutcome = { repaired: [], skipped: [] };
  if (!existsSync(root)) return outcome;
  for (const account of await readdir(root, { withFileTypes: true })) {
    if (!account.isDirectory()) continue;
    const streams = join(root, account.name, "streams");
    if (!existsSync(streams)) continue;
    for (const stream of await readdir(streams, { withFileTypes: true })) {
      // A name starting with "." is a stream being deleted (nats-server removes it at start).
      if (!stream.isDirectory() || stream.name.startsWith(".")) continue;
      const sdir = join(streams, stream.name);
      const what = `${account.name}/${stream.name}`;
      try {
        const r = await repairStream(sdir, stream.name);
        if (r === "repaired") {
          outcome.repaired.push(what);
          log?.warn(
            { stream: what },
            "stream had more than one replica on a standalone NATS (it could not be loaded): set back to one",
          );
        } else if (r !== "fine") {
          outcome.skipped.push(`${what}: ${r}`);
          log?.error({ stream: what, reason: r }, "stream has more than one replica and was left as it is");
        }
      } catch (err) {
        outcome.skipped.push(`${what}: ${errorMessage(err)}`);
        log?.error({ stream: what, err: errorMessage(err) }, "stream could not be checked");
      }
    }
  }
  return outcome;
}

async function repairStream(dir: string, name: string): Promise<"fine" | "repaired" | string> {
  const metaFile = join(dir, META);
  if (!existsSync(metaFile)) return "fine";
  if (existsSync(join(dir, KEY))) return "fine"; // encrypted: its meta.inf is not JSON to read here
  const raw = await readFile(metaFile);
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
  } catch {
    return "fine"; // not a plain JSON config: not ours to touch
  }
  const replicas = typeof config.num_replicas === "number" ? config.num_replicas : 1;
  if (replicas <= 1) return "fine";
  // Only a file whose checksum nats-server would accept is rewritten: anything else is damage of another kind.
  const sum = existsSync(join(dir, SUM)) ? (await readFile(join(dir, SUM), "utf8")).trim() : "";
  if (sum !== (await metaChecksum(name, raw))) return "its meta.sum does not match its meta.inf";
  const fixed = Buffer.from(JSON.stringify({ ...config, num_replicas: 1 }));
  // Written beside and renamed over, so that a crash leaves either the old pair or the new one
  // (a crash between the two renames leaves a checksum mismatch, which the next run reports).
  await writeFile(join(dir, `${META}.repair`), fixed);
  await writeFile(join(dir, `${SUM}.repair`), await metaChecksum(name, fixed));
  await rename(join(dir, `${META}.repair`), metaFile);
  await rename(join(dir, `${SUM}.repair`), join(dir, SUM));
  return "repaired";
}

export const REPAIR_NATS_STORE_USAGE = `
usage: ifp-operator repair-nats-store --store-dir DIR [flags]

The init container of the chart's standalone NATS (nats.replicas: 1), run before nats-server
starts: sets every stream of the store that has more than one replica (which a standalone server
cannot load) back to one replica. Exits 0 when nothing is left that the server could not load.

  --store-dir DIR                 the JetStream store directory (nats-server's store_dir)
  --log-level LEVEL               info (default), debug, warn, error [IFP_LOG_LEVEL]
`;

const OPTIONS = {
  "store-dir": { type: "string" },
  "log-level": { type: "string", env: "IFP_LOG_LEVEL" },
} as const;

export function parseRepairFlags(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): { help: boolean; storeDir: string; logLevel: string } {
  const { values, str } = readFlags(OPTIONS, argv, env);
  const storeDir = str("store-dir");
  if (!values.help && !storeDir) throw new UsageError("repair-nats-store needs --store-dir");
  return { help: Boolean(values.help), storeDir: storeDir ?? "", logLevel: str("log-level") ?? "info" };
}

/** `ifp-operator repair-nats-store`. A stream it could not repair is logged; the server still starts (it serves the others). */
export function repairNatsStoreMain(argv: string[]): Promise<void> {
  return subcommand("repair-nats-store", REPAIR_NATS_STORE_USAGE, argv, parseRepairFlags, async (parsed, log) => {
    const { repaired, skipped } = await repairStore(parsed.storeDir, log);
    log.info({ repaired: repaired.length, skipped: skipped.length }, "NATS store checked");
  });
}
