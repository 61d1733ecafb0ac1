// What restart tests count: messages answered 202 by an Agent's inbox, and their hand-offs to
// spec.handler (startHandler), each accepted message handed on exactly once after dropping repeats
// by the Idempotency-Key the runtime sends (the hand-off is at least once, docs/agent.md).
import { expect } from "vitest";
import { waitFor } from "../../../e2e/support/wait.ts";
import { signed, type TestIdentity } from "./fixtures.ts";
import type { startHandler } from "./agent-harness.ts";

type Handler = Awaited<ReturnType<typeof startHandler>>;
/** A POST of a message to the Agent's inbox. */
export type Post = (message: unknown) => Promise<{ status: number; text: string }>;

/** Post `n` signed messages from `from` to `to`; each must be answered 202. Returns their ids. */
export async function accepted(post: Post, from: TestIdentity, to: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const m = signed(from, to);
    const res = await post(m);
    expect(res.status, res.text).toBe(202);
    ids.push(m.headers.message_id);
  }
  return ids;
}

/**
 * Milliseconds until the agent answers 202 again, at most `withinMs`: one message sent again until
 * it is taken, as a sender does (IFP-6). A 503 means "not known to be stored: send it again"
 * (docs/reliability.md): a message answered 503 may have been stored, and its retry is then a
 * duplicate of it, handed on once.
 */
export async function acceptsAgainWithin(
  post: Post,
  from: TestIdentity,
  to: string,
  withinMs: number,
): Promise<{ ms: number; id: string }> {
  const t0 = Date.now();
  const m = signed(from, to);
  await waitFor(
    "the agent to accept again",
    async () => {
      const res = await post(m);
      // What it answered last is said when the wait times out.
      if (res.status !== 202) throw new Error(`answered ${res.status}: ${res.text.slice(0, 300)}`);
      return true;
    },
    withinMs,
    200,
  );
  return { ms: Date.now() - t0, id: m.headers.message_id };
}

export function handedOn(handler: Handler): string[] {
  return handler.received.map((r) => r.body.headers.message_id as string);
}

/**
 * Every accepted message handed on, none lost. The hand-off is at least once (docs/agent.md): an
 * acknowledgement NATS had not yet written to its store when it was killed brings that message
 * again, with the same Idempotency-Key, by which the application takes each message once. So:
 * after dropping repeats by that key, the application has exactly the messages accepted.
 * `settled`: whether the hand-off consumer has nothing pending and nothing unacknowledged
 * (consumerSettled), after which no hand-off can come any more.
 */
export async function everyHandedOnOnce(
  handler: Handler,
  ids: string[],
  from: TestIdentity,
  settled: () => Promise<boolean>,
  withinMs = 60_000,
): Promise<{ redelivered: number }> {
  // A hand-off that was being retried when NATS was killed may have lost its delay (a nak not yet
  // written): it comes again once its acknowledgement wait is over (handler timeout + 30 s).
  await waitFor(
    `all ${ids.length} accepted messages handed on`,
    () => ids.every((id) => handedOn(handler).includes(id)),
    withinMs,
    100,
  );
  // A repeat still on its way would show below. Up to 1.5 s for one, or until the hand-off
  // consumer has nothing left to deliver and nothing delivered and unacknowledged.
  await waitFor("the hand-off consumer to have nothing pending", settled, 1_500, 100).catch(() => undefined);
  const keys = handler.received.map((r) => String(r.headers["idempotency-key"]));
  for (const [i, r] of handler.received.entries()) expect(keys[i]).toBe(`${from.agentId} ${r.body.headers.message_id}`);
  const once = [...new Set(keys)].map((k) => k.split(" ")[1]!);
  expect(
    once.filter((id) => !ids.includes(id)),
    "handed on but never accepted",
  ).toEqual([]);
  expect(
    ids.filter((id) => !once.includes(id)),
    "accepted and lost",
  ).toEqual([]);
  return { redelivered: keys.length - once.length };
}

/**
 * Until what was sent is handed on: a runtime stopped with hand-offs it had pulled and not yet
 * finished leaves them to the next after the acknowledgement wait, not what these tests are about.
 */
export async function handedOnSoFar(handler: Handler, ids: string[], withinMs = 30_000): Promise<void> {
  await waitFor("the messages so far handed on", () => ids.every((id) => handedOn(handler).includes(id)), withinMs, 50);
}

/**
 * Stop the application once what it was sent is handed on: a hand-off cut off in the middle is
 * handed on again (at least once, docs/agent.md), which is not what these tests count.
 */
export async function applicationDown(handler: Handler, ids: string[], withinMs?: number): Promise<void> {
  await handedOnSoFar(handler, ids, withinMs);
  await handler.down();
}
