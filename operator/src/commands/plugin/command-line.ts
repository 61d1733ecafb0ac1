// What `kubectl ifp` reads of its command line (main.ts parses it): the flags and the parsed
// form every command is given, apart from the commands themselves so that each imports it alone.

/** The flags of send, tail and redrive. */
export const MESSAGING_FLAGS = ["to", "text", "phase", "wait", "since", "count", "timeout", "limit"] as const;

/** The usage's lines of backup and restore. */
export const BACKUP_USAGE = `  backup [-o FILE.tar] --nats-url URL [--no-data]
                              one archive of what rebuilds the install: the install CA's and the
                              NATS keys' Secrets, each Agent's signing Secret, the Agents and Relays,
                              and every runtime's JetStream streams (snapshots through --nats-url,
                              e.g. a port-forward to the chart's NATS); mode 0600, keep it secret;
                              default file ifp-backup-<time>.tar
  restore FILE [--keys-only] [--nats-url URL] [--force] [--timeout S]
                              put an archive back: its Secrets (--keys-only: those alone, before
                              the chart is installed), then its Agents and Relays, then their
                              streams once the operator has given each its NATS account; refuses
                              a changed archive, and whatever the cluster holds differently,
                              unless --force
`;

/** The flags of backup and restore (parseArgs options). */
export const BACKUP_FLAGS = {
  "nats-url": { type: "string" },
  "nats-server-name": { type: "string" },
  "no-data": { type: "boolean" },
  "keys-only": { type: "boolean" },
  force: { type: "boolean" },
} as const;
export type BackupFlags = Partial<Record<keyof typeof BACKUP_FLAGS, string | boolean>>;

/** A command line as parsed. */
export interface Parsed {
  command: string;
  args: string[];
  namespace?: string;
  allNamespaces: boolean;
  output?: string;
  kubeconfig?: string;
  context?: string;
  operatorNamespace?: string;
  /** send, tail and redrive: their flags, as given. */
  messaging: Partial<Record<(typeof MESSAGING_FLAGS)[number], string>>;
  /** backup and restore: their flags, as given. */
  backup: BackupFlags;
  /** redrive --all. */
  all: boolean;
  help: boolean;
  version: boolean;
}
