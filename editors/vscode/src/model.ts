/**
 * Pure parts of the extension (no `vscode` import, so they are unit-tested under plain Node):
 * the gpuemu-ls Test Explorer payloads (`gpuemu/discoverOps`, `gpuemu/opState`, `gpuemu/runOps`,
 * see docs/lsp.md) mapped to a test tree and to test results, the status-bar summary, the server
 * options sent as `initializationOptions` / `workspace/configuration`, and the arguments of the
 * reproduce/minimize commands taken from a diagnostic.
 */

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

/** One op or kernel of `gpuemu/discoverOps`. */
export interface DiscoverItem {
  id: string; // "op:NAME" | "kernel:NAME"
  name: string;
  kind: "op" | "kernel";
  uri: string; // gpuemu.toml
  range: Range; // the [[ops]] / [[kernels]] entry
  sourceUri?: string | null;
  sourceRange?: Range | null;
  status?: string; // passed | failed | edge | not_judged | error | not_run | unknown
  message?: string;
  diagnosis?: string;
  running?: boolean;
}

export interface DiscoverWorkspace {
  root: string;
  uri: string;
  config: string; // gpuemu.toml uri
  configError?: string[];
  trusted?: boolean;
  items: DiscoverItem[];
}

export interface DiscoverResult {
  workspaces: DiscoverWorkspace[];
}

/** A failing case in `gpuemu/opState` (ops), or a lint finding (kernels). */
export interface Failure {
  seed?: number;
  status?: string;
  kind?: string;
  dtype?: string;
  shapes?: Record<string, number[]>;
  layout?: string;
  distribution?: string;
  maxAbs?: number | null;
  tolerance?: number[] | null;
  message?: string | null;
  replay?: string;
  /** The worst element of the case (gpuemu-ls >= round 2): where op and reference differ most. */
  worst?: WorstElement | null;
  // lint findings
  file?: string | null;
  line?: number | null;
  code?: string | null;
}

/** Values JSON cannot hold come as strings: "nan", "inf", "-inf". */
export type JsonNumber = number | string | null;

export interface WorstElement {
  output: string;
  index: number[];
  op: JsonNumber;
  ref: JsonNumber;
  allowed?: JsonNumber;
  firstIndex?: number[] | null;
  mismatches?: number;
  total?: number;
  /** First element of each non-finite failure kind (unexpected_nan, ...): {index, op, ref}. */
  examples?: Record<string, { index: number[]; op: JsonNumber; ref: JsonNumber }>;
  /** The elements around the worst one (gpuemu-ls >= issue 29): rows x columns of the last two axes. */
  window?: ValueWindow | null;
  /** Where the failing elements lie, in words: "every row; the last 7 of 135 columns: a tail". */
  layout?: string | null;
}

/** Op and reference values of `rows` x `cols` (`[start, stop)`; rows null for a 1-D output) of an output, its
 * leading indices `lead` fixed; `bad[i][j]` 1 where the element is off tolerance. */
export interface ValueWindow {
  lead: number[];
  rows: [number, number] | null;
  cols: [number, number];
  op: JsonNumber[][];
  ref: JsonNumber[][];
  bad: number[][];
}

export type OpStateName =
  | "queued"
  | "running"
  | "passed"
  | "failed"
  | "edge"
  | "not_judged"
  | "error"
  | "not_run"
  | "cancelled"
  | "errored";

/** The `gpuemu/opState` notification. */
export interface OpState {
  workspace: string;
  id: string;
  name: string;
  kind: "op" | "kernel";
  state: OpStateName | string;
  done?: number;
  total?: number;
  failedCases?: number;
  message?: string;
  diagnosis?: string;
  cases?: number;
  failures?: Failure[];
  lastFailure?: Failure;
  /** The op's own seconds (finished runs): the test's duration, without its wait in the queue. */
  elapsed?: number;
}

export interface RunOpsResult {
  results: { id: string; name: string; workspace: string; status: string; message?: string; diagnosis?: string }[];
  error?: string;
}

// ------------------------------------------------------------------------------------------
// Test tree

/** Test item id of an op or kernel: unique across workspaces. */
export function itemKey(workspace: string, id: string): string {
  return `${workspace}::${id}`;
}

/** Test item id of a workspace (a folder holding gpuemu.toml). */
export function workspaceKey(root: string): string {
  return `workspace:${root}`;
}

export interface TreeLeaf {
  key: string;
  id: string; // op:NAME / kernel:NAME
  workspace: string;
  label: string;
  description?: string;
  kind: "op" | "kernel";
  /** Where the item lives (its run icon's gutter): the op's function or script, else its gpuemu.toml entry. */
  uri: string;
  range: Range;
  /** Its gpuemu.toml entry. */
  entryUri: string;
  entryRange: Range;
  sourceUri?: string;
  sourceRange?: Range;
  status: string;
  message: string;
  diagnosis: string;
  running: boolean;
  sortText: string;
}

export interface TreeWorkspace {
  key: string;
  root: string;
  label: string;
  description: string;
  uri: string; // gpuemu.toml
  error?: string;
  trusted: boolean;
  children: TreeLeaf[];
}

export interface Folder {
  name: string;
  path: string; // fsPath
}

function trimSlash(p: string): string {
  return p.length > 1 ? p.replace(/[\\/]+$/, "") : p;
}

/** A workspace's label: its path relative to the VS Code folder holding it, or its folder name. */
export function workspaceLabel(root: string, folders: Folder[]): string {
  const r = trimSlash(root);
  let best: Folder | undefined;
  for (const f of folders) {
    const fp = trimSlash(f.path);
    if ((r === fp || r.startsWith(fp + "/") || r.startsWith(fp + "\\")) && (!best || fp.length > best.path.length)) {
      best = { name: f.name, path: fp };
    }
  }
  if (best) {
    const rel = r.slice(best.path.length).replace(/^[\\/]+/, "");
    return rel ? (folders.length > 1 ? `${best.name}/${rel}` : rel) : best.name;
  }
  const parts = r.split(/[\\/]/).filter(Boolean);
  return parts[parts.length - 1] ?? r;
}

/** The test tree of a discoverOps answer: workspace -> ops (in gpuemu.toml order), then kernels. */
export function buildTree(result: DiscoverResult | null | undefined, folders: Folder[]): TreeWorkspace[] {
  const out: TreeWorkspace[] = [];
  for (const ws of result?.workspaces ?? []) {
    const children: TreeLeaf[] = ws.items.map((it, i) => ({
      key: itemKey(ws.root, it.id),
      id: it.id,
      workspace: ws.root,
      label: it.name,
      description: it.kind === "kernel" ? "kernel" : undefined,
      kind: it.kind,
      uri: it.sourceUri && it.sourceRange ? it.sourceUri : it.uri,
      range: it.sourceUri && it.sourceRange ? it.sourceRange : it.range,
      entryUri: it.uri,
      entryRange: it.range,
      sourceUri: it.sourceUri ?? undefined,
      sourceRange: it.sourceRange ?? undefined,
      status: it.status ?? "unknown",
      message: it.message ?? "",
      diagnosis: it.diagnosis ?? "",
      running: !!it.running,
      sortText: `${it.kind === "op" ? "0" : "1"}${String(i).padStart(5, "0")}`,
    }));
    const errors = ws.configError ?? [];
    out.push({
      key: workspaceKey(ws.root),
      root: ws.root,
      label: workspaceLabel(ws.root, folders),
      description: "gpuemu.toml",
      uri: ws.config,
      error: errors.length ? errors.join("\n") : undefined,
      trusted: ws.trusted !== false,
      children,
    });
  }
  out.sort((a, b) => a.label.localeCompare(b.label));
  return out;
}

// ------------------------------------------------------------------------------------------
// Results

export type OutcomeType = "enqueued" | "started" | "passed" | "failed" | "errored" | "skipped";

export interface MessageSpec {
  text: string;
  /** "source": at the op's function/script; "entry": at its gpuemu.toml entry; or an explicit file/line. */
  at: "source" | "entry" | { file: string; line: number };
  /** Expected (reference) and actual (op) text for TestMessage.diff. */
  diff?: { expected: string; actual: string };
}

/** A failing case of an op: a child item of the op in the Test Explorer. */
export interface CaseChild {
  seed: number;
  label: string;
  description: string;
  message: MessageSpec;
  failure: Failure;
}

export interface Outcome {
  type: OutcomeType;
  terminal: boolean;
  messages: MessageSpec[];
  /** A line for the run's output (Test Results terminal), without line ending. */
  output?: string;
  /** Failing cases (terminal outcomes of ops only; [] when it passed: children are cleared). */
  cases?: CaseChild[];
}

const TERMINAL = new Set(["passed", "failed", "edge", "not_judged", "error", "errored", "not_run", "cancelled"]);

export function isTerminal(state: string): boolean {
  return TERMINAL.has(state);
}

function shapesText(shapes: Record<string, number[]> | undefined): string {
  if (!shapes) return "";
  return Object.entries(shapes)
    .map(([k, v]) => `${k}=[${v.join(", ")}]`)
    .join(" ");
}

function num(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 1e-3 && Math.abs(x) < 1e4 ? String(Number(x.toPrecision(3))) : x.toExponential(2);
}

/** One failing case as text: kind, seed, dtype, shapes, layout, distribution, error, replay. */
export function formatFailure(f: Failure, op?: string): string {
  if (f.seed === undefined && (f.file || f.code)) {
    const where = f.file ? `${f.file}${f.line ? `:${f.line}` : ""}: ` : "";
    return `${where}${f.code ? `[${f.code}] ` : ""}${f.message ?? ""}`.trim();
  }
  const head = [`${op ? op + " " : ""}[${f.kind ?? f.status ?? "failed"}]`, caseLine(f)].filter(Boolean).join(" ");
  const parts = [head];
  if (f.message) parts.push(f.message);
  else if (f.maxAbs !== undefined && f.maxAbs !== null) {
    const tol = f.tolerance && f.tolerance.length >= 2 ? ` vs atol=${num(f.tolerance[0])} rtol=${num(f.tolerance[1])}` : "";
    parts.push(`max abs err ${num(f.maxAbs)}${tol}`);
  }
  let text = parts.join(": ");
  if (f.replay) text += `\nreplay: ${f.replay}`;
  return text;
}

/** The case a failure ran: `seed=1238 dtype=float32 x=[15, 9] layout=contiguous dist=boundary`. */
export function caseLine(f: Failure): string {
  return [
    f.seed !== undefined ? `seed=${f.seed}` : "",
    f.dtype ? `dtype=${f.dtype}` : "",
    shapesText(f.shapes),
    f.layout ? `layout=${f.layout}` : "",
    f.distribution ? `dist=${f.distribution}` : "",
  ]
    .filter(Boolean)
    .join(" ");
}

/** A value of the payload as text: numbers with full precision, "nan"/"inf" as NaN/inf. */
export function valueText(x: JsonNumber | undefined): string {
  if (x === null || x === undefined) return "?";
  if (typeof x === "string") return x === "nan" ? "NaN" : x === "-inf" ? "-inf" : x === "inf" ? "inf" : x;
  return Number.isInteger(x) ? x.toFixed(1) : String(x);
}

function indexText(index: number[] | null | undefined): string {
  return `[${(index ?? []).join(", ")}]`;
}

/**
 * Expected (reference) and actual (op) for TestMessage.diff, at the case's worst element and at the
 * first element of each non-finite failure kind: one line per element, so the diff editor lines
 * them up; a header line both sides share names the case and the tolerance there.
 */
export function failureDiff(f: Failure): { expected: string; actual: string } | undefined {
  const w = f.worst;
  if (!w || !w.index) return undefined;
  const header = [`# ${caseLine(f)}`];
  if (w.allowed !== undefined && w.allowed !== null) header.push(`# allowed |op - reference| at ${w.output}${indexText(w.index)}: ${valueText(w.allowed)}`);
  if (w.mismatches !== undefined && w.total !== undefined) header.push(`# ${w.mismatches} of ${w.total} elements of ${w.output} off tolerance`);
  const rows: { where: string; op: JsonNumber; ref: JsonNumber }[] = [
    { where: `${w.output}${indexText(w.index)}`, op: w.op, ref: w.ref },
  ];
  for (const [kind, ex] of Object.entries(w.examples ?? {})) {
    const where = `${w.output}${indexText(ex.index)}`;
    if (rows.some((r) => r.where === where)) continue;
    rows.push({ where: `${where}  (first ${kind})`, op: ex.op, ref: ex.ref });
  }
  if (w.layout) header.push(`# failing elements of ${w.output}: ${w.layout}`);
  const around = windowLines(w);
  const side = (pick: "op" | "ref") =>
    [...header, ...rows.map((r) => `${r.where} = ${valueText(r[pick])}`), ...around(pick)].join("\n") + "\n";
  return { expected: side("ref"), actual: side("op") };
}

/** A window value, short (5 significant digits: the worst element's line above has them all), so a row of
 * them fits the diff editor's half. */
function cellText(x: JsonNumber | undefined): string {
  if (typeof x === "number" && Number.isFinite(x)) {
    return x === 0 ? "0" : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e5 ? String(Number(x.toPrecision(5))) : x.toExponential(3);
  }
  return valueText(x ?? null);
}

/**
 * The elements around the worst one, a line per row of the window (`x[9, 0:7]  0.514  0.686* ...`): `*` marks an
 * element off tolerance, `[...]` the worst. Both sides have the same layout, so the diff editor pairs the rows and
 * highlights the values that differ; the marks show the failing elements' shape (a row, a tail, a column).
 */
export function windowLines(w: WorstElement): (pick: "op" | "ref") => string[] {
  const win = w.window;
  if (!win || !win.op?.length || !win.ref?.length) return () => [];
  const [c0, c1] = win.cols;
  const lead = win.lead.map(String);
  const worstRow = win.rows ? w.index[w.index.length - 2] : undefined;
  const worstCol = w.index[w.index.length - 1];
  const cells = (pick: "op" | "ref") =>
    (pick === "op" ? win.op : win.ref).map((row, i) =>
      row.map((v, j) => {
        const r = win.rows ? win.rows[0] + i : undefined;
        const c = c0 + j;
        const bad = win.bad?.[i]?.[j] ? "*" : " ";
        const text = cellText(v) + bad;
        return r === worstRow && c === worstCol ? `[${text}]` : ` ${text} `;
      }),
    );
  const op = cells("op");
  const ref = cells("ref");
  const width = Math.max(...[...op, ...ref].flat().map((t) => t.length));
  const rowName = (i: number) => {
    const r = win.rows ? [String(win.rows[0] + i)] : [];
    return `${w.output}[${[...lead, ...r, `${c0}:${c1}`].join(", ")}]`;
  };
  const nameWidth = Math.max(...op.map((_, i) => rowName(i).length));
  const title = `# around the worst element: ${w.output}[${[...lead, ...(win.rows ? [`${win.rows[0]}:${win.rows[1]}`] : []), `${c0}:${c1}`].join(", ")}] (* off tolerance, [ ] the worst)`;
  return (pick) => [
    title,
    ...(pick === "op" ? op : ref).map((row, i) => `${rowName(i).padEnd(nameWidth)} ${row.map((t) => t.padStart(width)).join("")}`.trimEnd()),
  ];
}

/** The message of one failing case: the case line, the comparison, the diagnosis, the replay command. */
export function caseMessage(f: Failure, op: string, diagnosis?: string): string {
  const lines = [`${op} [${f.kind ?? f.status ?? "failed"}] ${caseLine(f)}`];
  if (f.message) lines.push(f.message);
  else if (f.maxAbs !== undefined && f.maxAbs !== null) {
    const tol = f.tolerance && f.tolerance.length >= 2 ? ` vs atol=${num(f.tolerance[0])} rtol=${num(f.tolerance[1])}` : "";
    lines.push(`max abs err ${num(f.maxAbs)}${tol}`);
  }
  if (f.worst && f.worst.index) {
    lines.push(
      `worst element ${f.worst.output}${indexText(f.worst.index)}: op ${valueText(f.worst.op)}, reference ${valueText(f.worst.ref)}` +
        (f.worst.allowed !== undefined && f.worst.allowed !== null ? `, allowed ±${valueText(f.worst.allowed)}` : ""),
    );
  }
  if (diagnosis) lines.push(`diagnosis: ${diagnosis}`);
  if (f.replay) lines.push(`replay: ${f.replay}`);
  return lines.join("\n");
}

/** Test item id of a failing case of an op (a child of the op's item). */
export function caseKey(opKey: string, seed: number): string {
  return `${opKey}::seed:${seed}`;
}

/** The op's key and the seed of a case item id, or undefined for other ids. */
export function parseCaseKey(key: string): { opKey: string; seed: number } | undefined {
  const m = /^(.*)::seed:(\d+)$/.exec(key);
  return m ? { opKey: m[1], seed: Number(m[2]) } : undefined;
}

/** The summary line of an op result: its message and diagnosis. */
export function summaryText(state: { name: string; state: string; message?: string; diagnosis?: string }): string {
  const lines = [`${state.name}: ${state.state.replace("_", " ")}${state.message ? ` - ${state.message}` : ""}`];
  if (state.diagnosis) lines.push(`diagnosis: ${state.diagnosis}`);
  return lines.join("\n");
}

/** The condition of a diagnosis, short: "fails only if N % 128 != 0 (...)" -> "N % 128 != 0". */
export function conditionText(diagnosis?: string): string | undefined {
  if (!diagnosis) return undefined;
  const t = diagnosis
    .split("\n")[0]
    .replace(/^fails (iff|only if|if|when|where) /, "")
    .split(/: |; | \(/)[0]
    .trim();
  if (!t) return undefined;
  return t.length > 60 ? `${t.slice(0, 59)}…` : t;
}

/**
 * What the red badge at an op's def says: how many cases failed and why, short ("9/16 failed: N % 128 != 0"), the
 * condition of the diagnosis, else the first failure's kind.
 */
export function badgeText(s: OpState): string {
  const failures = s.failures ?? [];
  const failed = s.failedCases ?? failures.length;
  const count = s.cases !== undefined ? `${failed}/${s.cases} failed` : `${s.state.replace("_", " ")}`;
  const kind = failures[0]?.kind ?? failures[0]?.status;
  const why = conditionText(s.diagnosis) ?? (kind ? (KIND_WORDS[kind] ?? kind.replace(/_/g, " ")) : undefined);
  return why ? `${count}: ${why}` : count;
}

/** Failure kinds in words (engine/report/lines.py KIND_TEXT, the ones a badge meets most). */
const KIND_WORDS: Record<string, string> = {
  mismatch: "wrong values",
  unexpected_nan: "NaN where the reference is finite",
  unexpected_inf: "inf where the reference is finite",
  missing_nan: "finite where the reference is NaN",
  shape_mismatch: "wrong output shape",
  dtype_mismatch: "wrong output dtype",
  op_error: "op raised",
};

/** How many failing cases become separate test messages. */
export const MAX_MESSAGES = 5;

/** A `gpuemu/opState` notification (or a runOps/discover result dressed as one) -> a test result. */
export function stateToOutcome(s: OpState): Outcome {
  const failures = s.failures ?? [];
  switch (s.state) {
    case "queued":
      return { type: "enqueued", terminal: false, messages: [] };
    case "running": {
      const out: Outcome = { type: "started", terminal: false, messages: [] };
      if (s.lastFailure) out.output = formatFailure(s.lastFailure, s.name).split("\n")[0];
      return out;
    }
    case "passed":
      return {
        type: "passed",
        terminal: true,
        messages: [],
        cases: [],
        output: `PASS ${s.name}${s.cases !== undefined ? ` (${s.cases} cases)` : ""}${s.message ? `: ${s.message}` : ""}`,
      };
    case "edge":
      // edge findings only: the op passes (they show as warnings at its source), unless strict made them fail
      return {
        type: "passed",
        terminal: true,
        messages: [],
        cases: [],
        output: `EDGE ${s.name}${s.cases !== undefined ? ` (${s.cases} cases)` : ""}${s.message ? `: ${s.message}` : ""}`,
      };
    case "failed":
    case "error":
    case "errored":
    case "not_judged":
    case "not_run": {
      const summary = summaryText(s);
      const messages: MessageSpec[] = [];
      let cases: CaseChild[] = [];
      if (s.kind === "kernel") {
        const located = failures.filter((f) => f.file && f.line);
        messages.push({ text: summary, at: "source" });
        for (const f of located.slice(0, MAX_MESSAGES)) {
          messages.push({ text: formatFailure(f), at: { file: f.file as string, line: f.line as number } });
        }
      } else if (failures.length) {
        const withSeed = failures.filter((f) => f.seed !== undefined);
        // first a message without a diff: VS Code's red badge at the def shows the first line of an op's first
        // message, and "actual != expected" (middle-truncated, unreadable) for one with a diff
        const more =
          failures.length > MAX_MESSAGES ? `\n(${failures.length - MAX_MESSAGES} more failing case(s) are children of ${s.name} in the Test Explorer)` : "";
        messages.push({ text: `${badgeText(s)}\n${summary}${more}`, at: "source" });
        for (const f of failures.slice(0, MAX_MESSAGES)) {
          messages.push({ text: caseMessage(f, s.name, s.diagnosis), at: "source", diff: failureDiff(f) });
        }
        cases = withSeed.map((f) => ({
          seed: f.seed as number,
          label: `seed ${f.seed}`,
          description: [f.dtype, shapesText(f.shapes), f.layout, f.distribution].filter(Boolean).join(" "),
          message: { text: caseMessage(f, s.name, s.diagnosis), at: "source" as const, diff: failureDiff(f) },
          failure: f,
        }));
      } else {
        const text =
          s.state === "not_run" && !s.message ? `${s.name}: not run (nothing runnable here counts as a failure)` : summary;
        messages.push({ text, at: "source" });
      }
      const type: OutcomeType = s.state === "failed" ? "failed" : "errored";
      const counts =
        s.cases !== undefined ? ` (${s.cases - (s.failedCases ?? failures.length)}/${s.cases} cases passed)` : "";
      return {
        type,
        terminal: true,
        messages,
        output: `${s.state.toUpperCase()} ${s.name}${counts}${s.message ? `: ${s.message}` : ""}`,
        cases: s.kind === "kernel" || s.failures === undefined ? undefined : cases,
      };
    }
    case "cancelled":
      return { type: "skipped", terminal: true, messages: [], output: `CANCELLED ${s.name}` };
    default:
      return { type: "errored", terminal: true, messages: [{ text: `${s.name}: unknown state ${s.state}`, at: "source" }] };
  }
}

/** Statuses of discoverOps / runOps as an OpState (for results known without a notification). */
export function statusAsState(
  workspace: string,
  item: { id: string; name: string; kind?: "op" | "kernel"; status: string; message?: string; diagnosis?: string },
): OpState {
  return {
    workspace,
    id: item.id,
    name: item.name,
    kind: item.kind ?? (item.id.startsWith("kernel:") ? "kernel" : "op"),
    state: item.status,
    message: item.message,
    diagnosis: item.diagnosis,
  };
}

/**
 * Live state per op from `gpuemu/opState`. The server runs one job per op; every job sends
 * `queued` first and exactly one terminal state last, and a new save supersedes (cancels) the
 * running job of the same op, whose `cancelled` may arrive after its successor's `queued`. Counting
 * the jobs in flight tells a superseded `cancelled` (ignored) from a real end of the op's run.
 */
export class JobTracker {
  private readonly inFlight = new Map<string, number>();

  /** `superseded`: nothing to show; `done`: the op's last job ended; `state`: what to display. */
  update(s: OpState): { key: string; superseded: boolean; done: boolean; state: string } {
    const key = itemKey(s.workspace, s.id);
    let jobs = this.inFlight.get(key) ?? 0;
    if (s.state === "queued") jobs += 1;
    else if (isTerminal(s.state)) jobs = Math.max(0, jobs - 1);
    if (jobs) this.inFlight.set(key, jobs);
    else this.inFlight.delete(key);
    const terminal = isTerminal(s.state);
    const superseded = s.state === "cancelled" && jobs > 0;
    return { key, superseded, done: terminal && jobs === 0, state: terminal && jobs > 0 ? "running" : s.state };
  }

  busy(key: string): boolean {
    return (this.inFlight.get(key) ?? 0) > 0;
  }
}

// ------------------------------------------------------------------------------------------
// Status bar

export interface StatusSummary {
  text: string;
  tooltip: string;
  running: number;
  failed: number;
}

const BAD = new Set(["failed", "error", "errored", "not_judged", "not_run"]);

/** How far the run in progress got: its ops and kernels done, of all it took in, and how many of them failed. */
export interface WaveCount {
  done: number;
  total: number;
  failed: number;
}

/**
 * The ops and kernels of the run in progress, so the status bar counts up ("5 of 18 ops done"), where counting
 * those still running counted down ("running 18 of 18" ... "1 of 18"). A wave starts when something is queued
 * while nothing runs, takes in everything queued until nothing runs, and ends then.
 */
export class RunWave {
  private readonly members = new Set<string>();

  update(states: ReadonlyMap<string, string>): WaveCount | undefined {
    const busy = [...states].filter(([, s]) => s === "queued" || s === "running").map(([k]) => k);
    if (!busy.length) {
      this.members.clear();
      return undefined;
    }
    for (const k of busy) this.members.add(k);
    for (const k of [...this.members]) if (!states.has(k)) this.members.delete(k); // gone from gpuemu.toml
    const failed = [...this.members].filter((k) => BAD.has(states.get(k) ?? "")).length;
    return { done: this.members.size - busy.length, total: this.members.size, failed };
  }
}

/** idle / N of M done / N failed, from the latest state of each op and kernel (and the run in progress). */
export function statusSummary(
  states: Iterable<string>,
  extra?: { trusted?: boolean; serverState?: string; noun?: string; wave?: WaveCount },
): StatusSummary {
  let running = 0;
  let failed = 0;
  let passed = 0;
  let total = 0;
  for (const s of states) {
    total += 1;
    if (s === "queued" || s === "running") running += 1;
    else if (BAD.has(s)) failed += 1;
    else if (s === "passed" || s === "edge") passed += 1;
  }
  if (extra?.serverState && extra.serverState !== "running") {
    return {
      text: `$(circle-slash) gpuemu: ${extra.serverState}`,
      tooltip: `gpuemu-ls is ${extra.serverState}; click for the server log`,
      running,
      failed,
    };
  }
  const restricted = extra?.trusted === false ? " (restricted)" : "";
  const what = extra?.noun ?? "ops";
  let text: string;
  if (running > 0) {
    const wave = extra?.wave ?? { done: total - running, total, failed };
    const bad = wave.failed ? `, ${wave.failed} failed` : "";
    text = `$(sync~spin) gpuemu: ${wave.done} of ${wave.total} ${what} done${bad}`;
  }
  else if (failed > 0) text = `$(error) gpuemu: ${failed} of ${total} ${what} failed`;
  else if (total > 0 && passed === total) text = `$(pass) gpuemu: ${total} ${what} passed`;
  else text = `$(beaker) gpuemu: idle`;
  const tooltip =
    `gpuemu-ls${restricted}: ${total} ${what}: ${running} running, ${failed} failed, ${passed} passed, ${total - running - failed - passed} not run yet` +
    (extra?.trusted === false ? "\nUntrusted workspace: only configuration diagnostics, nothing runs." : "") +
    "\nClick to show failures.";
  return { text: text + (restricted ? " $(shield)" : ""), tooltip, running, failed };
}

// ------------------------------------------------------------------------------------------
// Server options

export type ConfigGetter = (key: string) => unknown;

/** The server's options (docs/lsp.md) from the `gpuemu` settings section, plus workspace trust. */
export function serverSettings(get: ConfigGetter, trusted: boolean): Record<string, unknown> {
  const str = (v: unknown) => (typeof v === "string" && v.trim() !== "" ? v : null);
  const pos = (v: unknown) => (typeof v === "number" && Number.isInteger(v) && v > 0 ? v : null);
  const out: Record<string, unknown> = { trusted };
  const mode = get("mode");
  if (mode !== undefined && mode !== null) out.mode = mode;
  for (const key of ["onSave", "onOpen", "lint"]) {
    const v = get(key);
    if (typeof v === "boolean") out[key] = v;
  }
  out.iterations = pos(get("iterations"));
  const jobs = pos(get("jobs"));
  if (jobs !== null) out.jobs = jobs;
  out.storePath = str(get("storePath"));
  const runOnOpen = get("runOnOpen");
  if (runOnOpen === "quick" || runOnOpen === "off") out.runOnOpen = runOnOpen;
  return out;
}

// ------------------------------------------------------------------------------------------
// Diagnostics -> reproduce / minimize arguments

export interface FailureTarget {
  workspace?: string;
  op: string;
  seed: number;
  /** Reproduce the minimized case (`gpuemu minimize` stored it). */
  minimized?: boolean;
  /** The minimized case's shapes, when the diagnostic says there is one. */
  minimizedShapes?: Record<string, number[]>;
}

/** `{workspace, op, seed}` of a gpuemu diagnostic (from its `data`, else parsed from its message). */
export function failureTarget(diag: { source?: string; message: string; data?: unknown }): FailureTarget | undefined {
  if (diag.source !== undefined && diag.source !== "gpuemu") return undefined;
  const data = diag.data as Record<string, unknown> | undefined;
  if (data && typeof data === "object" && typeof data.op === "string" && typeof data.seed === "number") {
    if (data.kind !== undefined && data.kind !== "op") return undefined;
    const mini = data.minimized;
    return {
      workspace: typeof data.workspace === "string" ? data.workspace : undefined,
      op: data.op,
      seed: data.seed,
      ...(mini && typeof mini === "object" && Object.keys(mini).length ? { minimizedShapes: mini as Record<string, number[]> } : {}),
    };
  }
  const seed = /\bseed[= ](\d+)/.exec(diag.message);
  const op = /^([A-Za-z_][\w.-]*)\b/.exec(diag.message);
  if (seed && op) return { op: op[1], seed: Number(seed[1]) };
  return undefined;
}

/** Whether `pos` lies in `range` (inclusive ends, as VS Code's Range.contains). */
export function rangeContains(range: Range, pos: Position): boolean {
  const before = (a: Position, b: Position) => a.line < b.line || (a.line === b.line && a.character <= b.character);
  return before(range.start, pos) && before(pos, range.end);
}

/** `x=[1, 1] y=[2]`: shapes as the server writes them. */
export function shapesLabel(shapes: Record<string, number[]> | undefined): string {
  return shapesText(shapes);
}

// ------------------------------------------------------------------------------------------
// Reproductions

/**
 * Lines of a standalone reproduction (`.gpuemu/repro/<op>_<seed>.py`, written by gpuemu reproduce):
 * `call`: where the op is called (a debugger's breakpoint), `verdict`: where the verdict is printed
 * (the line a reader wants to see first). 0-based; undefined when not found.
 */
export function reproLines(text: string): { call?: number; verdict?: number } {
  const lines = text.split(/\r?\n/);
  const find = (re: RegExp) => {
    const i = lines.findIndex((l) => re.test(l));
    return i >= 0 ? i : undefined;
  };
  // a script op's file sets OP_SCRIPT = 'path'; a module op's OP_SCRIPT = None (then call(OP_CALL, ...) runs)
  const script = lines.some((l) => /^OP_SCRIPT = ['"]/.test(l));
  return {
    call: script ? find(/^\s*out = run_script\(OP_SCRIPT/) : find(/^\s*out = call\(OP_CALL/),
    verdict: find(/^\s*print\("FAILED: "/) ?? find(/^\s*if problems:/),
  };
}

/** The result of the server's `gpuemu.reproduce` command. */
export interface ReproduceResult {
  repro?: string;
  status?: string;
  source?: string;
  kind?: string | null;
  message?: string;
  report?: string;
  case?: { dtype?: string; shapes?: Record<string, number[]>; layout?: string; distribution?: string; seed?: number };
  error?: string;
}

/** The one-line notification after a reproduction: verdict, case, what was replayed. */
export function reproduceSummary(op: string, seed: number, r: ReproduceResult, minimized = false): string {
  const verdict = r.status === "passed" ? "passes now" : r.status === "not_run" ? "did not run" : "still fails";
  const c = r.case;
  const caseText = c
    ? [c.dtype, shapesText(c.shapes), c.layout ? `layout=${c.layout}` : "", c.distribution ? `dist=${c.distribution}` : ""]
        .filter(Boolean)
        .join(" ")
    : "";
  const kind = r.status !== "passed" && r.kind ? ` [${r.kind}]` : "";
  const first = (r.message ?? "").split("\n")[0].trim();
  return `gpuemu: ${op} seed ${seed}${minimized ? " (minimized)" : ""} ${verdict}${kind}${caseText ? `: ${caseText}` : ""}${
    first && r.status !== "passed" ? ` - ${first.length > 160 ? first.slice(0, 159) + "…" : first}` : ""
  }`;
}

/** Server messages the extension replaces with its own notification (reproduce and minimize results). */
export function isCommandResultMessage(message: string): boolean {
  return /^gpuemu: \S+ seed \d+ (still fails|passes now|minimized to)\b/.test(message);
}

// ------------------------------------------------------------------------------------------
// The client's log

export type LogLevel = "error" | "warn" | "info" | "debug";

/**
 * The level a line the language client logs as an error deserves. vscode-languageclient logs every line of the
 * server's stderr, and the connection closing, as errors: Python's own level leads a logging line
 * ("WARNING:gpuemu-ls:..."), and a close during a stop the extension asked for (a restart) is routine. Anything
 * else (a traceback, a crash) stays an error.
 */
export function clientLogLevel(line: string, stopping: boolean): LogLevel {
  const m = /^(CRITICAL|ERROR|WARNING|INFO|DEBUG):/.exec(line);
  if (m) return m[1] === "WARNING" ? "warn" : m[1] === "INFO" ? "info" : m[1] === "DEBUG" ? "debug" : "error";
  if (stopping && /^(Connection to server got closed|Server process exited|Client gpuemu-ls: connection to server is erroring)/.test(line)) {
    return "info";
  }
  return "error";
}
