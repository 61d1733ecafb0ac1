// runChecks: one `ifp check` run against a target, its groups run in order and collected into a
// report; and the URLs it accepts (an https target; a local API over https or loopback http).
import { isIPv4 } from "node:net";
import type { SigningKey } from "../protocol/signing.ts";
import { discoveryChecks } from "./discovery.ts";
import { inboxChecks } from "./inbox.ts";
import { Probe } from "./probe.ts";
import { relayChecks } from "./relay.ts";
import { redirectCheck, tlsChecks } from "./tls.ts";
import { sendChecks } from "./send.ts";
import { TestInbox } from "./test-inbox.ts";
import { summarize } from "./report.ts";
import { AGENT_GROUPS, RELAY_GROUPS, type CheckContext, type Group, type Report, type SendSetup } from "./types.ts";
import { Verdicts } from "./verdicts.ts";

export interface CheckOptions {
  url: string;
  relay?: boolean;
  key?: SigningKey;
  /** A second key the relay serves, for the topic check. */
  peerKey?: SigningKey;
  /**
   * The kit's own HTTPS inbox, on 127.0.0.1: a certificate (PEM) the target trusts for `host`
   * (default localhost), and the port (default any; fixed when the target is configured to send
   * the key's agent's messages there). Needed by the `send` group and the checks that wait for
   * what the target sends.
   */
  inbox?: { cert: string; key: string; port?: number; host?: string };
  /** A relay's own URL (its spec.url), when the kit reaches it at another address (a port-forward): the trace entry names it. */
  relayUrl?: string;
  /** The target's local application API, to make it send (`POST /outbox`). */
  localApi?: { url: string; token?: string };
  /** How long to wait for what the target sends, in ms (default 150 s: IFP-6's first retry comes after a minute). */
  sendWaitMs?: number;
  /** Extra trusted CA certificates (PEM). */
  extraCa?: string;
  only?: string;
  timeoutMs?: number;
  maxRequests?: number;
}

export class CheckUsageError extends Error {}

export const DEFAULT_SEND_WAIT_MS = 150_000;

/** The local API is the target's own control plane: https, or http to a loopback address only. */
export function localApiBase(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new CheckUsageError(`--local-api ${JSON.stringify(url)} is not a URL`);
  }
  // A loopback address itself, never a name that merely starts like one (127.0.0.1.example).
  const loopback = ["localhost", "[::1]"].includes(u.hostname) || (isIPv4(u.hostname) && u.hostname.startsWith("127."));
  if (u.protocol !== "https:" && !(u.protocol === "http:" && loopback))
    throw new CheckUsageError(
      "--local-api takes an https URL, or http to a loopback address (the pod's own local API)",
    );
  if (u.search || u.hash) throw new CheckUsageError("--local-api takes the base URL, without query or fragment");
  return `${u.origin}${u.pathname}`.replace(/\/+$/, "");
}

/** The https base URL of a target, or a usage error: the kit never talks to anything else. */
export function targetBase(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new CheckUsageError(`${JSON.stringify(url)} is not a URL`);
  }
  if (u.protocol !== "https:")
    throw new CheckUsageError(
      `${url} is not https: IFP transport is TLS only (spec 5.2), and the kit checks nothing else`,
    );
  if (u.search || u.hash) throw new CheckUsageError("give the base URL, without query or fragment");
  return `${u.origin}${u.pathname}`.replace(/\/+$/, "");
}

/** Run the checks of one target and return the report; never throws for what the target does. */
export async function runChecks(opts: CheckOptions): Promise<Report> {
  const base = targetBase(opts.url);
  const kind = opts.relay ? "relay" : "agent";
  const groups: readonly Group[] = opts.relay ? RELAY_GROUPS : AGENT_GROUPS;
  if (opts.only !== undefined && !groups.includes(opts.only as Group)) {
    throw new CheckUsageError(`--only takes one of ${groups.join(", ")} for ${opts.relay ? "a relay" : "an agent"}`);
  }
  const run = (g: Group) => opts.only === undefined || opts.only === g;
  if (opts.localApi && !opts.inbox)
    throw new CheckUsageError("--local-api needs the kit's inbox: --inbox-cert and --inbox-key");
  if (opts.relay && opts.localApi) throw new CheckUsageError("--local-api is for an agent, not a relay");
  const localApi = opts.localApi && { ...opts.localApi, url: localApiBase(opts.localApi.url) };
  const verdicts = new Verdicts();
  let send: SendSetup | undefined;
  if (opts.inbox) {
    const inbox = await TestInbox.start(opts.inbox).catch((err: Error) => {
      throw new CheckUsageError(`the kit's inbox cannot start: ${err.message}`);
    });
    send = { inbox, localApi, waitMs: opts.sendWaitMs ?? DEFAULT_SEND_WAIT_MS };
  }
  const probe = new Probe({ extraCa: opts.extraCa, timeoutMs: opts.timeoutMs, maxRequests: opts.maxRequests });
  const ctx: CheckContext = {
    base,
    probe,
    key: opts.key,
    peerKey: opts.peerKey,
    relayUrl: opts.relayUrl === undefined ? base : targetBase(opts.relayUrl),
    send,
    learned: {},
    errors: [],
    has: (id) => verdicts.has(id),
    record: (id, result, why) => verdicts.record(id, result, why),
  };
  try {
    if (opts.relay) {
      if (run("tls")) await tlsChecks(ctx, "/relay/messages");
      if (run("relay")) await relayChecks(ctx);
    } else {
      if (run("discovery")) await discoveryChecks(ctx);
      if (run("tls")) await tlsChecks(ctx, "/.well-known/agent/capabilities");
      if (run("inbox")) await inboxChecks(ctx);
      if (run("send")) await sendChecks(ctx);
    }
    if (run("tls")) redirectCheck(ctx);
  } finally {
    await probe.close();
    await send?.inbox.close();
  }
  const { results } = verdicts;
  return { target: base, kind, requests: probe.count, results, summary: summarize(results) };
}
