/**
 * gpuemu-ls for VS Code: the language client, the Test Explorer, commands, a status-bar item and
 * the server log. The server is `gpuemu-ls` (Python, pygls): see docs/lsp.md.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ParameterStructures,
  RequestType,
  ServerOptions,
  State,
} from "vscode-languageclient/node";
import {
  DiscoverResult,
  FailureTarget,
  OpState,
  RunOpsResult,
  TreeLeaf,
  failureTarget,
  serverSettings,
  statusSummary,
} from "./model";
import { ResolvedServer, resolveServer } from "./serverPath";
import { GpuemuTests, RunMode } from "./testing";

const DISCOVER = "gpuemu/discoverOps";
const RUN_OPS = "gpuemu/runOps";
const OP_STATE = "gpuemu/opState";

interface RunOpsParams {
  workspace?: string;
  ids?: string[];
  mode?: string;
  iterations?: number;
}

/** `gpuemu/runOps {workspace?, ids?, mode?, iterations?}` (docs/lsp.md). */
const RunOpsRequest = new RequestType<RunOpsParams, RunOpsResult, void>(RUN_OPS, ParameterStructures.byName);

/** Server commands (executeCommandProvider) that this extension registers itself, with pickers. */
const OWNED_COMMANDS = new Set([
  "gpuemu.runAll",
  "gpuemu.runOp",
  "gpuemu.runQuick",
  "gpuemu.runThorough",
  "gpuemu.reproduce",
  "gpuemu.minimize",
  "gpuemu.calibrate",
]);

const STATUS_ICON: Record<string, string> = {
  passed: "$(pass)",
  failed: "$(error)",
  error: "$(error)",
  errored: "$(error)",
  not_run: "$(warning)",
  running: "$(sync~spin)",
  queued: "$(clock)",
  cancelled: "$(circle-slash)",
  unknown: "$(circle-outline)",
};

export interface GpuemuApi {
  /** For tests: the running client (if any) and the latest state of each op. */
  client(): LanguageClient | undefined;
  states(): ReadonlyMap<string, string>;
  discover(): Promise<void>;
}

class GpuemuExtension implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;
  private readonly output: vscode.LogOutputChannel;
  private readonly trace: vscode.LogOutputChannel;
  private readonly status: vscode.StatusBarItem;
  readonly tests: GpuemuTests;
  private readonly disposables: vscode.Disposable[] = [];
  private discoverTimer: ReturnType<typeof setTimeout> | undefined;

  constructor() {
    this.output = vscode.window.createOutputChannel("gpuemu-ls", { log: true });
    this.trace = vscode.window.createOutputChannel("gpuemu-ls trace", { log: true });
    this.status = vscode.window.createStatusBarItem("gpuemu.status", vscode.StatusBarAlignment.Left, 10);
    this.status.name = "gpuemu-ls";
    this.status.command = "gpuemu.showFailures";
    this.tests = new GpuemuTests({
      runOps: (params, token) => this.runOps(params, token),
      trusted: () => vscode.workspace.isTrusted,
      log: (m) => this.output.info(m),
    });
    this.disposables.push(
      this.output,
      this.trace,
      this.status,
      this.tests,
      this.tests.onDidChange(() => this.updateStatus()),
      this.tests.onNeedDiscover(() => this.scheduleDiscover()),
    );
    this.tests.controller.refreshHandler = () => this.discover();
  }

  dispose(): void {
    void this.stopClient();
    for (const d of this.disposables) d.dispose();
  }

  // --- client ---------------------------------------------------------------------------------
  private folders(): string[] {
    return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath);
  }

  private settings(scope?: vscode.Uri): Record<string, unknown> {
    const cfg = vscode.workspace.getConfiguration("gpuemu", scope);
    return serverSettings((key) => cfg.get(key), vscode.workspace.isTrusted);
  }

  private resolve(): ResolvedServer {
    const cfg = vscode.workspace.getConfiguration("gpuemu");
    return resolveServer({
      configured: cfg.get<string>("server.command") ?? "",
      args: cfg.get<string[]>("server.args") ?? [],
      folders: this.folders(),
      trusted: vscode.workspace.isTrusted,
      platform: process.platform,
      home: os.homedir(),
      exists: (f) => {
        try {
          return fs.statSync(f).isFile();
        } catch {
          return false;
        }
      },
    });
  }

  async startClient(): Promise<void> {
    if (this.starting) return this.starting;
    this.starting = this.doStart().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async doStart(): Promise<void> {
    const server = this.resolve();
    this.output.info(
      `starting ${server.command} ${server.args.join(" ")} (from ${server.source}; workspace ${
        vscode.workspace.isTrusted ? "trusted" : "NOT trusted: configuration diagnostics only"
      })`,
    );
    // No `transport`: vscode-languageclient would append --stdio (the server speaks stdio anyway).
    const serverOptions: ServerOptions = {
      command: server.command,
      args: server.args,
      options: { cwd: server.cwd, env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "file", language: "cuda-cpp" },
        { scheme: "file", language: "ptx" },
        { scheme: "file", pattern: "**/gpuemu.toml" },
      ],
      initializationOptions: this.settings(),
      outputChannel: this.output,
      traceOutputChannel: this.trace,
      diagnosticCollectionName: "gpuemu",
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => ({ action: CloseAction.DoNotRestart, message: "gpuemu-ls stopped; see the gpuemu-ls output" }),
      },
      middleware: {
        workspace: {
          // the server asks for section "gpuemu": answer its options only (server.* is ours)
          configuration: async (params, token, next) => {
            const answer = await next(params, token);
            if (!Array.isArray(answer)) return answer;
            return answer.map((value, i) => {
              const item = params.items[i];
              if (item?.section !== "gpuemu") return value;
              return this.settings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined);
            });
          },
        },
      },
    };
    const client = new LanguageClient("gpuemu", "gpuemu-ls", serverOptions, clientOptions);
    // The server advertises gpuemu.reproduce, gpuemu.runOp, ... as executeCommand commands. The
    // extension registers those command ids itself (with pickers when called without arguments),
    // so the client must not register them a second time.
    const feature = client.getFeature(ExecuteCommandRequest.method);
    const register = feature.register.bind(feature);
    feature.register = (data) =>
      register({
        ...data,
        registerOptions: {
          ...data.registerOptions,
          commands: (data.registerOptions.commands ?? []).filter((c) => !OWNED_COMMANDS.has(c)),
        },
      });
    client.onNotification(OP_STATE, (s: OpState) => this.tests.handleState(s));
    client.onDidChangeState((e) => {
      this.updateStatus();
      if (e.newState === State.Stopped) this.output.warn("gpuemu-ls stopped");
    });
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      const msg = `gpuemu-ls could not start (${server.command}): ${err instanceof Error ? err.message : String(err)}`;
      this.output.error(msg);
      this.updateStatus();
      void vscode.window.showErrorMessage(msg, "Open Settings", "Show Log").then((pick) => {
        if (pick === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "gpuemu.server");
        if (pick === "Show Log") this.output.show();
      });
      return;
    }
    this.updateStatus();
    await this.discover();
  }

  async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(5000);
      } catch (err) {
        this.output.warn(`stopping gpuemu-ls: ${String(err)}`);
      }
    }
  }

  async restartClient(): Promise<void> {
    await this.stopClient();
    await this.startClient();
  }

  private running(): LanguageClient | undefined {
    return this.client && this.client.isRunning() ? this.client : undefined;
  }

  configurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (!e.affectsConfiguration("gpuemu")) return;
    if (e.affectsConfiguration("gpuemu.server")) {
      void this.restartClient();
      return;
    }
    const client = this.running();
    if (client) {
      void client.sendNotification(DidChangeConfigurationNotification.type, { settings: { gpuemu: this.settings() } });
    }
  }

  // --- Test Explorer messages ---------------------------------------------------------------
  async discover(): Promise<void> {
    const client = this.running();
    if (!client) return;
    try {
      const result = await client.sendRequest<DiscoverResult>(DISCOVER, {});
      const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => ({ name: f.name, path: f.uri.fsPath }));
      this.tests.applyDiscover(result, folders);
    } catch (err) {
      this.output.error(`${DISCOVER} failed: ${String(err)}`);
    }
  }

  scheduleDiscover(delay = 400): void {
    if (this.discoverTimer) clearTimeout(this.discoverTimer);
    this.discoverTimer = setTimeout(() => {
      this.discoverTimer = undefined;
      void this.discover();
    }, delay);
  }

  private async runOps(params: RunOpsParams, token: vscode.CancellationToken): Promise<RunOpsResult> {
    const client = this.running();
    if (!client) throw new Error("gpuemu-ls is not running");
    return client.sendRequest(RunOpsRequest, params, token);
  }

  // --- status bar ----------------------------------------------------------------------------------
  private updateStatus(): void {
    const state = this.client?.state;
    const serverState =
      this.client === undefined ? "stopped" : state === State.Running ? "running" : state === State.Starting ? "starting" : "stopped";
    const s = statusSummary(this.tests.states.values(), { trusted: vscode.workspace.isTrusted, serverState });
    this.status.text = s.text;
    this.status.tooltip = s.tooltip;
    this.status.command = serverState === "running" ? "gpuemu.showFailures" : "gpuemu.showOutput";
    this.status.backgroundColor = s.failed > 0 && !s.running ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
    this.status.show();
  }

  // --- commands ------------------------------------------------------------------------------------
  private requireTrust(): boolean {
    if (vscode.workspace.isTrusted) return true;
    void vscode.window
      .showWarningMessage("This workspace is not trusted: gpuemu-ls runs no workspace code.", "Manage Workspace Trust")
      .then((pick) => {
        if (pick) void vscode.commands.executeCommand("workbench.trust.manage");
      });
    return false;
  }

  private async executeServerCommand(command: string, args: unknown): Promise<unknown> {
    const client = this.running();
    if (!client) {
      void vscode.window.showErrorMessage("gpuemu-ls is not running (see the gpuemu-ls output).");
      return undefined;
    }
    try {
      return await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [args] });
    } catch (err) {
      void vscode.window.showErrorMessage(`${command} failed: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
  }

  private async runItems(leaves: TreeLeaf[] | undefined, mode: RunMode): Promise<void> {
    if (!this.requireTrust()) return;
    if (!this.running()) {
      void vscode.window.showErrorMessage("gpuemu-ls is not running (see the gpuemu-ls output).");
      return;
    }
    const items = leaves?.map((l) => this.tests.controller.items.get(`workspace:${l.workspace}`)?.children.get(l.key));
    const include = items?.filter((i): i is vscode.TestItem => i !== undefined);
    const profile = mode === "quick" ? this.tests.quickProfile : this.tests.thoroughProfile;
    const request = new vscode.TestRunRequest(include, undefined, profile);
    const cts = new vscode.CancellationTokenSource();
    try {
      await this.tests.runHandler(request, cts.token, mode);
    } finally {
      cts.dispose();
    }
  }

  private leavesOf(args: unknown): TreeLeaf[] | undefined {
    const a = (Array.isArray(args) ? args[0] : args) as { workspace?: string } | undefined;
    if (a && typeof a.workspace === "string") return this.tests.allLeaves().filter((l) => l.workspace === a.workspace);
    return undefined;
  }

  private mode(): RunMode {
    return vscode.workspace.getConfiguration("gpuemu").get<string>("mode") === "thorough" ? "thorough" : "quick";
  }

  private async pickOp(title: string, kinds: ("op" | "kernel")[] = ["op", "kernel"]): Promise<TreeLeaf | undefined> {
    await this.discover();
    const leaves = this.tests.allLeaves().filter((l) => kinds.includes(l.kind));
    if (!leaves.length) {
      void vscode.window.showInformationMessage("gpuemu: no ops found (is there a gpuemu.toml in this workspace?)");
      return undefined;
    }
    const picked = await vscode.window.showQuickPick(
      leaves.map((l) => {
        const state = this.tests.states.get(l.key) ?? l.status;
        return {
          label: `${STATUS_ICON[state] ?? STATUS_ICON.unknown} ${l.label}`,
          description: `${l.kind === "kernel" ? "kernel, " : ""}${state.replace("_", " ")}`,
          detail: l.message || undefined,
          leaf: l,
        };
      }),
      { title, placeHolder: "op or kernel", matchOnDescription: true },
    );
    return picked?.leaf;
  }

  private gpuemuDiagnostics(): { uri: vscode.Uri; diagnostic: vscode.Diagnostic }[] {
    const out: { uri: vscode.Uri; diagnostic: vscode.Diagnostic }[] = [];
    const collect = (uri: vscode.Uri, diags: readonly vscode.Diagnostic[]) => {
      for (const d of diags) if (d.source === "gpuemu") out.push({ uri, diagnostic: d });
    };
    const own = this.client?.diagnostics;
    if (own) own.forEach((uri, diags) => collect(uri, diags));
    else for (const [uri, diags] of vscode.languages.getDiagnostics()) collect(uri, diags);
    out.sort((a, b) => a.diagnostic.severity - b.diagnostic.severity || a.uri.toString().localeCompare(b.uri.toString()));
    return out;
  }

  private static dataOf(d: vscode.Diagnostic): unknown {
    return (d as vscode.Diagnostic & { data?: unknown }).data;
  }

  /** A failure for reproduce/minimize: from the command's arguments, the diagnostic under the cursor, or a pick. */
  private async failureFor(args: unknown, title: string): Promise<FailureTarget | undefined> {
    const a = (Array.isArray(args) ? args[0] : args) as Partial<FailureTarget> | undefined;
    if (a && typeof a.op === "string" && typeof a.seed === "number") return a as FailureTarget;
    const editor = vscode.window.activeTextEditor;
    if (editor) {
      const pos = editor.selection.active;
      const here = this.gpuemuDiagnostics().filter(
        (d) => d.uri.toString() === editor.document.uri.toString() && d.diagnostic.range.contains(pos),
      );
      for (const d of here) {
        const t = failureTarget({ source: d.diagnostic.source, message: d.diagnostic.message, data: GpuemuExtension.dataOf(d.diagnostic) });
        if (t) return t;
      }
    }
    const seen = new Set<string>();
    const picks: (vscode.QuickPickItem & { target: FailureTarget })[] = [];
    for (const { uri, diagnostic } of this.gpuemuDiagnostics()) {
      const t = failureTarget({ source: diagnostic.source, message: diagnostic.message, data: GpuemuExtension.dataOf(diagnostic) });
      if (!t || seen.has(`${t.workspace}|${t.op}|${t.seed}`)) continue;
      seen.add(`${t.workspace}|${t.op}|${t.seed}`);
      picks.push({
        label: `$(error) ${t.op}`,
        description: `seed ${t.seed} · ${vscode.workspace.asRelativePath(uri)}:${diagnostic.range.start.line + 1}`,
        detail: diagnostic.message.split("\n")[0],
        target: t,
      });
    }
    if (!picks.length) {
      void vscode.window.showInformationMessage("gpuemu: no failing cases to choose from.");
      return undefined;
    }
    return (await vscode.window.showQuickPick(picks, { title, matchOnDetail: true }))?.target;
  }

  private async reproduceOrMinimize(command: "gpuemu.reproduce" | "gpuemu.minimize", args: unknown): Promise<unknown> {
    if (!this.requireTrust()) return undefined;
    const title = command === "gpuemu.reproduce" ? "gpuemu: reproduce which failure?" : "gpuemu: minimize which failure?";
    const t = await this.failureFor(args, title);
    if (!t) return undefined;
    const workspace = t.workspace ?? this.tests.allLeaves().find((l) => l.label === t.op)?.workspace;
    return this.executeServerCommand(command, { workspace, op: t.op, seed: t.seed });
  }

  private async showFailures(): Promise<void> {
    const diags = this.gpuemuDiagnostics();
    if (!diags.length) {
      void vscode.window.showInformationMessage("gpuemu: no failures.");
      return;
    }
    const sev = (s: vscode.DiagnosticSeverity) =>
      s === vscode.DiagnosticSeverity.Error ? "$(error)" : s === vscode.DiagnosticSeverity.Warning ? "$(warning)" : "$(info)";
    const picked = await vscode.window.showQuickPick(
      diags.map(({ uri, diagnostic }) => ({
        label: `${sev(diagnostic.severity)} ${diagnostic.message.split("\n")[0]}`,
        description: `${vscode.workspace.asRelativePath(uri)}:${diagnostic.range.start.line + 1}`,
        detail: typeof diagnostic.code === "object" ? String(diagnostic.code.value) : diagnostic.code !== undefined ? String(diagnostic.code) : undefined,
        uri,
        diagnostic,
      })),
      { title: "gpuemu: failures", matchOnDescription: true, matchOnDetail: true },
    );
    if (picked) {
      await vscode.window.showTextDocument(picked.uri, { selection: picked.diagnostic.range, preview: false });
    }
  }

  registerCommands(): void {
    const reg = (id: string, fn: (...args: unknown[]) => unknown) =>
      this.disposables.push(vscode.commands.registerCommand(id, fn));
    reg("gpuemu.runAll", (...args) => this.runItems(this.leavesOf(args), this.mode()));
    reg("gpuemu.runQuick", (...args) => this.runItems(this.leavesOf(args), "quick"));
    reg("gpuemu.runThorough", (...args) => this.runItems(this.leavesOf(args), "thorough"));
    reg("gpuemu.runOp", async (...args) => {
      const a = args[0] as { workspace?: string; op?: string } | undefined;
      let leaf: TreeLeaf | undefined;
      if (a && typeof a.op === "string") {
        const id = a.op.includes(":") ? a.op : `op:${a.op}`;
        leaf = this.tests.allLeaves().find((l) => l.id === id && (!a.workspace || l.workspace === a.workspace));
        if (!leaf) {
          await this.discover();
          leaf = this.tests.allLeaves().find((l) => l.id === id && (!a.workspace || l.workspace === a.workspace));
        }
      } else {
        leaf = await this.pickOp("gpuemu: run which op?");
      }
      if (leaf) await this.runItems([leaf], this.mode());
    });
    reg("gpuemu.reproduce", (...args) => this.reproduceOrMinimize("gpuemu.reproduce", args[0]));
    reg("gpuemu.minimize", (...args) => this.reproduceOrMinimize("gpuemu.minimize", args[0]));
    reg("gpuemu.calibrate", async (...args) => {
      if (!this.requireTrust()) return undefined;
      const a = args[0] as { workspace?: string; op?: string } | undefined;
      if (a && typeof a.op === "string") return this.executeServerCommand("gpuemu.calibrate", a);
      const leaf = await this.pickOp("gpuemu: calibrate the tolerances of which (known-good) op?", ["op"]);
      return leaf ? this.executeServerCommand("gpuemu.calibrate", { workspace: leaf.workspace, op: leaf.label }) : undefined;
    });
    reg("gpuemu.showFailures", () => this.showFailures());
    reg("gpuemu.showOutput", () => this.output.show());
    reg("gpuemu.restartServer", () => this.restartClient());
  }

  registerEvents(): void {
    this.disposables.push(
      vscode.workspace.onDidChangeConfiguration((e) => this.configurationChanged(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => {
        this.output.info("workspace trust granted: restarting gpuemu-ls with trusted = true");
        void this.restartClient();
      }),
      vscode.workspace.onDidChangeWorkspaceFolders(() => this.scheduleDiscover(1000)),
    );
    const watcher = vscode.workspace.createFileSystemWatcher("**/gpuemu.toml");
    this.disposables.push(
      watcher,
      watcher.onDidChange(() => this.scheduleDiscover()),
      watcher.onDidCreate(() => this.scheduleDiscover()),
      watcher.onDidDelete(() => this.scheduleDiscover()),
      vscode.workspace.onDidSaveTextDocument((doc) => {
        if (doc.uri.path.endsWith("/gpuemu.toml")) this.scheduleDiscover();
      }),
    );
  }

  api(): GpuemuApi {
    return {
      client: () => this.client,
      states: () => this.tests.states,
      discover: () => this.discover(),
    };
  }
}

let extension: GpuemuExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<GpuemuApi> {
  extension = new GpuemuExtension();
  context.subscriptions.push(extension);
  extension.registerCommands();
  extension.registerEvents();
  void vscode.commands.executeCommand("setContext", "gpuemu.active", true);
  void extension.startClient();
  return extension.api();
}

export async function deactivate(): Promise<void> {
  if (extension) await extension.stopClient();
}
