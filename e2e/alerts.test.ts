// The chart's alerts: the PrometheusRule it renders carries alerts/ifp.rules.yaml as it is,
// `promtool check rules` accepts the file (its expressions and annotation templates), and
// `promtool test rules` evaluates every alert's expression over input series shaped as the
// runtimes and the operator export them (e2e/support/alert-cases.ts; e2e/dashboard.test.ts holds
// their metric and label names to real scrapes): each fires when it should, with the labels it
// should, and stays quiet on the look-alike that should not.
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments, stringify } from "yaml";
import { toolPath } from "./tools/tools.ts";
import { tempDir } from "./support/process.ts";
import { startControlPlane, type ControlPlane } from "./support/controlplane.ts";
import { ALERT_CASES, promtoolTests } from "./support/alert-cases.ts";

const CHART = "charts/ifp-operator";
const RULES = resolve(CHART, "alerts/ifp.rules.yaml");
type Obj = Record<string, any>;

const run = (cmd: string, args: string[], cwd?: string) => {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 60_000, cwd });
  if (r.error) throw new Error(`${cmd} could not run: ${r.error.message}`);
  return { status: r.status, out: r.stdout + r.stderr };
};
const render = (...set: string[]): Obj[] => {
  const r = run(toolPath("helm"), ["template", "ifp", CHART, "-n", "ifp-system", ...set.flatMap((s) => ["--set", s])]);
  if (r.status !== 0) throw new Error(r.out);
  return parseAllDocuments(r.out.slice(0))
    .map((d) => d.toJSON())
    .filter(Boolean);
};
const rules = () => parse(readFileSync(RULES, "utf8")) as { groups: { name: string; rules: Obj[] }[] };
const alertNames = () => [...new Set(rules().groups.flatMap((g) => g.rules.map((r) => r.alert as string)))];
/** promtool test rules of a test file (naming its rule file), in a directory of its own: its exit status and output. */
const promtoolTest = (tests: object) => {
  const dir = tempDir("ifp-alerts-");
  writeFileSync(join(dir, "tests.yaml"), stringify(tests));
  return run(toolPath("promtool"), ["test", "rules", join(dir, "tests.yaml")], dir);
};

describe("the chart's alerts", () => {
  it("renders no PrometheusRule by default, and one with the rule file's groups when enabled", () => {
    expect(render().filter((o) => o.kind === "PrometheusRule")).toEqual([]);
    const [rule, ...more] = render(
      "prometheusRule.enabled=true",
      "prometheusRule.labels.release=prom",
      "prometheusRule.additionalLabels.team=messaging",
      "prometheusRule.runbookUrl=https://wiki.example/ifp/alerts",
    ).filter((o) => o.kind === "PrometheusRule");
    expect(more).toEqual([]);
    expect(rule!.metadata.labels.release).toBe("prom");
    const expected = rules();
    for (const g of expected.groups)
      for (const r of g.rules) {
        r.labels = { ...r.labels, team: "messaging" };
        r.annotations.runbook_url = `https://wiki.example/ifp/alerts#${r.alert.toLowerCase()}`;
      }
    expect(rule!.spec).toEqual(expected);
    // An alert's own severity wins over an added label of the same name.
    const [bySeverity] = render("prometheusRule.enabled=true", "prometheusRule.additionalLabels.severity=page").filter(
      (o) => o.kind === "PrometheusRule",
    );
    const severities = bySeverity!.spec.groups.flatMap((g: Obj) => g.rules.map((r: Obj) => r.labels.severity));
    expect(new Set(severities)).toEqual(new Set(["warning", "critical"]));
  });

  it("refuses malformed prometheusRule values", () => {
    for (const [set, named] of [
      ["prometheusRule.enabled=yes", /prometheusRule/],
      ["prometheusRule.runbookUrl=wiki.example/alerts", /prometheusRule/],
      ["prometheusRule.runbookUrl=https://wiki.example/alerts#top", /prometheusRule/],
      // A label name is checked as a property name: the error names the label.
      ["prometheusRule.additionalLabels.bad-name=x", /'bad-name' does not match/],
      ["prometheusRule.enable=true", /enable/],
    ] as const) {
      const r = run(toolPath("helm"), ["template", "ifp", CHART, "--set", set]);
      expect(r.status, set).not.toBe(0);
      expect(r.out, set).toMatch(named);
    }
  });

  it("has alerts promtool accepts, each with a summary, a description and a severity", () => {
    const r = run(toolPath("promtool"), ["check", "rules", RULES]);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/SUCCESS: 11 rules found/);
    for (const g of rules().groups)
      for (const rule of g.rules) {
        expect(["warning", "critical"], rule.alert).toContain(rule.labels.severity);
        expect(rule.annotations.summary, rule.alert).toBeTruthy();
        expect(rule.annotations.description, rule.alert).toBeTruthy();
      }
    for (const name of [
      "IfpMessagesUndeliverable",
      "IfpBacklogGrowing",
      "IfpReconcileErrors",
      "IfpCertificateExpiresSoon",
      "IfpNatsUnavailable",
      "IfpStreamMissing",
      "IfpStreamReplicasUnmet",
    ])
      expect(alertNames()).toContain(name);
  });

  it("fires each alert when it should and only then: promtool test rules", () => {
    // Every alert is tested, firing at least once and quiet at least once.
    for (const name of alertNames()) {
      const cases = ALERT_CASES.filter((c) => c.alertname === name);
      expect(
        cases.some((c) => c.firing.length > 0),
        `${name} fires in a case`,
      ).toBe(true);
      expect(
        cases.some((c) => c.firing.length === 0 || c.at < 10),
        `${name} is quiet in a case`,
      ).toBe(true);
    }
    // The annotations are checked by promtool check rules above; here the expressions, `for`
    // and labels of each rule are evaluated (promtool would otherwise want each annotation
    // rendered with its value in the expected alerts).
    const dir = tempDir("ifp-alerts-rules-");
    const bare = rules();
    for (const g of bare.groups) for (const r of g.rules) delete r.annotations;
    writeFileSync(join(dir, "ifp.rules.yaml"), stringify(bare));
    const r = promtoolTest(promtoolTests(join(dir, "ifp.rules.yaml")));
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/SUCCESS/);
  });

  it("fails the test run when an expectation is wrong (the test above can fail)", () => {
    const dir = tempDir("ifp-alerts-rules-");
    const bare = rules();
    for (const g of bare.groups) for (const r of g.rules) delete r.annotations;
    writeFileSync(join(dir, "ifp.rules.yaml"), stringify(bare));
    const tests = promtoolTests(join(dir, "ifp.rules.yaml")) as Obj;
    // carol's NATS alert expected to stay quiet.
    const natsCase = tests.tests[0].alert_rule_test.find(
      (t: Obj) => t.alertname === "IfpNatsUnavailable" && t.exp_alerts.length,
    );
    natsCase.exp_alerts = [];
    const r = promtoolTest(tests);
    expect(r.status).not.toBe(0);
    expect(r.out).toMatch(/IfpNatsUnavailable/);
    // A rule whose threshold moved: the undeliverable alert never fires.
    const broken = rules();
    for (const g of broken.groups)
      for (const rule of g.rules) {
        delete rule.annotations;
        if (rule.alert === "IfpMessagesUndeliverable") rule.expr = rule.expr.replace("> 0", "> 100");
      }
    writeFileSync(join(dir, "ifp.rules.yaml"), stringify(broken));
    const r2 = promtoolTest(promtoolTests(join(dir, "ifp.rules.yaml")));
    expect(r2.status).not.toBe(0);
    expect(r2.out).toMatch(/IfpMessagesUndeliverable/);
  });
});

describe("the chart's monitoring objects on an API server with the Prometheus Operator's CRDs", () => {
  let cp: ControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane({
      crds: [toolPath("prometheus-operator-crds", "monitoring-crds.yaml")],
      controllerManager: false,
    });
    cp.kubectl(["create", "namespace", "ifp-system"]);
  }, 300_000);
  afterAll(async () => {
    await cp?.stop();
  });

  it("accepts the PrometheusRule, the ServiceMonitor and the PodMonitor as the chart renders them", () => {
    const monitoring = render(
      "prometheusRule.enabled=true",
      "prometheusRule.additionalLabels.team=messaging",
      "prometheusRule.runbookUrl=https://wiki.example/ifp/alerts",
      "metrics.serviceMonitor.enabled=true",
      "metrics.podMonitor.enabled=true",
    ).filter((o) => o.apiVersion === "monitoring.coreos.com/v1");
    expect(monitoring.map((o) => o.kind).sort()).toEqual(["PodMonitor", "PrometheusRule", "ServiceMonitor"]);
    const out = cp.kubectl(
      ["apply", "--dry-run=server", "--validate=strict", "-n", "ifp-system", "-f", "-"],
      monitoring.map((o) => stringify(o)).join("---\n"),
    );
    expect(out.split("\n").filter((l) => /created \(server dry run\)$/.test(l))).toHaveLength(3);
    // The CRD's schema is checked: a rule without an expression is refused.
    const [rule] = monitoring.filter((o) => o.kind === "PrometheusRule");
    const broken = structuredClone(rule!);
    delete broken.spec.groups[0].rules[0].expr;
    expect(() => cp.kubectl(["apply", "--dry-run=server", "-n", "ifp-system", "-f", "-"], stringify(broken))).toThrow(
      /expr/,
    );
  });
});
