// One form of a host name for every allow and deny list of the project. The same host can be
// written several ways that DNS and TLS take as one — any case, with or without the root's
// trailing dot, in Unicode or as its IDNA (punycode) A-label — and a list compared against only
// one of them is passed with another. Both the name looked at and every list entry go through
// canonicalHost before they are compared.
import { domainToASCII } from "node:url";

/**
 * The host name lower-cased, with one trailing dot removed and in IDNA ASCII form. A name that
 * is not a valid domain (an IP literal, say) stays as written, lower-cased and without the dot.
 * A list entry `*.<domain>` keeps its `*.` and has the domain made canonical.
 */
export function canonicalHost(host: string): string {
  if (host.startsWith("*.")) return `*.${canonicalHost(host.slice(2))}`;
  const lower = host.toLowerCase();
  const ascii = domainToASCII(lower) || lower;
  return ascii.endsWith(".") ? ascii.slice(0, -1) : ascii;
}

/** Whether the canonical `host` is matched by the canonical list entry: the name itself, `*.<domain>` any name below it. */
export function hostMatches(host: string, entry: string): boolean {
  if (entry.startsWith("*.")) return host.endsWith(entry.slice(1)) && host.length > entry.length - 1;
  return host === entry;
}

/** An agent id with the host of an https one made canonical (any other id as it is), for comparing ids on a list. */
export function canonicalAgentId(id: string): string {
  let url: URL;
  try {
    url = new URL(id);
  } catch {
    return id;
  }
  if (url.protocol !== "https:") return id;
  url.hostname = canonicalHost(url.hostname);
  return url.href;
}
