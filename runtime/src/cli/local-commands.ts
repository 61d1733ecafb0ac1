// `ifp send --local-api URL …`, `ifp tail` and `ifp redrive`: the agent's own runtime does the
// work, through its local API (docs/local-api.openapi.yaml). Sending: the runtime signs with the
// agent's key and stores the message in its outbox before the 202. Tailing: GET /messages/watch
// of the loopback listener, every message the inbox accepts, taken from nobody. Redriving: POST
// /dead-letters/…/redrive, dead letters back into the outbox. Circuits: GET /circuits, the
// destinations whose circuit breaker is not closed. `kubectl ifp send|tail|redrive` runs these
// inside the Agent's pod, and `kubectl ifp describe agent` `ifp circuits` (docs/kubectl-plugin.md).
import { request as httpRequest } from "node:http";
import { parseArgs } from "node:util";
import { LocalApiClient, LocalApiError } from "../client/local.ts";
import { sseEvents } from "../net/sse.ts";
import { printable, printableJson } from "../util/printable.ts";

const say = (line: string) => process.stderr.write(`${printable(line, { lines: true })}\n`);
/** JSON of others' messages and answers, printable on the admin's terminal. */
const printJson = (json: string) => process.stdout.write(printableJson(json));

/** A command-line mistake: ifp prints it with the usage and exits 2. */
export class LocalUsageError extends Error {}

const DEFAULT_LOCAL_API = "http://127.0.0.1:8081";

function seconds(name: string, value: string | undefined, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,7}$/.test(value) || Number(value) > max)
    throw new LocalUsageError(`--${name} takes whole seconds, 0 to ${max} (got ${JSON.stringify(value)})`);
  return Number(value);
}

function localBase(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new LocalUsageError(`--local-api ${JSON.stringify(url)} is not a URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new LocalUsageError(`--local-api ${JSON.stringify(url)}: use the local API's http(s) URL`);
  return url.replace(/\/+$/, "");
}

const FINAL = new Set(["delivered", "failed", "undeliverable"]);

/**
 * Queue one message through the local API. stdout: `202 {…}` as the runtime answered, then with
 * `wait` the delivery state once final (or when the wait ends). Exit 0 on 202 (with `wait`: once
 * delivered), 1 otherwise.
 */
export async function localSend(opts: {
  localApi: string;
  /** An agent id, or an A2A agent's card URL. */
  to: string | { a2a: string };
  text: string;
  phase: string;
  wait?: string;
}): Promise<number> {
  const base = localBase(opts.localApi);
  const wait = seconds("wait", opts.wait, 3600);
  const client = new LocalApiClient(base);
  const to = typeof opts.to === "string" ? opts.to : `the A2A agent of ${opts.to.a2a}`;
  say(`queueing a message to ${to} through ${base} …`);
  let queued: Awaited<ReturnType<LocalApiClient["send"]>>;
  try {
    queued = await client.send({ to: opts.to, phase: opts.phase, text: opts.text });
  } catch (err) {
    if (err instanceof LocalApiError) {
      printJson(`${err.status} ${JSON.stringify({ status: "error", code: err.code, message: err.message })}\n`);
      return 1;
    }
    throw new Error(`cannot reach the local API at ${base}: ${(err as Error).message}`);
  }
  printJson(`202 ${JSON.stringify(queued)}\n`);
  if (!wait) return 0;
  const deadline = Date.now() + wait * 1000;
  let state = "queued";
  for (;;) {
    const record = await client.status(queued.message_id).catch(() => undefined);
    if (record) state = record.state;
    if (record && FINAL.has(record.state)) {
      printJson(`${JSON.stringify(record)}\n`);
      return record.state === "delivered" ? 0 : 1;
    }
    if (Date.now() >= deadline) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  say(`${queued.message_id} is still ${state} after ${wait} s (the outbox keeps trying)`);
  return 1;
}

/** `ifp tail`: follow what the agent receives, one JSON line per accepted message. */
export async function tailCommand(args: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        "local-api": { type: "string" },
        since: { type: "string" },
        count: { type: "string" },
        timeout: { type: "string" },
        "stop-on-eof": { type: "boolean" },
      },
    }));
  } catch (err) {
    throw new LocalUsageError((err as Error).message);
  }
  const base = localBase((values["local-api"] as string | undefined) ?? process.env.IFP_LOCAL_API ?? DEFAULT_LOCAL_API);
  const since = seconds("since", values.since as string | undefined, 7 * 24 * 3600) ?? 0;
  const timeout = seconds("timeout", values.timeout as string | undefined, 24 * 3600);
  const countText = values.count as string | undefined;
  if (countText !== undefined && !/^[1-9]\d{0,6}$/.test(countText))
    throw new LocalUsageError(`--count takes a whole number of messages, 1 or more (got ${JSON.stringify(countText)})`);
  const count = countText === undefined ? undefined : Number(countText);
  const url = `${base}/messages/watch${since ? `?since=${since}` : ""}`;
  return new Promise<number>((resolve) => {
    let seen = 0;
    let finished = false;
    const done = (code: number, line?: string) => {
      if (finished) return;
      finished = true;
      if (line) say(line);
      clearTimeout(timer);
      req.destroy();
      process.stdin.pause();
      resolve(code);
    };
    const timer = timeout
      ? setTimeout(
          () =>
            done(
              count === undefined ? 0 : 1,
              count === undefined ? undefined : `${seen} of ${count} message(s) in ${timeout} s`,
            ),
          timeout * 1000,
        )
      : undefined;
    const req = httpRequest(url, { headers: { accept: "text/event-stream" }, agent: false }, (res) => {
      if (res.statusCode !== 200) {
        let body = "";
        res.on("data", (c: Buffer) => (body += c));
        res.on("end", () => done(1, `the local API answered ${res.statusCode}: ${body.trim()}`));
        return;
      }
      // Said once the watch is open: every message accepted from here on is shown.
      say(`following the messages the agent at ${base} accepts${since ? `, from ${since} s ago` : ""} …`);
      void (async () => {
        try {
          for await (const event of sseEvents(res)) {
            if (event.event !== "message") continue;
            printJson(`${event.data}\n`);
            if (count !== undefined && ++seen >= count) return done(0);
          }
          done(1, `the local API at ${base} closed the stream`);
        } catch (err) {
          done(1, `the stream from ${base} broke off: ${(err as Error).message}`);
        }
      })();
    });
    req.on("error", (err) => done(1, `cannot reach the local API at ${base}: ${err.message}`));
    req.end();
    process.once("SIGINT", () => done(0));
    process.once("SIGTERM", () => done(0));
    if (values["stop-on-eof"]) {
      // Run by `kubectl ifp tail` over an exec: the connection's end closes stdin, and the
      // process must not outlive it in the pod.
      process.stdin.on("end", () => done(0));
      process.stdin.on("close", () => done(0));
      process.stdin.resume();
    }
  });
}

/** The options of a command that only talks to the local API, and its base URL. */
function localOptions(
  args: string[],
  options: Record<string, { type: "string" | "boolean" }>,
): { values: Record<string, string | boolean | undefined>; positionals: string[]; base: string } {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: { "local-api": { type: "string" }, ...options },
    }));
  } catch (err) {
    throw new LocalUsageError((err as Error).message);
  }
  const base = localBase((values["local-api"] as string | undefined) ?? process.env.IFP_LOCAL_API ?? DEFAULT_LOCAL_API);
  return { values, positionals, base };
}

/** Print what the local API answered (`<status> <JSON>`): 0 on its success, 1 on its error answer. */
async function printAnswer(base: string, status: number, call: () => Promise<unknown>): Promise<number> {
  try {
    printJson(`${status} ${JSON.stringify(await call())}\n`);
    return 0;
  } catch (err) {
    if (err instanceof LocalApiError) {
      printJson(`${err.status} ${JSON.stringify({ status: "error", code: err.code, message: err.message })}\n`);
      return 1;
    }
    throw new Error(`cannot reach the local API at ${base}: ${(err as Error).message}`);
  }
}

/**
 * `ifp redrive (MESSAGE_ID | --all [--limit N])`: send dead letters again through the local API.
 * stdout: `202 {…}` (one) or `200 {"redriven": […], "skipped": […]}` (all), else the status and
 * error body the runtime answered. Exit 0 when it was redriven (with --all: whatever was
 * skipped), 1 otherwise.
 */
export async function redriveCommand(args: string[]): Promise<number> {
  const { values, positionals, base } = localOptions(args, { all: { type: "boolean" }, limit: { type: "string" } });
  const all = !!values.all;
  if (all === (positionals.length === 1) || positionals.length > 1)
    throw new LocalUsageError("redrive takes one MESSAGE_ID, or --all");
  const limitText = values.limit as string | undefined;
  if (limitText !== undefined && (!all || !/^[1-9]\d{0,3}$/.test(limitText) || Number(limitText) > 1000))
    throw new LocalUsageError(`--limit goes with --all and takes 1 to 1000 (got ${JSON.stringify(limitText)})`);
  const client = new LocalApiClient(base);
  return all
    ? printAnswer(base, 200, () => client.redriveAll(limitText ? Number(limitText) : undefined))
    : printAnswer(base, 202, () => client.redrive(positionals[0]!));
}

/**
 * `ifp circuits`: the destinations whose circuit breaker is not closed, from the local API.
 * stdout: `200 {"circuits": […], "total": N}`, printable (the destinations are peers' text).
 */
export async function circuitsCommand(args: string[]): Promise<number> {
  const { positionals, base } = localOptions(args, {});
  if (positionals.length) throw new LocalUsageError("circuits takes no arguments but --local-api");
  const client = new LocalApiClient(base);
  return printAnswer(base, 200, () => client.circuits());
}
