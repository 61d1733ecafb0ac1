// What `kubectl ifp` reads of its command line (main.ts parses it): the flags and the parsed
// form every command is given, apart from the commands themselves so that each imports it alone.

/** The flags of send, tail and redrive. */
export const MESSAGING_FLAGS = ["to", "text", "phase", "wait", "since", "count", "timeout", "limit"] as const;

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
