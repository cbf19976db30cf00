import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  DiscoverResult,
  JobTracker,
  RunWave,
  badgeText,
  clientLogLevel,
  conditionText,
  OpState,
  buildTree,
  caseKey,
  caseLine,
  caseMessage,
  failureDiff,
  failureTarget,
  formatFailure,
  isTerminal,
  isCommandResultMessage,
  itemKey,
  parseCaseKey,
  rangeContains,
  reproLines,
  reproduceSummary,
  serverSettings,
  stateToOutcome,
  statusAsState,
  statusSummary,
  valueText,
  workspaceLabel,
} from "../../src/model";

// Payloads recorded from gpuemu-ls on examples/buggy (paths rewritten).
const fixture = (name: string) => JSON.parse(readFileSync(join(__dirname, "..", "fixtures", name), "utf8"));
const discover: DiscoverResult = fixture("discover.json");
const states: Record<string, OpState> = fixture("opstate.json");
const ROOT = "/home/u/kernels/buggy";

describe("buildTree (gpuemu/discoverOps -> test items)", () => {
  const tree = buildTree(discover, [{ name: "kernels", path: "/home/u/kernels" }]);

  it("puts ops and kernels under their gpuemu.toml workspace", () => {
    assert.equal(tree.length, 1);
    const ws = tree[0];
    assert.equal(ws.key, `workspace:${ROOT}`);
    assert.equal(ws.label, "buggy");
    assert.equal(ws.uri, `file://${ROOT}/gpuemu.toml`);
    assert.equal(ws.error, undefined);
    assert.deepEqual(
      ws.children.map((c) => c.id),
      ["op:softmax_tail_mask", "op:softmax_tail_mask_ok", "op:matmul_acc_overwrite", "kernel:tiled_matmul"].sort((a, b) =>
        discover.workspaces[0].items.findIndex((i) => i.id === a) - discover.workspaces[0].items.findIndex((i) => i.id === b),
      ),
    );
  });

  it("locates each item at its op's function (run icons in that gutter) and keeps its gpuemu.toml entry", () => {
    const op = tree[0].children.find((c) => c.id === "op:softmax_tail_mask")!;
    assert.equal(op.key, itemKey(ROOT, "op:softmax_tail_mask"));
    assert.equal(op.uri, `file://${ROOT}/softmax_tail_mask.py`);
    assert.deepEqual(op.range.start, { line: 62, character: 4 });
    assert.equal(op.entryUri, `file://${ROOT}/gpuemu.toml`);
    assert.deepEqual(op.entryRange.start, { line: 26, character: 0 });
    assert.equal(op.sourceUri, `file://${ROOT}/softmax_tail_mask.py`);
    assert.deepEqual(op.sourceRange?.start, { line: 62, character: 4 });
    assert.equal(op.status, "failed");
    assert.match(op.diagnosis, /N % 32 != 0/);
    const kernel = tree[0].children.find((c) => c.kind === "kernel")!;
    assert.equal(kernel.description, "kernel");
    assert.ok(kernel.sortText > op.sortText, "kernels after ops");
  });

  it("reports configuration errors on the workspace item", () => {
    const bad = buildTree(
      { workspaces: [{ ...discover.workspaces[0], configError: ["gpuemu.toml:3:1: unknown key 'nme'"], items: [] }] },
      [],
    );
    assert.match(bad[0].error ?? "", /unknown key 'nme'/);
    assert.equal(bad[0].label, "buggy");
  });

  it("handles an empty or missing answer", () => {
    assert.deepEqual(buildTree(undefined, []), []);
    assert.deepEqual(buildTree({ workspaces: [] }, []), []);
  });
});

describe("workspaceLabel", () => {
  it("is relative to the VS Code folder holding the workspace", () => {
    assert.equal(workspaceLabel("/a/b", [{ name: "b", path: "/a/b" }]), "b");
    assert.equal(workspaceLabel("/a/b/c/d", [{ name: "b", path: "/a/b/" }]), "c/d");
    assert.equal(
      workspaceLabel("/a/b/c", [
        { name: "a", path: "/a" },
        { name: "b", path: "/a/b" },
      ]),
      "b/c",
    );
    assert.equal(workspaceLabel("/x/y", [{ name: "b", path: "/a/b" }]), "y");
    assert.equal(workspaceLabel("/a/bb", [{ name: "b", path: "/a/b" }]), "bb");
  });
});

describe("stateToOutcome (gpuemu/opState -> test results)", () => {
  it("maps queued and running to enqueued and started", () => {
    assert.equal(stateToOutcome(states.queued).type, "enqueued");
    const running = stateToOutcome(states.running);
    assert.equal(running.type, "started");
    assert.equal(running.terminal, false);
    assert.match(running.output ?? "", /seed=1238 dtype=float32 x=\[15, 127\]/);
  });

  it("maps failed to a failure with the failing cases as messages at the op's source", () => {
    const o = stateToOutcome(states.failed);
    assert.equal(o.type, "failed");
    assert.equal(o.terminal, true);
    // first the summary, without a diff: its first line is VS Code's red badge at the def (a message with a
    // diff shows there as "actual != expected", cut in the middle)
    const [summary, first] = o.messages;
    assert.equal(summary.diff, undefined);
    assert.equal(summary.text.split("\n")[0], "6/16 failed: distribution != large and N % 32 != 0");
    assert.match(summary.text, /^softmax_tail_mask: failed - 10\/16 passed, 6 failed$/m);
    assert.match(summary.text, /^diagnosis: fails iff/m);
    assert.equal(first.at, "source");
    assert.ok(first.diff === undefined || first.diff.expected !== first.diff.actual);
    assert.match(first.text, /^softmax_tail_mask \[mismatch\] seed=\d+ dtype=float32 x=\[\d+, \d+\] layout=\w+ dist=\w+/);
    assert.match(first.text, /replay: gpuemu reproduce --op softmax_tail_mask --seed \d+/);
    assert.match(o.output ?? "", /^FAILED softmax_tail_mask \(10\/16 cases passed\)/);
    // every failure is one message after the summary, capped; every failing case is a child
    const n = states.failed.failures!.length;
    assert.equal(o.messages.length, 1 + Math.min(n, 5));
    assert.equal(o.cases?.length, n);
    assert.ok(o.messages.every((m) => m.at === "source"), "all at the op's def, none sending the reader to gpuemu.toml");
  });

  it("maps passed to passed", () => {
    const o = stateToOutcome(states.passed);
    assert.deepEqual([o.type, o.terminal, o.messages.length], ["passed", true, 0]);
    assert.match(o.output ?? "", /PASS softmax_tail_mask_ok \(16 cases\)/);
  });

  it("passes an op with edge findings only, and says EDGE", () => {
    const o = stateToOutcome({ ...states.passed, state: "edge", message: "48/50 passed, 2 edge findings" });
    assert.deepEqual([o.type, o.terminal], ["passed", true]);
    assert.match(o.output ?? "", /^EDGE softmax_tail_mask_ok .*2 edge findings/);
  });

  it("never reports not_run, not_judged, error or errored as passed", () => {
    for (const state of ["not_run", "not_judged", "error", "errored"]) {
      const o = stateToOutcome({ ...states.passed, state, message: "", failures: [] });
      assert.equal(o.type, "errored", state);
      assert.ok(o.messages.length === 1);
    }
    const nr = stateToOutcome({ workspace: ROOT, id: "op:x", name: "x", kind: "op", state: "not_run" });
    assert.match(nr.messages[0].text, /not run/);
  });

  it("maps cancelled to skipped and unknown states to errors", () => {
    assert.equal(stateToOutcome({ ...states.queued, state: "cancelled" }).type, "skipped");
    assert.equal(stateToOutcome({ ...states.queued, state: "weird" }).type, "errored");
  });

  it("puts kernel lint findings on their .cu line", () => {
    const o = stateToOutcome({
      workspace: ROOT,
      id: "kernel:k",
      name: "k",
      kind: "kernel",
      state: "failed",
      message: "1 lint error",
      failures: [{ message: "uses 80 registers > 64", file: "/w/k.cu", line: 12, code: "max-registers" }],
    });
    assert.equal(o.type, "failed");
    assert.deepEqual(o.messages[1].at, { file: "/w/k.cu", line: 12 });
    assert.match(o.messages[1].text, /\/w\/k.cu:12: \[max-registers\] uses 80 registers/);
  });

  it("turns stored statuses (discover, runOps) into the same results", () => {
    const s = statusAsState(ROOT, { id: "op:a", name: "a", status: "failed", message: "3/16 failed", diagnosis: "d" });
    assert.equal(s.kind, "op");
    const o = stateToOutcome(s);
    assert.equal(o.type, "failed");
    assert.match(o.messages[0].text, /a: failed - 3\/16 failed\ndiagnosis: d/);
    assert.equal(statusAsState(ROOT, { id: "kernel:k", name: "k", status: "passed" }).kind, "kernel");
  });

  it("knows the terminal states", () => {
    assert.deepEqual(
      ["queued", "running", "passed", "failed", "error", "not_run", "cancelled", "errored"].map(isTerminal),
      [false, false, true, true, true, true, true, true],
    );
  });
});

describe("formatFailure", () => {
  it("says op, kind, seed, dtype, shapes, layout, distribution and replay", () => {
    const t = formatFailure(
      {
        seed: 2,
        kind: "mismatch",
        dtype: "float32",
        shapes: { x: [8, 511], w: [511] },
        layout: "strided",
        distribution: "special",
        maxAbs: 0.47,
        tolerance: [1e-5, 1e-5],
        replay: "gpuemu reproduce --op s --seed 2",
      },
      "s",
    );
    assert.equal(
      t,
      "s [mismatch] seed=2 dtype=float32 x=[8, 511] w=[511] layout=strided dist=special: max abs err 0.47 vs atol=1.00e-5 rtol=1.00e-5\nreplay: gpuemu reproduce --op s --seed 2",
    );
  });
});

describe("statusSummary (status bar)", () => {
  it("says what it counts: running N of M ops, N of M ops failed, M ops passed", () => {
    assert.equal(statusSummary(["passed", "passed"]).text, "$(pass) gpuemu: 2 ops passed");
    assert.equal(statusSummary(["passed", "edge"]).text, "$(pass) gpuemu: 2 ops passed");
    assert.equal(statusSummary(["passed", "not_judged"]).text, "$(error) gpuemu: 1 of 2 ops failed");
    assert.equal(statusSummary(["passed", "unknown"]).text, "$(beaker) gpuemu: idle");
    assert.equal(statusSummary([]).text, "$(beaker) gpuemu: idle");
    // while a run is on: what it has done, counting up
    assert.equal(statusSummary(["passed", "running", "queued", "failed"]).text, "$(sync~spin) gpuemu: 2 of 4 ops done, 1 failed");
    assert.equal(statusSummary(["running", "passed"], { noun: "ops and kernels" }).text, "$(sync~spin) gpuemu: 1 of 2 ops and kernels done");
    const wave = { done: 1, total: 2, failed: 0 };
    assert.equal(statusSummary(["passed", "running", "failed", "passed"], { wave }).text, "$(sync~spin) gpuemu: 1 of 2 ops done");
    const f = statusSummary(["passed", "failed", "error", "not_run", "unknown"]);
    assert.equal(f.text, "$(error) gpuemu: 3 of 5 ops failed");
    assert.match(f.tooltip, /5 ops: 0 running, 3 failed, 1 passed, 1 not run yet/);
    assert.equal(f.failed, 3);
  });
  it("counts a run up, from its first op queued to its last done (RunWave)", () => {
    const wave = new RunWave();
    const states = new Map([["a", "passed"], ["b", "passed"], ["c", "passed"]]);
    assert.equal(wave.update(states), undefined);
    const seen: string[] = [];
    const step = (key: string, state: string) => {
      states.set(key, state);
      const w = wave.update(states);
      seen.push(statusSummary(states.values(), { wave: w }).text);
    };
    step("a", "queued");
    step("b", "queued"); // queued while the run is on: it joins it
    step("a", "running");
    step("a", "failed");
    step("b", "running");
    step("b", "passed");
    assert.deepEqual(seen, [
      "$(sync~spin) gpuemu: 0 of 1 ops done",
      "$(sync~spin) gpuemu: 0 of 2 ops done",
      "$(sync~spin) gpuemu: 0 of 2 ops done",
      "$(sync~spin) gpuemu: 1 of 2 ops done, 1 failed",
      "$(sync~spin) gpuemu: 1 of 2 ops done, 1 failed",
      "$(error) gpuemu: 1 of 3 ops failed",
    ]);
    step("c", "queued"); // the next run starts from nothing
    assert.equal(seen[seen.length - 1], "$(sync~spin) gpuemu: 0 of 1 ops done");
  });
  it("shows a stopped server and restricted mode", () => {
    assert.match(statusSummary(["failed"], { serverState: "stopped" }).text, /gpuemu: stopped/);
    const r = statusSummary([], { trusted: false, serverState: "running" });
    assert.match(r.text, /idle \$\(shield\)/);
    assert.match(r.tooltip, /Untrusted workspace/);
  });
});

describe("serverSettings (initializationOptions and workspace/configuration)", () => {
  it("passes the gpuemu settings the server knows, and trust", () => {
    const cfg: Record<string, unknown> = {
      mode: "thorough",
      onSave: false,
      onOpen: true,
      iterations: 7,
      jobs: 2,
      storePath: "/tmp/s.db",
      lint: true,
      "server.command": "/x/gpuemu-ls",
      server: { command: "/x/gpuemu-ls", args: [] },
      trace: { server: "off" },
    };
    assert.deepEqual(serverSettings((k) => cfg[k], true), {
      trusted: true,
      mode: "thorough",
      onSave: false,
      onOpen: true,
      lint: true,
      iterations: 7,
      jobs: 2,
      storePath: "/tmp/s.db",
    });
  });
  it("sends defaults as null (the server's own default), never server.* keys", () => {
    const s = serverSettings((k) => ({ mode: "quick", iterations: null, jobs: 1, storePath: "" })[k], false);
    assert.deepEqual(s, { trusted: false, mode: "quick", iterations: null, jobs: 1, storePath: null });
  });
});

describe("failureTarget (reproduce/minimize arguments from a diagnostic)", () => {
  const diags = fixture("diagnostics.json");
  it("reads workspace, op and seed from the diagnostic's data", () => {
    const t = failureTarget(diags[0]);
    assert.deepEqual(t, { workspace: ROOT, op: "softmax_tail_mask", seed: diags[0].data.seed });
  });
  it("falls back to the message when data is gone", () => {
    const t = failureTarget({ source: "gpuemu", message: diags[0].message });
    assert.deepEqual(t, { op: "softmax_tail_mask", seed: diags[0].data.seed });
  });
  it("ignores other sources, config errors and kernels", () => {
    assert.equal(failureTarget({ source: "Pylance", message: "x seed=1" }), undefined);
    assert.equal(failureTarget({ source: "gpuemu", message: "unknown key 'nme' in ops[0]" }), undefined);
    assert.equal(failureTarget({ source: "gpuemu", message: "k", data: { op: "k", seed: 1, kind: "kernel" } }), undefined);
  });
});

describe("rangeContains", () => {
  const r = { start: { line: 62, character: 4 }, end: { line: 62, character: 21 } };
  it("includes both ends", () => {
    assert.ok(rangeContains(r, { line: 62, character: 4 }));
    assert.ok(rangeContains(r, { line: 62, character: 21 }));
    assert.ok(!rangeContains(r, { line: 62, character: 22 }));
    assert.ok(!rangeContains(r, { line: 61, character: 10 }));
  });
});

describe("JobTracker (opState of superseded jobs)", () => {
  const st = (state: string): OpState => ({ workspace: ROOT, id: "op:a", name: "a", kind: "op", state });
  it("ends an op's run when its only job ends", () => {
    const t = new JobTracker();
    assert.deepEqual(t.update(st("queued")), { key: itemKey(ROOT, "op:a"), superseded: false, done: false, state: "queued" });
    assert.equal(t.update(st("running")).state, "running");
    assert.ok(t.busy(itemKey(ROOT, "op:a")));
    assert.deepEqual(t.update(st("failed")), { key: itemKey(ROOT, "op:a"), superseded: false, done: true, state: "failed" });
    assert.ok(!t.busy(itemKey(ROOT, "op:a")));
  });
  it("ignores the cancellation of a job a new save superseded", () => {
    const t = new JobTracker();
    t.update(st("queued"));
    t.update(st("running"));
    t.update(st("queued")); // the save: a second job
    const c = t.update(st("cancelled")); // the first one, cancelled
    assert.deepEqual([c.superseded, c.done], [true, false]);
    assert.equal(t.update(st("running")).state, "running");
    const end = t.update(st("passed"));
    assert.deepEqual([end.superseded, end.done, end.state], [false, true, "passed"]);
  });
  it("shows a result that ends while another job is queued as still running", () => {
    const t = new JobTracker();
    t.update(st("queued"));
    t.update(st("queued"));
    const r = t.update(st("failed"));
    assert.deepEqual([r.done, r.state], [false, "running"]);
    assert.equal(t.update(st("passed")).done, true);
  });
  it("copes with a terminal state it never saw queued (server started earlier)", () => {
    const t = new JobTracker();
    const r = t.update(st("passed"));
    assert.deepEqual([r.superseded, r.done, r.state], [false, true, "passed"]);
    assert.deepEqual([t.update(st("cancelled")).superseded], [false]);
  });
});

describe("failing cases: messages, diff, children", () => {
  const base = states.failed.failures![0];
  // the worst element as gpuemu-ls sends it (server.py _worst_brief); NaN comes as "nan"
  const f = {
    ...base,
    worst: {
      output: "result",
      index: [3, 126],
      op: 0.0077360719,
      ref: 0.0078740157,
      allowed: 1.0087e-5,
      firstIndex: [0, 0],
      mismatches: 1778,
      total: 1905,
      examples: { unexpected_nan: { index: [2, 0], op: "nan", ref: 0.5 } },
    },
  };

  it("has the case line, the comparison, the worst element, the diagnosis and the replay", () => {
    const text = caseMessage(f, "softmax_tail_mask", "fails iff N % 128 != 0");
    const lines = text.split("\n");
    assert.match(lines[0], /^softmax_tail_mask \[mismatch\] seed=1238 dtype=float32 x=\[15, 127\] layout=contiguous dist=constant_rows$/);
    assert.match(text, /elements off; max abs err/);
    assert.match(text, /worst element result\[3, 126\]: op 0\.0077360719, reference 0\.0078740157, allowed ±0\.000010087/);
    assert.match(text, /^diagnosis: fails iff N % 128 != 0$/m);
    assert.match(text, /^replay: gpuemu reproduce --op softmax_tail_mask --seed 1238$/m);
    assert.equal(caseLine(f), "seed=1238 dtype=float32 x=[15, 127] layout=contiguous dist=constant_rows");
  });

  it("diffs reference (expected) against op (actual) at the worst element and the first NaN", () => {
    const d = failureDiff(f)!;
    const exp = d.expected.split("\n");
    const act = d.actual.split("\n");
    assert.equal(exp.length, act.length, "line for line");
    assert.ok(exp.includes("result[3, 126] = 0.0078740157"), d.expected);
    assert.ok(act.includes("result[3, 126] = 0.0077360719"), d.actual);
    assert.ok(act.includes("result[2, 0]  (first unexpected_nan) = NaN"), d.actual);
    assert.ok(exp.includes("result[2, 0]  (first unexpected_nan) = 0.5"), d.expected);
    // the header both sides share: the case and the tolerance there
    assert.equal(exp[0], act[0]);
    assert.match(exp[0], /seed=1238/);
    assert.equal(failureDiff(base), undefined, "no worst element (an older server): no diff");
    assert.equal(valueText("inf"), "inf");
    assert.equal(valueText(2), "2.0");
  });

  it("shows the elements around the worst one, the failing ones marked, and where the failing elements lie", () => {
    const win = {
      ...f,
      worst: {
        ...f.worst!,
        index: [3, 126],
        layout: "every row; the last 3 of 127 columns: a tail",
        window: {
          lead: [],
          rows: [1, 6] as [number, number],
          cols: [124, 127] as [number, number],
          op: [[0.5, 0.25, 0.125], [0.5, 0.25, 0.1], [0.5, 0.25, 0.2], [0.5, 0.25, "nan"], [0.5, 0.25, 0.3]],
          ref: [[0.5, 0.25, 0.5], [0.5, 0.25, 0.5], [0.5, 0.25, 0.5], [0.5, 0.25, 0.5], [0.5, 0.25, 0.5]],
          bad: [[0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1]],
        },
      },
    };
    const d = failureDiff(win)!;
    const exp = d.expected.split("\n");
    const act = d.actual.split("\n");
    assert.equal(exp.length, act.length, "line for line");
    assert.ok(exp.includes("# failing elements of result: every row; the last 3 of 127 columns: a tail"), d.expected);
    assert.ok(exp.includes("# around the worst element: result[1:6, 124:127] (* off tolerance, [ ] the worst)"), d.expected);
    // a row per line, named by its index; the same columns on both sides; the tail marked in every row
    const rows = act.filter((l) => l.startsWith("result[") && l.includes(", 124:127]"));
    assert.equal(rows.length, 5, d.actual);
    assert.match(rows[0], /^result\[1, 124:127\]\s+0\.5\s+0\.25\s+0\.125\*$/);
    assert.match(rows[2], /\s\[0\.2\*\]$/, "the worst element [3, 126], bracketed");
    assert.match(rows[3], /\sNaN\*$/, "a NaN as NaN");
    assert.match(exp[exp.indexOf(rows[2].replace("0.2*", "0.5*"))] ?? "", /\[0\.5\*\]$/, "the reference's side");
    assert.ok(rows.every((l) => l.endsWith("*") || l.endsWith("*]")), "the last column off tolerance in each row");
    assert.deepEqual(
      exp.filter((l) => l.startsWith("result[") && l.includes(", 124:127]")).map((l) => l.length),
      rows.map((l) => l.length),
      "columns line up",
    );
  });

  it("badge: failed cases and the diagnosis' condition, short; the first failure's kind without one", () => {
    assert.equal(conditionText("fails iff N % 128 != 0 (9/9 failing, 0/7 passing); padding read"), "N % 128 != 0");
    assert.equal(conditionText("fails only if N is not a power of two"), "N is not a power of two");
    assert.equal(conditionText("fails once N exceeds 2048: state carried across blocks of N is lost"), "fails once N exceeds 2048");
    assert.equal(conditionText(""), undefined);
    const s = { ...states.failed, failedCases: 9, cases: 16, diagnosis: "fails iff N % 128 != 0 (9/9 failing)" };
    assert.equal(badgeText(s), "9/16 failed: N % 128 != 0");
    assert.equal(badgeText({ ...s, diagnosis: "", failures: [{ ...base, kind: "unexpected_nan" }] }), "9/16 failed: NaN where the reference is finite");
  });

  it("puts each failing case in a child with its own message and diff; passing clears them", () => {
    const o = stateToOutcome({ ...states.failed, failures: [f, { ...base, seed: 77 }] });
    assert.deepEqual(
      o.cases?.map((c) => [c.seed, c.label, c.description]),
      [
        [1238, "seed 1238", "float32 x=[15, 127] contiguous constant_rows"],
        [77, "seed 77", "float32 x=[15, 127] contiguous constant_rows"],
      ],
    );
    assert.ok(o.cases![0].message.diff);
    assert.equal(o.messages[0].diff, undefined, "the op's summary: the badge's text");
    assert.ok(o.messages[1].diff, "the op's first case carries the diff too");
    assert.deepEqual(stateToOutcome(states.passed).cases, []);
    assert.equal(caseKey("/w::op:a", 12), "/w::op:a::seed:12");
    assert.deepEqual(parseCaseKey("/w::op:a::seed:12"), { opKey: "/w::op:a", seed: 12 });
    assert.equal(parseCaseKey("/w::op:a"), undefined);
  });
});

describe("reproductions", () => {
  it("finds the op call (breakpoint) and the verdict line in the template gpuemu writes", () => {
    // the template is the source text of gpuemu_ls/engine/tools/repro.py: the real file, not a copy
    const template = readFileSync(join(__dirname, "..", "..", "..", "..", "gpuemu_ls", "engine", "tools", "repro.py"), "utf8");
    const body = template.slice(template.indexOf("def main():"));
    const at = reproLines(body);
    const lines = body.split("\n");
    assert.match(lines[at.call!], /out = call\(OP_CALL, /);
    assert.match(lines[at.verdict!], /print\("FAILED: "/);
    assert.deepEqual(reproLines("x = 1\n"), { call: undefined, verdict: undefined });
    const script = reproLines(`OP_SCRIPT = 'ops/k.py'\n${body}`);
    assert.match(body.split("\n")[script.call! - 1], /out = run_script\(OP_SCRIPT, /);
  });

  it("summarizes a reproduction in one line and replaces only the server's result messages", () => {
    const s = reproduceSummary("softmax_tail_mask", 1238, {
      repro: "/w/.gpuemu/repro/softmax_tail_mask_1238.py",
      status: "failed",
      kind: "mismatch",
      message: "result: 1778/1905 elements off\nmore",
      case: { dtype: "float32", shapes: { x: [15, 9] }, layout: "contiguous", distribution: "boundary" },
    });
    assert.equal(s, "gpuemu: softmax_tail_mask seed 1238 still fails [mismatch]: float32 x=[15, 9] layout=contiguous dist=boundary - result: 1778/1905 elements off");
    assert.match(reproduceSummary("a", 1, { status: "passed" }, true), /^gpuemu: a seed 1 \(minimized\) passes now$/);
    assert.ok(isCommandResultMessage("gpuemu: softmax_tail_mask seed 1238 still fails (stored inputs); reproduction: /w/x.py"));
    assert.ok(isCommandResultMessage("gpuemu: op seed 3 minimized to x=[1, 1] in 40 trials"));
    assert.ok(!isCommandResultMessage("gpuemu: validate softmax failed: boom"));
  });

  it("takes the minimized shapes from a diagnostic's data", () => {
    const t = failureTarget({ source: "gpuemu", message: "", data: { op: "a", seed: 3, workspace: "/w", minimized: { x: [1, 1] } } });
    assert.deepEqual(t, { workspace: "/w", op: "a", seed: 3, minimizedShapes: { x: [1, 1] } });
    const none = failureTarget({ source: "gpuemu", message: "", data: { op: "a", seed: 3, minimized: null } });
    assert.deepEqual(none, { workspace: undefined, op: "a", seed: 3 });
  });
});

describe("clientLogLevel (the log's levels)", () => {
  it("keeps Python's level of a server log line, and a routine restart out of the errors", () => {
    assert.equal(clientLogLevel("WARNING:gpuemu-ls:showDocument failed: x", false), "warn");
    assert.equal(clientLogLevel("INFO:pygls.server:Shutting down the server", false), "info");
    assert.equal(clientLogLevel("ERROR:gpuemu-ls:job x failed", false), "error");
    assert.equal(clientLogLevel("Traceback (most recent call last):", true), "error", "a traceback stays an error");
    const closed = "Connection to server got closed. Server will not be restarted.";
    assert.equal(clientLogLevel(closed, true), "info", "during a stop the extension asked for");
    assert.equal(clientLogLevel(closed, false), "error", "a server that died");
  });
});
