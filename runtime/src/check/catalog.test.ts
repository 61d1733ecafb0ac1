// The catalog that grades every check of `ifp check`: each check in a group `--only` can pick, at a
// level of the four, its rule's source named — the specification's for MUST, SHOULD and MAY, a
// page of this project's docs for its own profile.
import { describe, expect, it } from "vitest";
import { CHECKS } from "./catalog.ts";
import { AGENT_GROUPS, LEVELS, RELAY_GROUPS } from "./types.ts";

const entries = Object.entries(CHECKS) as [string, { level: string; section: string }][];

describe("the check catalog", () => {
  it("names each check under a group --only picks, with a dotted id of lower-case words", () => {
    const groups = new Set<string>([...AGENT_GROUPS, ...RELAY_GROUPS]);
    for (const [id] of entries) {
      expect(id, id).toMatch(/^[a-z]+(\.[a-z0-9-]+)+$/);
      expect(groups.has(id.split(".")[0]!), id).toBe(true);
    }
    // Every group has checks of its own.
    for (const g of groups)
      expect(
        entries.some(([id]) => id.startsWith(`${g}.`)),
        g,
      ).toBe(true);
  });

  it("grades each check at one of the four levels, and uses each level", () => {
    for (const [id, rule] of entries) expect(LEVELS, id).toContain(rule.level);
    expect(new Set(entries.map(([, r]) => r.level))).toEqual(new Set(LEVELS));
  });

  it("cites this project's docs for a profile check, and the specification (its sections, an IFP draft, an RFC) for the others", () => {
    for (const [id, { level, section }] of entries) {
      if (level === "profile") expect(section, id).toMatch(/^docs\/[a-z-]+\.md /);
      else expect(section, id).toMatch(/^(spec \d|IFP-\d|RFC \d)/);
    }
  });
});
