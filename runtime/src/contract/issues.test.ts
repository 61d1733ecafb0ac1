import { describe, expect, it } from "vitest";
import { z } from "zod";
import { describeIssues } from "./issues.ts";

describe("describeIssues", () => {
  const schema = z.object({
    a: z.object({ b: z.number() }),
    c: z.string(),
    d: z.boolean(),
    e: z.string(),
    f: z.string(),
    g: z.string(),
  });

  it("names each problem by its path, (root) for the document itself", () => {
    const r = schema.safeParse({ a: { b: "x" }, c: "ok", d: true, e: "", f: "", g: "" });
    expect(describeIssues(r.error!)).toMatch(/^a\.b: .*number/);
    expect(describeIssues(z.object({}).safeParse(1).error!)).toMatch(/^\(root\): /);
  });

  it("lists at most `limit` problems and counts the rest", () => {
    const r = schema.safeParse({});
    expect(r.error!.issues).toHaveLength(6);
    const text = describeIssues(r.error!);
    expect(text.split("; ")).toHaveLength(6);
    expect(text).toMatch(/^a: .*; … and 1 more$/);
    expect(describeIssues(r.error!, 10)).not.toMatch(/more/);
  });
});
