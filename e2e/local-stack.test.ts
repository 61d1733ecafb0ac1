import { execFile } from "node:child_process";
import { createServer } from "node:net";
import { expect, it } from "vitest";
import { spawnProcess, tempDir } from "./support/process.ts";
import { httpsRequest } from "./support/https.ts";
import { basePort, startLocalStack, type LocalStack } from "./support/local-stack.ts";
import { waitFor } from "./support/wait.ts";

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * `npm start` as the README tells it, and the command it prints, as a person would paste it:
 * the example applications' lines show the message arriving at alice and alice's reply arriving
 * at bob, and the greeting alice's application sends at start answered by bob's.
 */
it("npm start brings up the local stack, its printed command sends a signed message, and the message and the reply are seen arriving", {
  timeout: 200_000,
}, async () => {
  let stack: LocalStack | undefined;
  try {
    stack = await startLocalStack(tempDir("ifp-stack-"));
    const { base, ca, command } = stack;
    const log = () => stack!.process.log();
    expect(log()).toContain(`alice     https://localhost:${base}/.well-known/agent/capabilities`);
    // The agents run as the operator runs them: hand-offs signed with a hand-off secret, an
    // encryption key published; neither start-up warning of a runtime without them.
    expect(log()).not.toMatch(/no --handoff-secret-file|hand-offs .* are not signed/);
    expect(log()).not.toMatch(/no --encryption-key|cannot receive encrypted messages/);
    // (A warning of a connection retried while the stack comes up is no fault; an error is.)
    expect(log()).not.toMatch(/"level":"(error|fatal)"/);
    for (const port of [base, base + 1]) {
      const identity = await httpsRequest(`https://localhost:${port}/.well-known/agent/identity`, { ca });
      expect(identity.status).toBe(200);
      expect(identity.text).toMatch(/"use":"encryption"/);
    }
    const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile("sh", ["-c", command], { encoding: "utf8", timeout: 45_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(result.stdout, result.stderr).toMatch(/^202 \{"status":"accepted"/);
    expect(result.code).toBe(0);
    const sent = JSON.parse(result.stdout.slice(4)).message_id as string;
    // alice's application logs the message as it arrives and replies in its thread …
    const arrived = await waitFor(
      "alice's application to log the message",
      () =>
        new RegExp(
          `^alice \\| received context ${escapeRe(sent)} from bob-agent thread (\\S+): "Hello from Bob's agent"$`,
          "m",
        ).exec(log())?.[1],
      30_000,
      250,
    );
    const reply = await waitFor(
      "alice's application to reply",
      () =>
        new RegExp(`^alice \\| replied (msg:\\S+) to bob-agent thread ${escapeRe(arrived)}: `, "m").exec(log())?.[1],
      30_000,
      250,
    );
    // … and bob's application logs the reply as it arrives, and does not answer it.
    await waitFor(
      "bob's application to log the reply",
      () =>
        new RegExp(
          `^bob   \\| received context ${escapeRe(reply)} from alice-agent thread ${escapeRe(arrived)} in reply to ${escapeRe(sent)}: "Got your context message: “Hello from Bob's agent”"$`,
          "m",
        ).test(log()),
      30_000,
      250,
    );
    await waitFor(
      "bob's application to leave the reply unanswered",
      () => log().includes(`bob   | no reply to ${reply}: it is an automatic reply`),
      30_000,
      250,
    );
    // The greeting of alice's application at start (IFP_APP_GREET in the example), answered by bob's.
    const greeting = await waitFor(
      "bob's application to log alice's greeting",
      () =>
        /^bob {3}\| received greeting (msg:\S+) from alice-agent thread \S+: "Hello Bob, this is Alice's agent"$/m.exec(
          log(),
        )?.[1],
      30_000,
      250,
    );
    await waitFor(
      "the answer to the greeting at alice",
      () =>
        new RegExp(
          `^alice \\| received greeting \\S+ from bob-agent thread \\S+ in reply to ${escapeRe(greeting)}: `,
          "m",
        ).test(log()),
      30_000,
      250,
    );
    // The A2A call it prints, pasted: the task comes back completed with alice's application's reply.
    const a2aCall = /talk to alice as an A2A client[^\n]*\n\s+(curl .*)\n/.exec(log())?.[1];
    expect(a2aCall, log()).toBeDefined();
    const a2a = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile("sh", ["-c", a2aCall!], { encoding: "utf8", timeout: 45_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(a2a.code, a2a.stderr).toBe(0);
    const task = JSON.parse(a2a.stdout).result.task;
    expect(task.status.state).toBe("TASK_STATE_COMPLETED");
    expect(task.status.message.parts[0].text).toBe("Got your request message: “Hello from an A2A client”");
  } finally {
    // Ctrl-C, as a person would; bounded, and it cannot replace the test's own error.
    await stack?.stop();
  }
});

it("npm start ends with exit code 1 when a part cannot start (its port taken), and says how to move the ports", {
  timeout: 120_000,
}, async () => {
  const base = basePort();
  // alice's port, taken by another listener on every address the runtime would bind.
  const taken = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => taken.once("error", reject).listen(base, "0.0.0.0", resolve));
  try {
    const stack = spawnProcess("npm start", "npm", ["start", "--silent"], {
      env: { ...process.env, IFP_STACK_DIR: tempDir("ifp-stack-taken-"), IFP_STACK_PORT: String(base) },
      group: true,
    });
    const exit = await stack.exited;
    expect(exit.code, stack.log()).toBe(1);
    expect(stack.log()).toMatch(/EADDRINUSE/);
    expect(stack.log()).toMatch(
      new RegExp(
        `npm start: alice exited with 1; its port may be taken .*IFP_STACK_PORT=N npm start moves .*\\(now ${base}\\)`,
      ),
    );
    expect(stack.log()).not.toContain("ifp local stack is up");
  } finally {
    await new Promise((resolve) => taken.close(resolve));
  }
});
