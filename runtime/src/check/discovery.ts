// The discovery group of `ifp check`: the target's capability and identity documents — media
// type, schema, required fields, caching headers and conditional GET.
import type { z } from "zod";
import { CapabilityDocument, IdentityDocument } from "../protocol/documents.ts";
import { publicKeyFromRaw } from "../protocol/keys.ts";
import { clip, mediaType, parseJson } from "./common.ts";
import type { NoAnswer, Answer } from "./probe.ts";
import type { CheckContext } from "./types.ts";

const WELL_KNOWN = "/.well-known/agent";

/**
 * Endpoint discovery (spec 2.4, 4.1, 9; IFP-6 1.2–1.3; IFP-7): both documents, their media
 * type, schema, required fields, caching headers and conditional GET.
 */
export async function discoveryChecks(ctx: CheckContext): Promise<void> {
  const caps = await documentChecks(ctx, "capabilities", CapabilityDocument);
  if (caps) {
    const required = ["ifp", "agent_id", "capabilities", "ifp_support", "updated"].filter(
      (f) => !(f in (caps as object)),
    );
    ctx.record(
      "discovery.capabilities.required-fields",
      required.length ? "fail" : "pass",
      required.length
        ? `the endpoint document lacks ${required.join(", ")}`
        : "ifp, agent_id, capabilities, ifp_support and updated are present",
    );
    const support = caps.ifp_support;
    if (!Array.isArray(support)) ctx.record("discovery.capabilities.ifp-support", "fail", "no ifp_support list");
    else {
      const missing = [6, 7].filter((n) => !support.includes(n));
      ctx.record(
        "discovery.capabilities.ifp-support",
        missing.length ? "fail" : "pass",
        missing.length
          ? `ifp_support [${support.join(", ")}] does not list ${missing.join(" and ")}, which an agent serving this document and an inbox implements`
          : `ifp_support [${support.join(", ")}]`,
      );
    }
    if (caps.agent_id) ctx.learned.agentId = caps.agent_id;
    ctx.learned.capabilities = caps as NonNullable<CheckContext["learned"]["capabilities"]>;
    const limit = advertisedLimit(caps);
    if (limit) ctx.learned.maxMessageBytes = limit;
  }
  const identity = await documentChecks(ctx, "identity", IdentityDocument);
  if (identity) {
    const bad = identity.keys.filter((k) => {
      if (k.type !== "ed25519") return false;
      try {
        publicKeyFromRaw(k.public_key);
        return false;
      } catch {
        return true;
      }
    });
    const active = identity.keys.filter((k) => k.status === "active");
    ctx.record(
      "discovery.identity.keys",
      bad.length || !active.length ? "fail" : "pass",
      bad.length
        ? `key ${bad[0]!.key_id}: public_key is not base64url of 32 raw Ed25519 bytes`
        : active.length
          ? `${active.length} active key(s)`
          : "no active key",
    );
    if (caps?.agent_id) {
      const same = caps.agent_id === identity.agent_id;
      ctx.record(
        "discovery.agent-id-consistent",
        same ? "pass" : "fail",
        same
          ? `both documents name ${identity.agent_id}`
          : `capabilities say ${caps.agent_id}, identity says ${identity.agent_id}`,
      );
    }
    ctx.learned.agentId ??= identity.agent_id;
    ctx.learned.identity = identity;
  }
}

/** A size limit the capability document advertises, if any (no field for it is standard). */
function advertisedLimit(doc: CapabilityDocument): number | undefined {
  const d = doc as { limits?: { max_message_bytes?: unknown }; max_message_bytes?: unknown };
  const candidates = [
    d.limits?.max_message_bytes,
    d.max_message_bytes,
    doc.capabilities.find((c) => c.name === "message.receive")?.parameters?.max_message_bytes,
  ];
  return candidates.find((v): v is number => typeof v === "number" && Number.isInteger(v) && v > 0);
}

async function documentChecks<S extends z.ZodType>(
  ctx: CheckContext,
  name: "capabilities" | "identity",
  schema: S,
): Promise<z.infer<S> | undefined> {
  const id = `discovery.${name}`;
  const url = `${ctx.base}${WELL_KNOWN}/${name}`;
  const later = ["media-type", "schema", "etag", "cache-control", "not-modified"];
  const skipRest = (why: string) => {
    for (const c of later) ctx.record(`${id}.${c}`, "skip", why);
  };
  let res: Answer;
  try {
    res = await ctx.probe.request(url, { headers: { accept: "application/json" } });
  } catch (err) {
    ctx.record(`${id}.status`, "fail", `GET ${url}: ${(err as NoAnswer).message}`);
    skipRest("no answer to the GET");
    return undefined;
  }
  if (res.status === 404) {
    ctx.record(`${id}.status`, "skip", `not served (404); the ${name} endpoint is optional (spec 4.1)`);
    skipRest("the document is not served");
    return undefined;
  }
  if (res.status !== 200) {
    ctx.record(
      `${id}.status`,
      "fail",
      `GET answered ${res.status}, expected 200 or 404 (not served): ${clip(res.text)}`,
    );
    skipRest(`GET answered ${res.status}`);
    return undefined;
  }
  ctx.record(`${id}.status`, "pass", "200");
  const type = mediaType(res);
  ctx.record(
    `${id}.media-type`,
    type === "application/json" ? "pass" : "fail",
    type === "application/json"
      ? "application/json"
      : `Content-Type is ${JSON.stringify(res.headers.get("content-type"))}, expected application/json`,
  );
  const json = parseJson(res.text);
  const parsed = schema.safeParse(json);
  if (json === undefined) ctx.record(`${id}.schema`, "fail", `the body is not JSON: ${clip(res.text)}`);
  else if (parsed.success) ctx.record(`${id}.schema`, "pass", "the document validates");
  else
    ctx.record(
      `${id}.schema`,
      "fail",
      `not a valid ${name} document: ${parsed.error.issues
        .slice(0, 3)
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );

  // Caching aids: nothing requires them (spec 9.2 asks peers to cache, not servers to help).
  const etag = res.headers.get("etag");
  const etagOk = !!etag && /^(W\/)?"[\x21\x23-\x7e\x80-\xff]*"$/.test(etag);
  ctx.record(
    `${id}.etag`,
    etagOk ? "pass" : etag ? "fail" : "skip",
    etagOk
      ? `ETag ${etag}`
      : etag
        ? `ETag ${JSON.stringify(etag)} is not an entity tag (RFC 9110 8.8.3)`
        : "no ETag (optional: peers cannot revalidate, only refetch)",
  );
  const cc = res.headers.get("cache-control");
  const ccOk = !!cc && /max-age=\d+|no-cache/.test(cc) && !/no-store/.test(cc);
  ctx.record(
    `${id}.cache-control`,
    ccOk ? "pass" : cc ? "fail" : "skip",
    ccOk
      ? `Cache-Control: ${cc}`
      : cc
        ? `Cache-Control: ${cc} does not let peers cache and revalidate (max-age or no-cache, no no-store), which spec 9.2 asks them to do`
        : "no Cache-Control (optional)",
  );
  if (!etagOk) ctx.record(`${id}.not-modified`, "skip", "no usable ETag to revalidate with");
  else {
    try {
      const again = await ctx.probe.request(url, { headers: { accept: "application/json", "if-none-match": etag! } });
      ctx.record(
        `${id}.not-modified`,
        again.status === 304 ? "pass" : "fail",
        again.status === 304
          ? "304 on a matching If-None-Match"
          : `If-None-Match with the ETag answered ${again.status}, expected 304`,
      );
    } catch (err) {
      ctx.record(`${id}.not-modified`, "fail", (err as Error).message);
    }
  }
  return parsed.success ? (parsed.data as z.infer<S>) : undefined;
}
