// `kubectl ifp backup` and `kubectl ifp restore`: their flags and arguments checked, the archive
// written (mode 0600: it holds the install's keys) or read and checked before the cluster is
// asked anything (backup.ts, backup-archive.ts; docs/backup.md).
import { readFileSync, writeFileSync } from "node:fs";
import { ArchiveError, readArchive } from "./backup-archive.ts";
import { backup, restore } from "./backup.ts";
import type { Parsed } from "./command-line.ts";
import { PluginError, UsageError } from "./errors.ts";
import { checkNamespace, connect } from "./kube.ts";
import { printable } from "../../../../runtime/src/util/printable.ts";

type Args = Pick<
  Parsed,
  | "args"
  | "namespace"
  | "allNamespaces"
  | "output"
  | "kubeconfig"
  | "context"
  | "operatorNamespace"
  | "messaging"
  | "all"
  | "backup"
>;

// What is said names what the cluster and the archive hold: printed as text, never as control characters.
const say = (line: string) => void process.stderr.write(`kubectl ifp: ${printable(line)}\n`);

export async function backupCommand(command: "backup" | "restore", p: Args): Promise<number> {
  const allowed: Record<typeof command, string[]> = {
    backup: ["nats-url", "nats-server-name", "no-data"],
    restore: ["nats-url", "nats-server-name", "keys-only", "force", "timeout"],
  };
  const given = [...Object.keys(p.backup), ...Object.keys(p.messaging), ...(p.all ? ["all"] : [])];
  const stray = given.find((f) => !allowed[command].includes(f));
  if (stray) throw new UsageError(`--${stray} does not go with ${command}`);
  const nats = {
    ...(typeof p.backup["nats-url"] === "string" ? { natsUrl: p.backup["nats-url"] } : {}),
    ...(typeof p.backup["nats-server-name"] === "string" ? { natsServerName: p.backup["nats-server-name"] } : {}),
  };
  if (nats.natsUrl !== undefined && !/^(nats|tls):\/\/[^\s/]+$|^[^\s/:]+:\d+$/.test(nats.natsUrl))
    throw new UsageError(`--nats-url takes nats://HOST:PORT or tls://HOST:PORT (got ${JSON.stringify(nats.natsUrl)})`);
  if (command === "backup") {
    if (p.args.length) throw new UsageError(`backup takes no arguments (got ${p.args.join(" ")})`);
    if (!nats.natsUrl && !p.backup["no-data"])
      throw new UsageError("backup needs --nats-url to read the JetStream data (or --no-data for the rest alone)");
    if (nats.natsUrl && p.backup["no-data"]) throw new UsageError("--nats-url and --no-data together: choose one");
    if (p.allNamespaces && p.namespace) throw new UsageError("-n and -A together: choose one");
    const file = p.output ?? `ifp-backup-${new Date().toISOString().replace(/[:.]/g, "-")}.tar`;
    if (file === "json") throw new UsageError("backup writes a tar: -o FILE.tar");
    const c = connect(p);
    if (p.namespace) await checkNamespace(c, p.namespace);
    const archive = await backup(
      c,
      { ...nats, namespace: p.namespace, operatorNamespace: p.operatorNamespace, skipData: !!p.backup["no-data"] },
      say,
    );
    try {
      writeFileSync(file, archive, { mode: 0o600, flag: "wx" });
    } catch (err) {
      throw new PluginError(`cannot write ${file}: ${(err as Error).message}`);
    }
    say(`wrote ${file} (${archive.length} bytes)`);
    return 0;
  }
  const [file, ...rest] = p.args;
  if (!file) throw new UsageError("restore needs the archive: restore FILE");
  if (rest.length) throw new UsageError(`restore takes one archive (got ${p.args.join(" ")})`);
  if (p.output !== undefined || p.namespace !== undefined || p.allNamespaces)
    throw new UsageError("restore puts back what the archive holds, where it was: no -o, -n or -A");
  const timeout = p.messaging.timeout;
  if (timeout !== undefined && (!/^\d{1,5}$/.test(timeout) || Number(timeout) < 1 || Number(timeout) > 3600))
    throw new UsageError(`--timeout takes whole seconds, 1 to 3600 (got ${JSON.stringify(timeout)})`);
  let buf: Buffer;
  try {
    buf = readFileSync(file);
  } catch (err) {
    throw new PluginError(`cannot read ${file}: ${(err as Error).message}`);
  }
  let archive: Awaited<ReturnType<typeof readArchive>>;
  try {
    archive = await readArchive(buf);
  } catch (err) {
    if (err instanceof ArchiveError) throw new PluginError(`${file}: ${err.message}`);
    throw err;
  }
  const c = connect(p);
  await restore(
    c,
    archive,
    {
      ...nats,
      force: !!p.backup.force,
      keysOnly: !!p.backup["keys-only"],
      timeoutMs: Number(timeout ?? 120) * 1000,
    },
    say,
  );
  say(`restored ${file}`);
  return 0;
}
