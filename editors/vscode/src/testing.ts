/**
 * The Test Explorer: ops and kernels of `gpuemu/discoverOps` under their gpuemu.toml, run profiles
 * "Quick" and "Thorough" over `gpuemu/runOps`, results kept live from `gpuemu/opState` (runs the
 * server starts by itself, on open or on save, get a TestRun created on the fly).
 */
import * as vscode from "vscode";
import {
  CaseChild,
  DiscoverResult,
  Failure,
  Folder,
  JobTracker,
  MessageSpec,
  OpState,
  Outcome,
  RunOpsResult,
  TreeLeaf,
  buildTree,
  caseKey,
  isTerminal,
  parseCaseKey,
  itemKey,
  statusAsState,
  stateToOutcome,
} from "./model";

export interface ServerLink {
  runOps(params: { workspace?: string; ids?: string[]; mode?: string }, token: vscode.CancellationToken): Promise<RunOpsResult>;
  trusted(): boolean;
  log(message: string): void;
  /** Debug a failing case: its standalone reproduction under the Python debugger. Resolves to why not, or undefined once started. */
  debugCase(target: { workspace: string; op: string; seed: number }, run: vscode.TestRun, item: vscode.TestItem): Promise<string | undefined>;
  /** Whether the server validates on save by itself (gpuemu.onSave). */
  validatesOnSave(): boolean;
}

/** A failing case shown as a child of its op. */
export interface CaseItem {
  item: vscode.TestItem;
  opKey: string;
  child: CaseChild;
}

interface RunCtx {
  run: vscode.TestRun;
  background: boolean;
  pending: Set<string>;
  started: Map<string, number>;
  ended: boolean;
  idleTimer?: ReturnType<typeof setTimeout>;
}

interface Leaf {
  item: vscode.TestItem;
  leaf: TreeLeaf;
}

export type RunMode = "quick" | "thorough";

/** How long an on-the-fly run stays open after its last op finished, for ops that follow at once. */
const BACKGROUND_IDLE_MS = 1500;
/** How long to wait after a runOps answer for its ops' final opState notifications. */
const SETTLE_MS = 2000;

function toRange(r: { start: { line: number; character: number }; end: { line: number; character: number } }): vscode.Range {
  return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

export class GpuemuTests implements vscode.Disposable {
  readonly controller: vscode.TestController;
  readonly quickProfile: vscode.TestRunProfile;
  readonly thoroughProfile: vscode.TestRunProfile;
  readonly debugProfile: vscode.TestRunProfile;
  /** Failing cases of the latest run of each op (children of its item), by case item id. */
  readonly cases = new Map<string, CaseItem>();
  /** Latest failing cases per op key (for Debug of an op item: its first failing case). */
  private readonly failuresByOp = new Map<string, Failure[]>();
  /** Continuous (watch) runs: their request and mode, until their token is cancelled. */
  private readonly watches = new Set<{ request: vscode.TestRunRequest; mode: RunMode; keys: Set<string> }>();
  /** Latest state of every op/kernel (discover status or opState), for the status bar and pickers. */
  readonly states = new Map<string, string>();
  private readonly leaves = new Map<string, Leaf>();
  private readonly owners = new Map<string, RunCtx>();
  /** Jobs the server queued per item and has not finished (a new save supersedes a running one). */
  private readonly jobs = new JobTracker();
  private readonly storedShown = new Set<string>();
  private background: RunCtx | undefined;
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChange = this.changed.event;
  private readonly needDiscover = new vscode.EventEmitter<void>();
  /** Fired when an opState names an item the tree does not have (the config changed). */
  readonly onNeedDiscover = this.needDiscover.event;

  constructor(private readonly link: ServerLink) {
    this.controller = vscode.tests.createTestController("gpuemu", "gpuemu");
    this.quickProfile = this.controller.createRunProfile(
      "Quick",
      vscode.TestRunProfileKind.Run,
      (request, token) => this.runHandler(request, token, "quick"),
      true,
    );
    this.thoroughProfile = this.controller.createRunProfile(
      "Thorough",
      vscode.TestRunProfileKind.Run,
      (request, token) => this.runHandler(request, token, "thorough"),
      false,
    );
    // continuous run (the "watch" eye): re-run the watched ops whenever a file they depend on is saved
    this.quickProfile.supportsContinuousRun = true;
    this.thoroughProfile.supportsContinuousRun = true;
    this.debugProfile = this.controller.createRunProfile(
      "Debug reproduction",
      vscode.TestRunProfileKind.Debug,
      (request, token) => this.debugHandler(request, token),
      true,
    );
  }

  dispose(): void {
    for (const ctx of new Set([...this.owners.values(), ...(this.background ? [this.background] : [])])) this.endCtx(ctx);
    this.controller.dispose();
    this.changed.dispose();
    this.needDiscover.dispose();
  }

  /** Every op and kernel currently in the tree. */
  allLeaves(): TreeLeaf[] {
    return [...this.leaves.values()].map((l) => l.leaf);
  }

  leaf(workspace: string, id: string): TreeLeaf | undefined {
    return this.leaves.get(itemKey(workspace, id))?.leaf;
  }

  // --- discovery ------------------------------------------------------------------------------
  applyDiscover(result: DiscoverResult | undefined, folders: Folder[]): void {
    const tree = buildTree(result, folders);
    const seen = new Set<string>();
    const wsItems: vscode.TestItem[] = [];
    const stored: Leaf[] = [];
    for (const ws of tree) {
      const wsItem =
        this.controller.items.get(ws.key) ?? this.controller.createTestItem(ws.key, ws.label, vscode.Uri.parse(ws.uri));
      wsItem.label = ws.label;
      wsItem.description = ws.trusted ? ws.description : `${ws.description} (restricted: untrusted workspace)`;
      wsItem.error = ws.error ? new vscode.MarkdownString().appendText(ws.error) : undefined;
      wsItem.range = new vscode.Range(0, 0, 0, 0);
      const children: vscode.TestItem[] = [];
      for (const leaf of ws.children) {
        seen.add(leaf.key);
        const prev = this.leaves.get(leaf.key);
        const uri = vscode.Uri.parse(leaf.uri);
        let item = prev?.item;
        if (!item || item.uri?.toString() !== uri.toString()) item = this.controller.createTestItem(leaf.key, leaf.label, uri);
        item.label = leaf.label;
        item.description = leaf.description;
        item.range = toRange(leaf.range);
        item.sortText = leaf.sortText;
        item.error = undefined;
        this.leaves.set(leaf.key, { item, leaf });
        children.push(item);
        if (!this.owners.has(leaf.key) && !this.jobs.busy(leaf.key)) {
          if (!this.states.has(leaf.key) || isTerminal(this.states.get(leaf.key) as string)) {
            if (leaf.status !== "unknown") this.states.set(leaf.key, leaf.status);
          }
          if (!this.storedShown.has(leaf.key) && ["passed", "failed", "edge", "not_judged", "error", "not_run"].includes(leaf.status)) {
            stored.push({ item, leaf });
          }
        }
      }
      wsItem.children.replace(children);
      wsItems.push(wsItem);
    }
    this.controller.items.replace(wsItems);
    for (const key of [...this.leaves.keys()]) {
      if (!seen.has(key)) {
        this.leaves.delete(key);
        this.states.delete(key);
      }
    }
    if (stored.length) this.showStored(stored);
    this.changed.fire();
  }

  /** Results already in the store when the explorer first sees an op: shown as a finished run. */
  private showStored(stored: Leaf[]): void {
    const request = new vscode.TestRunRequest(
      stored.map((s) => s.item),
      undefined,
      undefined,
      false,
      true,
    );
    const run = this.controller.createTestRun(request, "gpuemu: stored results", false);
    for (const { item, leaf } of stored) {
      this.storedShown.add(leaf.key);
      this.report(run, item, leaf, stateToOutcome(statusAsState(leaf.workspace, { ...leaf, name: leaf.label })), undefined);
    }
    run.end();
  }

  // --- runs -------------------------------------------------------------------------------------
  private collect(request: vscode.TestRunRequest): Leaf[] {
    const excluded = new Set((request.exclude ?? []).map((i) => i.id));
    const out = new Map<string, Leaf>();
    const visit = (item: vscode.TestItem) => {
      if (excluded.has(item.id)) return;
      const c = parseCaseKey(item.id);
      const leaf = this.leaves.get(c ? c.opKey : item.id);
      if (leaf) out.set(leaf.item.id, leaf);
      if (!c && !leaf) item.children.forEach(visit);
    };
    if (request.include) request.include.forEach(visit);
    else this.controller.items.forEach(visit);
    return [...out.values()];
  }

  /** Runs the ops and kernels of a request (also used by the run commands). */
  async runHandler(request: vscode.TestRunRequest, token: vscode.CancellationToken, mode: RunMode): Promise<void> {
    if (request.continuous) return this.watch(request, token, mode);
    const selected = this.collect(request);
    const run = this.controller.createTestRun(request, `gpuemu (${mode})`, true);
    if (!this.link.trusted()) {
      for (const { item } of selected) {
        run.errored(item, new vscode.TestMessage("This workspace is not trusted: gpuemu-ls runs no workspace code."));
      }
      run.end();
      return;
    }
    const ctx: RunCtx = { run, background: false, pending: new Set(), started: new Map(), ended: false };
    const byWorkspace = new Map<string, Leaf[]>();
    for (const l of selected) {
      this.claim(ctx, l.leaf.key);
      run.enqueued(l.item);
      byWorkspace.set(l.leaf.workspace, [...(byWorkspace.get(l.leaf.workspace) ?? []), l]);
    }
    try {
      const answers = await Promise.all(
        [...byWorkspace].map(([workspace, leaves]) =>
          this.link.runOps({ workspace, ids: leaves.map((l) => l.leaf.id), mode }, token).then(
            (r) => ({ workspace, r, error: r?.error }),
            (err: unknown) => ({ workspace, r: undefined as RunOpsResult | undefined, error: String(err) }),
          ),
        ),
      );
      await this.settle(ctx, token);
      for (const { workspace, r, error } of answers) {
        for (const res of r?.results ?? []) {
          const key = itemKey(res.workspace ?? workspace, res.id);
          const l = this.leaves.get(key);
          if (l && ctx.pending.has(key)) {
            this.apply(ctx, l, statusAsState(res.workspace ?? workspace, { ...res, status: res.status }));
          }
        }
        for (const l of byWorkspace.get(workspace) ?? []) {
          if (!ctx.pending.has(l.leaf.key)) continue;
          if (token.isCancellationRequested) run.skipped(l.item);
          else run.errored(l.item, new vscode.TestMessage(error ? `gpuemu/runOps failed: ${error}` : "no result from gpuemu-ls"));
          this.release(ctx, l.leaf.key);
        }
      }
    } finally {
      this.endCtx(ctx);
      this.changed.fire();
    }
  }

  /**
   * A continuous run: until cancelled, each save of a file a watched op depends on (its function's
   * file, its reference, gpuemu.toml) runs it again. The server validates the affected ops on save by
   * itself (gpuemu.onSave): their results then come in as a run of this request; with onSave off the
   * extension asks for the run.
   */
  private async watch(request: vscode.TestRunRequest, token: vscode.CancellationToken, mode: RunMode): Promise<void> {
    const keys = new Set(this.collect(request).map((l) => l.leaf.key));
    const entry = { request, mode, keys };
    this.watches.add(entry);
    this.link.log(`continuous run (${mode}) on: ${[...keys].map((k) => this.leaves.get(k)?.leaf.id ?? k).join(", ")}`);
    token.onCancellationRequested(() => this.link.log(`continuous run (${mode}) off`));
    const sub = vscode.workspace.onDidSaveTextDocument((doc) => {
      if (this.link.validatesOnSave()) return; // the server's own run shows up as a watch run (handleState)
      const path = doc.uri.fsPath;
      const hit = [...keys]
        .map((k) => this.leaves.get(k))
        .filter((l): l is Leaf => l !== undefined)
        .filter((l) => [l.leaf.sourceUri, l.leaf.entryUri].some((u) => u && vscode.Uri.parse(u).fsPath === path) || path.endsWith(".py"));
      if (!hit.length) return;
      const sub2 = new vscode.CancellationTokenSource();
      void this.runHandler(new vscode.TestRunRequest(hit.map((l) => l.item), undefined, request.profile), sub2.token, mode).finally(() =>
        sub2.dispose(),
      );
    });
    await new Promise<void>((resolve) => token.onCancellationRequested(() => resolve()));
    sub.dispose();
    this.watches.delete(entry);
  }

  /** The watch run an op belongs to (server-started runs of watched ops are shown as its runs). */
  private watchFor(key: string): vscode.TestRunRequest | undefined {
    for (const w of this.watches) if (w.keys.has(key)) return w.request;
    return undefined;
  }

  /** The Debug profile: the first selected op's failing case (or the selected case) under the Python debugger. */
  private async debugHandler(request: vscode.TestRunRequest, token: vscode.CancellationToken): Promise<void> {
    const items: vscode.TestItem[] = [];
    if (request.include) items.push(...request.include);
    else this.controller.items.forEach((ws) => ws.children.forEach((c) => items.push(c)));
    let target = items.map((i) => ({ item: i, t: this.caseTarget(i) })).find((x) => x.t && x.t.leaf.kind === "op");
    const run = this.controller.createTestRun(request, "gpuemu (debug)", true);
    try {
      if (!target?.t) {
        for (const i of items) run.errored(i, new vscode.TestMessage("Debug works on ops (a kernel has no reproduction to debug)."));
        return;
      }
      let { leaf, seed } = target.t;
      if (seed === undefined) {
        // no failing case known: run the op first (quick), then debug its first failing case
        run.appendOutput(`${leaf.label}: no failing case known yet, running it first\r\n`);
        const sub = new vscode.CancellationTokenSource();
        token.onCancellationRequested(() => sub.cancel());
        await this.runHandler(new vscode.TestRunRequest([target.item], undefined, this.quickProfile), sub.token, "quick");
        sub.dispose();
        target = { item: target.item, t: this.caseTarget(target.item) };
        seed = target.t?.seed;
        if (seed === undefined) {
          run.passed(target.item);
          void vscode.window.showInformationMessage(`gpuemu: ${leaf.label} has no failing case to debug.`);
          return;
        }
        leaf = target.t!.leaf;
      }
      run.started(target.item);
      const why = await this.link.debugCase({ workspace: leaf.workspace, op: leaf.label, seed }, run, target.item);
      if (why) run.errored(target.item, new vscode.TestMessage(why));
      else run.skipped(target.item); // the verdict is the reproduction's exit status, in the debug console
    } finally {
      run.end();
    }
  }

  private async settle(ctx: RunCtx, token: vscode.CancellationToken): Promise<void> {
    const deadline = Date.now() + SETTLE_MS;
    while (ctx.pending.size && Date.now() < deadline && !token.isCancellationRequested) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  private claim(ctx: RunCtx, key: string): void {
    const prev = this.owners.get(key);
    if (prev && prev !== ctx) {
      prev.pending.delete(key);
      this.maybeEndBackground(prev);
    }
    this.owners.set(key, ctx);
    ctx.pending.add(key);
  }

  private release(ctx: RunCtx, key: string): void {
    ctx.pending.delete(key);
    if (this.owners.get(key) === ctx) this.owners.delete(key);
  }

  private endCtx(ctx: RunCtx): void {
    if (ctx.ended) return;
    ctx.ended = true;
    if (ctx.idleTimer) clearTimeout(ctx.idleTimer);
    for (const key of ctx.pending) {
      if (this.owners.get(key) === ctx) this.owners.delete(key);
    }
    ctx.pending.clear();
    if (this.background === ctx) this.background = undefined;
    ctx.run.end();
  }

  private maybeEndBackground(ctx: RunCtx): void {
    if (!ctx.background || ctx.ended) return;
    if (ctx.idleTimer) clearTimeout(ctx.idleTimer);
    if (ctx.pending.size === 0) ctx.idleTimer = setTimeout(() => this.endCtx(ctx), BACKGROUND_IDLE_MS);
  }

  // --- live state --------------------------------------------------------------------------------
  /** A `gpuemu/opState` notification. */
  handleState(s: OpState): void {
    const { key, superseded, done, state } = this.jobs.update(s);
    if (!superseded) this.states.set(key, state);
    this.changed.fire();
    const l = this.leaves.get(key);
    if (!l) {
      this.needDiscover.fire();
      return;
    }
    if (superseded) return;
    let ctx = this.owners.get(key);
    if (!ctx || ctx.ended) {
      if (s.state === "cancelled") return;
      ctx = this.backgroundCtx(this.watchFor(key));
      this.claim(ctx, key);
    }
    if (ctx.idleTimer) clearTimeout(ctx.idleTimer);
    this.apply(ctx, l, s, !done && isTerminal(s.state));
  }

  private readonly watchCtx = new Map<vscode.TestRunRequest, RunCtx>();

  private backgroundCtx(watch?: vscode.TestRunRequest): RunCtx {
    if (watch) {
      const prev = this.watchCtx.get(watch);
      if (prev && !prev.ended) return prev;
      const run = this.controller.createTestRun(watch, "gpuemu (watch)", true);
      const ctx: RunCtx = { run, background: true, pending: new Set(), started: new Map(), ended: false };
      this.watchCtx.set(watch, ctx);
      return ctx;
    }
    if (this.background && !this.background.ended) return this.background;
    const request = new vscode.TestRunRequest(undefined, undefined, undefined, false, true);
    const run = this.controller.createTestRun(request, "gpuemu (on open/save)", true);
    this.background = { run, background: true, pending: new Set(), started: new Map(), ended: false };
    return this.background;
  }

  private apply(ctx: RunCtx, l: Leaf, s: OpState, morePending = false): void {
    const outcome = stateToOutcome(s);
    const key = l.leaf.key;
    if (outcome.type === "started" && !ctx.started.has(key)) ctx.started.set(key, Date.now());
    const t0 = ctx.started.get(key);
    // the op's own time when the server says it (its wait in the queue is no part of it), else the time seen here
    const own = typeof s.elapsed === "number" && Number.isFinite(s.elapsed) ? Math.round(s.elapsed * 1000) : undefined;
    this.report(ctx.run, l.item, l.leaf, outcome, own ?? (t0 !== undefined ? Date.now() - t0 : undefined));
    if (outcome.terminal && !morePending) {
      this.storedShown.add(key);
      this.release(ctx, key);
      this.maybeEndBackground(ctx);
    }
  }

  private location(leaf: TreeLeaf, at: MessageSpec["at"]): vscode.Location | undefined {
    if (at === "entry") return new vscode.Location(vscode.Uri.parse(leaf.entryUri), toRange(leaf.entryRange));
    if (at === "source") {
      if (leaf.sourceUri && leaf.sourceRange) return new vscode.Location(vscode.Uri.parse(leaf.sourceUri), toRange(leaf.sourceRange));
      return new vscode.Location(vscode.Uri.parse(leaf.entryUri), toRange(leaf.entryRange));
    }
    const file = at.file.startsWith("file:") ? vscode.Uri.parse(at.file) : vscode.Uri.file(at.file);
    return new vscode.Location(file, new vscode.Position(Math.max(0, at.line - 1), 0));
  }

  private testMessage(leaf: TreeLeaf, m: MessageSpec): vscode.TestMessage {
    const msg = m.diff ? vscode.TestMessage.diff(m.text, m.diff.expected, m.diff.actual) : new vscode.TestMessage(m.text);
    msg.location = this.location(leaf, m.at);
    return msg;
  }

  /** The failing cases of an op's latest run as its children (each failed, with its message and diff). */
  private reportCases(run: vscode.TestRun, item: vscode.TestItem, leaf: TreeLeaf, cases: CaseChild[]): void {
    for (const id of [...this.cases.keys()]) if (this.cases.get(id)?.opKey === leaf.key) this.cases.delete(id);
    this.failuresByOp.set(leaf.key, cases.map((c) => c.failure));
    const children: vscode.TestItem[] = [];
    for (const c of cases) {
      const id = caseKey(leaf.key, c.seed);
      const child = item.children.get(id) ?? this.controller.createTestItem(id, c.label, item.uri);
      child.label = c.label;
      child.description = c.description;
      child.range = item.range;
      child.sortText = String(children.length).padStart(4, "0");
      this.cases.set(id, { item: child, opKey: leaf.key, child: c });
      children.push(child);
    }
    item.children.replace(children);
    for (const child of children) {
      const c = this.cases.get(child.id);
      if (c) run.failed(child, [this.testMessage(leaf, c.child.message)]);
    }
  }

  /** The op, workspace and seed a Debug request means: a case item's seed, or an op's first failing case. */
  caseTarget(item: vscode.TestItem): { leaf: TreeLeaf; seed?: number } | undefined {
    const c = parseCaseKey(item.id);
    if (c) {
      const leaf = this.leaves.get(c.opKey)?.leaf;
      return leaf ? { leaf, seed: c.seed } : undefined;
    }
    const leaf = this.leaves.get(item.id)?.leaf;
    if (!leaf) return undefined;
    const first = (this.failuresByOp.get(leaf.key) ?? []).find((f) => f.seed !== undefined);
    return { leaf, seed: first?.seed };
  }

  private report(run: vscode.TestRun, item: vscode.TestItem, leaf: TreeLeaf, o: Outcome, duration: number | undefined): void {
    const messages = o.messages.map((m) => this.testMessage(leaf, m));
    switch (o.type) {
      case "enqueued":
        run.enqueued(item);
        break;
      case "started":
        run.started(item);
        break;
      case "passed":
        run.passed(item, duration);
        break;
      case "failed":
        run.failed(item, messages, duration);
        break;
      case "errored":
        run.errored(item, messages, duration);
        break;
      case "skipped":
        run.skipped(item);
        break;
    }
    if (o.cases !== undefined && leaf.kind === "op") this.reportCases(run, item, leaf, o.cases);
    if (o.output) {
      // in the Test Results terminal only: the failure messages already show at the op's source
      run.appendOutput(o.output.replace(/\r?\n/g, "\r\n") + "\r\n", undefined, item);
    }
  }
}
