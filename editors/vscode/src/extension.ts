/**
 * gpuemu-ls for VS Code: the language client, the Test Explorer, commands, a status-bar item and
 * the server log. The server is `gpuemu-ls` (Python, pygls): see docs/lsp.md.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ParameterStructures,
  MessageType,
  RequestType,
  ServerOptions,
  ShowMessageNotification,
  State,
  WorkDoneProgress,
  WorkDoneProgressCancelNotification,
} from "vscode-languageclient/node";
import {
  DiscoverResult,
  FailureTarget,
  OpState,
  ReproduceResult,
  RunOpsResult,
  RunWave,
  TreeLeaf,
  clientLogLevel,
  failureTarget,
  isCommandResultMessage,
  parseCaseKey,
  reproLines,
  reproduceSummary,
  serverSettings,
  shapesLabel,
  statusSummary,
} from "./model";
import { openReport } from "./report";
import { ResolvedServer, findCheckout, installCommand, missingServerMessage, resolveServer } from "./serverPath";
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
  edge: "$(warning)",
  not_judged: "$(question)",
  running: "$(sync~spin)",
  queued: "$(clock)",
  cancelled: "$(circle-slash)",
  unknown: "$(circle-outline)",
};

/** The part of the Python extension's API (ms-python.python) used here: the selected interpreter. */
interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string };
    resolveEnvironment(env: { id: string; path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
}

const PYTHON_EXTENSION = "ms-python.python";
const DEBUGPY_EXTENSION = "ms-python.debugpy";

function fileExists(f: string): boolean {
  try {
    return fs.statSync(f).isFile();
  } catch {
    return false;
  }
}

function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`;
}

export interface GpuemuApi {
  /** For tests: the running client (if any) and the latest state of each op. */
  client(): LanguageClient | undefined;
  states(): ReadonlyMap<string, string>;
  discover(): Promise<void>;
}

/**
 * Notifications that withdraw themselves once they no longer apply. VS Code closes no message toast on an
 * extension's behalf, but it does close a progress notification when its task ends: a notice is one, its actions
 * links in its text (`[Install](command:...)`), shown once per key and text, and closed by `withdraw` or by the
 * next notice of its key (or the user's Cancel).
 */
class Notices implements vscode.Disposable {
  private readonly open = new Map<string, { text: string; close: () => void }>();

  show(key: string, text: string): void {
    const prev = this.open.get(key);
    if (prev?.text === text) return;
    prev?.close();
    let close: () => void = () => undefined;
    const closed = new Promise<void>((resolve) => (close = resolve));
    const entry = { text, close };
    this.open.set(key, entry);
    void vscode.window
      .withProgress({ location: vscode.ProgressLocation.Notification, title: text, cancellable: true }, (_progress, token) => {
        token.onCancellationRequested(() => entry.close());
        return closed;
      })
      .then(() => {
        if (this.open.get(key) === entry) this.open.delete(key);
      });
  }

  withdraw(key: string): void {
    this.open.get(key)?.close();
    this.open.delete(key);
  }

  dispose(): void {
    for (const key of [...this.open.keys()]) this.withdraw(key);
  }
}

/** A `command:` link for a notice's text. */
function commandLink(label: string, command: string, args?: unknown[]): string {
  return `[${label}](command:${command}${args ? `?${encodeURIComponent(JSON.stringify(args))}` : ""})`;
}

/** The output channel as the language client writes to it, each of its "errors" at the level it deserves
 * (clientLogLevel): a routine restart or a Python warning is no error in the log. */
function clientChannel(out: vscode.LogOutputChannel, stopping: () => boolean): vscode.LogOutputChannel {
  return new Proxy(out, {
    get(target, prop, receiver) {
      if (prop === "error") {
        return (message: string | Error, ...args: unknown[]) => {
          const text = typeof message === "string" ? message : message.message;
          const level = clientLogLevel(text, stopping());
          if (level === "error") target.error(message, ...args);
          else target[level](text, ...args);
        };
      }
      const value = Reflect.get(target, prop, receiver) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
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
  /** The server last resolved (its Python runs reproductions and installs). */
  private server: ResolvedServer | undefined;
  private interpreter: string | undefined;
  /** Reproduce/minimize requests in flight: their result messages are shown by the extension, once. */
  private commandsInFlight = 0;
  private readonly notices = new Notices();
  /** Clients this extension stopped (a restart, a settings change): their closing is routine in the log. */
  private readonly stopped = new WeakSet<LanguageClient>();
  /** The run in progress, so the status bar counts it up. */
  private readonly wave = new RunWave();
  private pythonListener: vscode.Disposable | undefined;

  /** The extension's install folder (where the bundled variant keeps `bundled/libs`). */
  constructor(private readonly extensionPath: string) {
    this.output = vscode.window.createOutputChannel("gpuemu-ls", { log: true });
    this.trace = vscode.window.createOutputChannel("gpuemu-ls trace", { log: true });
    this.status = vscode.window.createStatusBarItem("gpuemu.status", vscode.StatusBarAlignment.Left, 10);
    this.status.name = "gpuemu-ls";
    this.status.command = "gpuemu.showFailures";
    this.tests = new GpuemuTests({
      runOps: (params, token) => this.runOps(params, token),
      trusted: () => vscode.workspace.isTrusted,
      log: (m) => this.output.info(m),
      debugCase: (target) => this.debugCase(target),
      validatesOnSave: () => vscode.workspace.getConfiguration("gpuemu").get<boolean>("onSave") !== false,
    });
    this.disposables.push(
      this.notices,
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

  /** The Python extension's selected interpreter (its executable), when that extension is installed. */
  private async pythonInterpreter(): Promise<string | undefined> {
    const ext = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION);
    if (!ext) return undefined;
    try {
      const api = ext.isActive ? ext.exports : await ext.activate();
      const envs = api?.environments;
      if (!envs) return undefined;
      if (!this.pythonListener && envs.onDidChangeActiveEnvironmentPath) {
        this.pythonListener = envs.onDidChangeActiveEnvironmentPath(() => {
          this.output.info("the selected Python interpreter changed: restarting gpuemu-ls");
          void this.restartClient();
        });
        this.disposables.push(this.pythonListener);
      }
      const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
      const active = envs.getActiveEnvironmentPath(folder);
      const env = await envs.resolveEnvironment(active);
      return env?.executable?.uri?.fsPath ?? active?.path;
    } catch (err) {
      this.output.warn(`could not ask the Python extension for its interpreter: ${String(err)}`);
      return undefined;
    }
  }

  private async resolve(): Promise<ResolvedServer> {
    const cfg = vscode.workspace.getConfiguration("gpuemu");
    this.interpreter = vscode.workspace.isTrusted ? await this.pythonInterpreter() : undefined;
    return resolveServer({
      configured: cfg.get<string>("server.command") ?? "",
      args: cfg.get<string[]>("server.args") ?? [],
      folders: this.folders(),
      trusted: vscode.workspace.isTrusted,
      platform: process.platform,
      home: os.homedir(),
      exists: fileExists,
      interpreter: this.interpreter,
      pathEnv: process.env.PATH,
      bundledLibs: this.bundledLibs(),
    });
  }

  /** `bundled/libs` of the bundled variant (built by scripts/build-bundled.sh), when this extension has it. */
  private bundledLibs(): string | undefined {
    const libs = path.join(this.extensionPath, "bundled", "libs");
    return fileExists(path.join(libs, "gpuemu_ls", "__init__.py")) ? libs : undefined;
  }

  /** The Python that runs reproductions in a terminal and takes `pip install`. */
  private python(): string {
    if (this.interpreter) return this.interpreter;
    if (this.server?.python) return this.server.python;
    for (const f of this.folders()) {
      const venv = process.platform === "win32" ? path.join(f, ".venv", "Scripts", "python.exe") : path.join(f, ".venv", "bin", "python");
      if (vscode.workspace.isTrusted && fileExists(venv)) return venv;
    }
    return process.platform === "win32" ? "python" : "python3";
  }

  /** One notice for a server that is not installed, with Install (pip into the interpreter), Settings and Log;
   * withdrawn once a server starts (the setting fixed, the install done). */
  private reportMissing(server: ResolvedServer): void {
    const msg = missingServerMessage(server, this.interpreter);
    this.output.error(`${msg} Not starting it.`);
    this.updateStatus("not installed");
    const python = this.python();
    const actions = [
      commandLink("Install", "gpuemu.installServer"),
      commandLink("Open Settings", "workbench.action.openSettings", ["gpuemu.server"]),
      commandLink("Show Log", "gpuemu.showOutput"),
    ];
    this.notices.show("server", `${msg} Install it into ${python}? ${actions.join(" · ")}`);
  }

  /** `python -m pip install <checkout>` into the selected interpreter, as a task; restarts the server when it succeeds. */
  async installServer(): Promise<void> {
    const python = this.python();
    const configured = vscode.workspace.getConfiguration("gpuemu").get<string>("server.installSource") ?? "";
    const read = (f: string) => {
      try {
        return fs.readFileSync(f, "utf8");
      } catch {
        return undefined;
      }
    };
    let source = configured.trim() || this.folders().map((f) => findCheckout(f, read, process.platform)).find((c) => c !== undefined);
    if (!source) {
      const picked = await vscode.window.showOpenDialog({
        title: "gpuemu-ls is not on PyPI yet: choose your gpuemu-ls checkout (or a built wheel) to install",
        canSelectFolders: true,
        canSelectFiles: true,
        filters: { "Python wheel": ["whl"] },
        openLabel: "Install gpuemu-ls from here",
      });
      source = picked?.[0]?.fsPath;
      if (!source) return;
    }
    const cmd = installCommand(python, source);
    this.output.info(`installing gpuemu-ls: ${cmd.command} ${cmd.args.join(" ")}`);
    this.notices.show("server", `Installing gpuemu-ls into ${python} (the terminal shows pip)...`);
    const task = new vscode.Task(
      { type: "gpuemu", task: "install-server" },
      vscode.TaskScope.Workspace,
      "install gpuemu-ls",
      "gpuemu",
      new vscode.ProcessExecution(cmd.command, cmd.args),
    );
    const execution = await vscode.tasks.executeTask(task);
    const sub = vscode.tasks.onDidEndTaskProcess((e) => {
      if (e.execution !== execution) return;
      sub.dispose();
      if (e.exitCode === 0) {
        this.output.info(`gpuemu-ls installed into ${python}: starting it`);
        this.notices.show("server", `gpuemu-ls installed into ${python}: starting it...`);
        void this.restartClient();
      } else {
        this.notices.withdraw("server");
        void vscode.window.showErrorMessage(`pip install of gpuemu-ls into ${python} failed (exit ${e.exitCode}); see the terminal.`);
      }
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
    const server = await this.resolve();
    this.server = server;
    if (server.missing) {
      this.reportMissing(server);
      return;
    }
    this.notices.withdraw("server"); // "not installed" or "installing" no longer applies
    this.output.info(
      `starting ${server.command} ${server.args.join(" ")} (from ${server.source}; workspace ${
        vscode.workspace.isTrusted ? "trusted" : "NOT trusted: configuration diagnostics only"
      })`,
    );
    // No `transport`: vscode-languageclient would append --stdio (the server speaks stdio anyway).
    const serverOptions: ServerOptions = {
      command: server.command,
      args: server.args,
      options: { cwd: server.cwd, env: { ...process.env, PYTHONUNBUFFERED: "1", ...(server.env ?? {}) } },
    };
    let self: LanguageClient | undefined; // the client below: its log channel asks whether we are stopping it
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "file", language: "cuda-cpp" },
        { scheme: "file", language: "ptx" },
        { scheme: "file", pattern: "**/gpuemu.toml" },
      ],
      initializationOptions: this.settings(),
      outputChannel: clientChannel(this.output, () => self !== undefined && this.stopped.has(self)),
      traceOutputChannel: this.trace,
      diagnosticCollectionName: "gpuemu",
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => ({ action: CloseAction.DoNotRestart, message: "gpuemu-ls stopped; see the gpuemu-ls output" }),
      },
      middleware: {
        window: {
          // a reproduction opens at its verdict line in a real (not preview) tab
          showDocument: async (params, token, next) => {
            const uri = vscode.Uri.parse(params.uri);
            if (uri.scheme === "file" && /[\\/]\.gpuemu[\\/]repro[\\/][^\\/]+\.py$/.test(uri.fsPath)) {
              await this.openRepro(uri.fsPath);
              return { success: true };
            }
            return next(params, token);
          },
        },
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
    self = client;
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
    // window/showMessage as the client shows it, except the results of reproduce/minimize requests
    // this extension made: it shows those itself, once, with its own buttons
    client.onNotification(ShowMessageNotification.type, (m) => {
      if (this.commandsInFlight > 0 && isCommandResultMessage(m.message)) {
        this.output.info(m.message);
        return;
      }
      const show =
        m.type === MessageType.Error
          ? vscode.window.showErrorMessage
          : m.type === MessageType.Warning
            ? vscode.window.showWarningMessage
            : vscode.window.showInformationMessage;
      void show(m.message);
    });
    client.onDidChangeState((e) => {
      this.updateStatus();
      if (e.newState === State.Stopped) {
        if (this.stopped.has(client)) this.output.info("gpuemu-ls stopped");
        else this.output.warn("gpuemu-ls stopped");
      }
    });
    this.client = client;
    this.updateStatus();
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
      this.stopped.add(client);
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
      this.output.info("gpuemu.server settings changed: restarting gpuemu-ls");
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
  private updateStatus(override?: string): void {
    const state = this.client?.state;
    const serverState =
      override ??
      (this.client === undefined ? "stopped" : state === State.Running ? "running" : state === State.Starting ? "starting" : "stopped");
    const kernels = this.tests.allLeaves().some((l) => l.kind === "kernel");
    const s = statusSummary(this.tests.states.values(), {
      trusted: vscode.workspace.isTrusted,
      serverState,
      noun: kernels ? "ops and kernels" : "ops",
      wave: this.wave.update(this.tests.states),
    });
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

  /**
   * Calibrate an op on the server, its progress a notification with Cancel ("float32: 40 of 100 cases") that
   * closes when the cases are done; the server then asks before applying a tolerance, or says in one warning why
   * it refuses (a bug, not rounding).
   */
  private async calibrate(args: { workspace?: string; op: string }): Promise<unknown> {
    const client = this.running();
    if (!client) {
      void vscode.window.showErrorMessage("gpuemu-ls is not running (see the gpuemu-ls output).");
      return undefined;
    }
    const token = `gpuemu-calibrate-${Date.now()}-${Math.random().toString(36).slice(2)}`;
    let ended: () => void = () => undefined;
    const cases = new Promise<void>((resolve) => (ended = resolve));
    const request = client.sendRequest(ExecuteCommandRequest.type, {
      command: "gpuemu.calibrate",
      arguments: [{ ...args, workDoneToken: token }],
    });
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `gpuemu: calibrating ${args.op}`, cancellable: true },
      async (progress, cancel) => {
        let shown = 0;
        const sub = client.onProgress(WorkDoneProgress.type, token, (v) => {
          if (v.kind === "end") return ended();
          const pct = v.percentage;
          progress.report({ message: v.message, increment: typeof pct === "number" ? pct - shown : undefined });
          if (typeof pct === "number") shown = pct;
        });
        cancel.onCancellationRequested(() => void client.sendNotification(WorkDoneProgressCancelNotification.type, { token }));
        try {
          await Promise.race([cases, request.then(() => undefined, () => undefined)]);
        } finally {
          sub.dispose();
        }
      },
    );
    try {
      return await request;
    } catch (err) {
      void vscode.window.showErrorMessage(`gpuemu.calibrate failed: ${err instanceof Error ? err.message : String(err)}`);
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
    if (command === "gpuemu.minimize") {
      this.commandsInFlight += 1;
      try {
        const out = (await this.executeServerCommand(command, { workspace, op: t.op, seed: t.seed })) as
          | { minimized?: { shapes?: Record<string, number[]> }; trials?: number; repro?: string; error?: string }
          | undefined;
        if (out && !out.error && out.minimized) {
          const text = `gpuemu: ${t.op} seed ${t.seed} minimized to ${shapesLabel(out.minimized.shapes)}${out.trials ? ` in ${out.trials} trials` : ""}`;
          void vscode.window.showInformationMessage(text, "Reproduce Minimized Case").then((pick) => {
            if (pick) void this.reproduce({ workspace, op: t.op, seed: t.seed, minimized: true });
          });
        }
        return out;
      } finally {
        this.commandsInFlight -= 1;
      }
    }
    let minimized = t.minimized;
    if (minimized === undefined && t.minimizedShapes && !(Array.isArray(args) ? args[0] : args)) {
      // the diagnostic has a minimized case: offer it next to the original
      const pick = await vscode.window.showQuickPick(
        [
          { label: `$(debug-restart) Minimized case`, description: shapesLabel(t.minimizedShapes), minimized: true },
          { label: `$(debug-alt) Original case`, description: `seed ${t.seed}`, minimized: false },
        ],
        { title: `gpuemu: reproduce ${t.op} seed ${t.seed}: which case?` },
      );
      if (!pick) return undefined;
      minimized = pick.minimized;
    }
    return this.reproduce({ workspace, op: t.op, seed: t.seed, minimized });
  }

  /** Reproduce a case: the server writes .gpuemu/repro/<op>_<seed>.py; it opens at its verdict line with a summary. */
  private async reproduce(t: { workspace?: string; op: string; seed: number; minimized?: boolean }): Promise<ReproduceResult | undefined> {
    this.commandsInFlight += 1;
    let out: ReproduceResult | undefined;
    try {
      const args: Record<string, unknown> = { workspace: t.workspace, op: t.op, seed: t.seed };
      if (t.minimized) args.minimized = true;
      out = (await this.executeServerCommand("gpuemu.reproduce", args)) as ReproduceResult | undefined;
    } finally {
      this.commandsInFlight -= 1;
    }
    if (!out || out.error || !out.repro) {
      if (out?.error) void vscode.window.showWarningMessage(`gpuemu: reproduce ${t.op} seed ${t.seed}: ${out.error}`);
      return out;
    }
    const repro = out.repro;
    await this.openRepro(repro);
    const summary = reproduceSummary(t.op, t.seed, out, t.minimized);
    this.output.info(`${summary} (${repro})`);
    const show = out.status === "passed" ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
    void show(summary, "Run in Terminal", "Debug").then((pick) => {
      if (pick === "Run in Terminal") this.runInTerminal(repro, t.workspace);
      if (pick === "Debug") void this.debugRepro(repro, t.workspace).then((why) => why && void vscode.window.showWarningMessage(why));
    });
    return out;
  }

  /** Open a reproduction in a real tab with the cursor on its verdict line (where it says FAILED / PASSED). */
  private async openRepro(file: string): Promise<void> {
    const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(file));
    const line = reproLines(doc.getText()).verdict ?? 0;
    const pos = new vscode.Position(line, doc.lineAt(line).firstNonWhitespaceCharacterIndex);
    await vscode.window.showTextDocument(doc, {
      preview: false,
      selection: new vscode.Range(pos, pos),
      viewColumn: vscode.ViewColumn.Active,
    });
    vscode.window.activeTextEditor?.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenter);
  }

  private runInTerminal(repro: string, workspace?: string): void {
    const cwd = workspace ?? path.dirname(path.dirname(path.dirname(repro)));
    const terminal = vscode.window.createTerminal({ name: `gpuemu: ${path.basename(repro)}`, cwd });
    terminal.show();
    const rel = path.relative(cwd, repro);
    terminal.sendText(`${shellQuote(this.python())} ${shellQuote(rel.startsWith("..") ? repro : rel)}`);
  }

  /**
   * Debug a reproduction with the Python extension's debugger (debugpy), stopping where the op is
   * called. Resolves to why not when it cannot (no Python extension), else undefined once started.
   */
  private async debugRepro(repro: string, workspace?: string): Promise<string | undefined> {
    const debugpy = vscode.extensions.getExtension(DEBUGPY_EXTENSION);
    const python = vscode.extensions.getExtension(PYTHON_EXTENSION);
    if (!debugpy && !python) {
      return (
        `gpuemu: Debug needs the Python extension (${PYTHON_EXTENSION}, with its debugger ${DEBUGPY_EXTENSION}), which is not installed; ` +
        `install it, or run the reproduction in a terminal: python ${path.basename(repro)}`
      );
    }
    const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(repro));
    const call = reproLines(doc.getText()).call;
    if (call !== undefined) {
      const loc = new vscode.Location(doc.uri, new vscode.Position(call, 0));
      const already = vscode.debug.breakpoints.some(
        (b) => b instanceof vscode.SourceBreakpoint && b.location.uri.toString() === doc.uri.toString() && b.location.range.start.line === call,
      );
      if (!already) vscode.debug.addBreakpoints([new vscode.SourceBreakpoint(loc, true)]);
    }
    const folder = vscode.workspace.getWorkspaceFolder(doc.uri) ?? vscode.workspace.workspaceFolders?.[0];
    const config: vscode.DebugConfiguration = {
      type: debugpy ? "debugpy" : "python",
      request: "launch",
      name: `gpuemu: debug ${path.basename(repro)}`,
      program: repro,
      cwd: workspace ?? folder?.uri.fsPath,
      console: "integratedTerminal",
      justMyCode: false,
    };
    if (this.interpreter) config.python = this.interpreter;
    const ok = await vscode.debug.startDebugging(folder, config);
    return ok ? undefined : `gpuemu: the Python debugger did not start for ${path.basename(repro)} (see the Debug Console)`;
  }

  /** Debug profile of the Test Explorer: reproduce the case, then debug the reproduction. */
  private async debugCase(t: { workspace: string; op: string; seed: number }): Promise<string | undefined> {
    const out = await this.reproduce(t);
    if (!out?.repro) return `gpuemu: no reproduction of ${t.op} seed ${t.seed}${out?.error ? `: ${out.error}` : ""}`;
    const why = await this.debugRepro(out.repro, t.workspace);
    if (why) void vscode.window.showWarningMessage(why, "Run in Terminal").then((pick) => pick && this.runInTerminal(out.repro as string, t.workspace));
    return why;
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
      if (a && typeof a.op === "string") return this.calibrate({ workspace: a.workspace, op: a.op });
      const leaf = await this.pickOp("gpuemu: calibrate the tolerances of which (known-good) op?", ["op"]);
      return leaf ? this.calibrate({ workspace: leaf.workspace, op: leaf.label }) : undefined;
    });
    reg("gpuemu.showFailures", () => this.showFailures());
    reg("gpuemu.openReport", () => {
      if (!this.requireTrust()) return undefined;
      const workspaces = [...new Set(this.tests.allLeaves().map((l) => l.workspace))];
      return openReport(this.python(), this.server?.env, workspaces.length ? workspaces : this.folders(), this.output);
    });
    reg("gpuemu.installServer", () => this.installServer());
    // a failing case's child item in the Test Explorer (its context menu and inline button)
    reg("gpuemu.reproduceTestCase", async (...args) => {
      const item = args[0] as vscode.TestItem | undefined;
      const c = item ? parseCaseKey(item.id) : undefined;
      const t = item ? this.tests.caseTarget(item) : undefined;
      if (!c || !t || t.seed === undefined) return undefined;
      if (!this.requireTrust()) return undefined;
      return this.reproduce({ workspace: t.leaf.workspace, op: t.leaf.label, seed: t.seed });
    });
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
  extension = new GpuemuExtension(context.extensionPath);
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
