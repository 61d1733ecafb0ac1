// spec.network and the host and address types it and spec.expose take: DNS names, IP addresses
// and CIDR blocks that outbound requests may reach.
import { isIP } from "node:net";
import { z } from "zod";
import { cel } from "./schema.ts";

/**
 * A DNS name as a host header carries it: lower-case labels of letters, digits and '-', no
 * scheme, port, path or wildcard (it becomes the default https base URL).
 */
const DNS_NAME = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$";
const DNS_NAME_MESSAGE = "must be a DNS name such as agent.example.com (lower case; no scheme, port, path or wildcard)";
export const DnsName = z
  .string()
  .min(1)
  .max(253)
  // A CEL rule rather than a pattern, so that the API server answers with the message.
  .refine((s) => new RegExp(DNS_NAME).test(s), DNS_NAME_MESSAGE)
  .meta(cel({ rule: `self.matches('${DNS_NAME.replaceAll("\\", "\\\\")}')`, message: DNS_NAME_MESSAGE }));

/** An IP address or a CIDR block ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"). */
export function isCidrOrIp(text: string): boolean {
  const [addr, bits, ...rest] = text.split("/");
  if (rest.length || !addr) return false;
  const family = isIP(addr);
  if (!family) return false;
  if (bits === undefined) return true;
  if (!/^\d{1,3}$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

export const Cidr = z
  .string()
  .max(64)
  .refine(isCidrOrIp, "must be an IP address or a CIDR block such as 10.0.0.0/8")
  .meta(
    cel({ rule: "isCIDR(self) || isIP(self)", message: "must be an IP address or a CIDR block such as 10.0.0.0/8" }),
  );

/**
 * spec.network: which special addresses outbound requests to peers may reach. Peer discovery,
 * delivery to an inbox or a peer's relay, the agent's relays, and a relay's webhook push go only
 * to https URLs whose address, after DNS resolution, is public, or inside one of these blocks.
 */
export const NetworkSpec = z.object({
  allowPrivateTargets: z
    .array(Cidr)
    .max(64)
    .default([])
    .describe(
      "IP addresses or CIDR blocks of loopback, private, link-local or other special addresses that peers, relays and webhooks may resolve to (e.g. 10.0.0.0/8 for peers inside the cluster); the operator adds the cluster's own networks",
    ),
});
export type NetworkSpec = z.infer<typeof NetworkSpec>;
