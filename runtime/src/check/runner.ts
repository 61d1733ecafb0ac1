import type { SigningKey } from "../protocol/signing.ts";
import { clip } from "./common.ts";
import { discoveryChecks } from "./discovery.ts";
import { inboxChecks } from "./inbox.ts";
import { Probe } from "./probe.ts";
import { relayChecks } from "./relay.ts";
import { redirectCheck, tlsChecks } from "./tls.ts";
import { AGENT_GROUPS, RELAY_GROUPS, type CheckContext, type CheckResult, type Group, type Report } from "./types.ts";

export interface CheckOptions {
  url: string;
  relay?: boolean;
  key?: SigningKey;
  /** Extra trusted CA certificates (PEM). */
  extraCa?: string;
  only?: string;
  timeoutMs?: number;
  maxRequests?: number;
}

export class CheckUsageError extends Error {}

/** The https base URL of a target, or a usage error: the kit never talks to anything else. */
export function targetBase(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new CheckUsageError(`${JSON.stringify(url)} is not a URL`);
  }
  if (u.protocol !== "https:") throw new CheckUsageError(`${url} is not https: IFP transport is TLS only (spec 5.2), and the kit checks nothing else`);
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
  const results: CheckResult[] = [];
  const probe = new Probe({ extraCa: opts.extraCa, timeoutMs: opts.timeoutMs, maxRequests: opts.maxRequests });
  const ctx: CheckContext = {
    base,
    probe,
    key: opts.key,
    learned: {},
    has: (id) => results.some((r) => r.id === id),
    record: (id, spec, result, why) => {
      const reason = clip(why, 300);
      const i = results.findIndex((r) => r.id === id);
      if (i >= 0) results[i] = { id, spec, result, reason }; // a later, sharper verdict replaces the first
      else results.push({ id, spec, result, reason });
    },
  };
  try {
    if (opts.relay) {
      if (run("tls")) await tlsChecks(ctx, "/relay/messages");
      if (run("relay")) await relayChecks(ctx);
    } else {
      if (run("discovery")) await discoveryChecks(ctx);
      if (run("tls")) await tlsChecks(ctx, "/.well-known/agent/capabilities");
      if (run("inbox")) await inboxChecks(ctx);
    }
    if (run("tls")) redirectCheck(ctx);
  } finally {
    await probe.close();
  }
  const summary = { pass: 0, fail: 0, skip: 0 };
  for (const r of results) summary[r.result]++;
  return { target: base, kind, requests: probe.count, results, summary };
}
