/**
 * End-to-end test of the packaged extension in real VS Code: code-server 4.100.3 (Code 1.100.3)
 * driven with playwright-core in headless Chromium, on a copy of examples/buggy.
 *
 * Asserts, with a screenshot of each under the artifacts folder:
 *   0. a fresh workspace (no stored results) gets results without opening a file: the first run
 *      (gpuemu.runOnOpen, default quick) validates every op, the status bar counting it up ("5 of 18 ops
 *      done"); the Problems panel then holds one problem per failing op and kind of failure, on the op's .py
 *      (none on gpuemu.toml), each with its [[ops]] entry
 *   1. opening and saving softmax_tail_mask.py puts an error squiggle on `def softmax_tail_mask`, and a red
 *      badge with a short summary ("9/16 failed: N % 128 != 0")
 *   2. the Problems panel lists the failure with seed, dtype and shape
 *   3. the Quick Fix menu offers "Reproduce failure of softmax_tail_mask (seed N)", and choosing it
 *      opens .gpuemu/repro/softmax_tail_mask_N.py in an editor tab
 *   4. after "gpuemu: Run All Ops", the Testing view lists every op with pass and fail icons, an op's
 *      duration its own time (the server log's), not its wait in the queue
 *   5. the reproduction opens at its verdict line in a real tab, with a notification offering Run in
 *      Terminal and Debug; Debug without the Python extension says why it cannot
 *   6. the failed op in the Testing view (an item with children: Go to Test from its context menu, as a
 *      click only expands it) lands on its def; its failure peek (Test: Peek Output) has the case line and
 *      an expected/actual diff with the elements around the worst one (failing ones marked) and where the
 *      failing elements lie; failing cases are children with a Reproduce action
 *   7. the Debug profile (Test: Debug Test at Cursor) says why it cannot debug without the Python extension
 *  7a. continuous run (the watch profile) turned on for the op: a save of its file shows as a "gpuemu (watch)" run
 *   8. gpuemu.toml opens as TOML, highlighted; its completion offers the `distributions` values
 *   9. .gpuemu/ is hidden from the Explorer; the status bar says what it counts
 *  9a. calibrating a buggy op: a progress notification counts its cases, then one warning says why it is
 *      refused; the log has it at info level, no error and no traceback, nor after a restart of the server
 *  10. a gpuemu.server.command that does not exist: one message with Install, no ENOENT toast, and the
 *      server restarts when the setting is fixed, the message withdrawn
 *  11. Install, for a server command in a fresh virtual environment, runs `pip install <checkout>` into
 *      that environment's Python as a task and then starts the server it installed; no notice stays
 *  12. untrusted: configuration diagnostics only, nothing runs; a "did you mean" quick fix applies it; a
 *      broken gpuemu.toml shows in the Testing view as "gpuemu.toml:LINE:COL: ...", not by absolute path
 *
 * Environment: CODE_SERVER_DIR (install dir of tools/install-code-server.sh), GPUEMU_E2E_SERVER
 * (gpuemu-ls, default: the repo's .venv/bin/gpuemu-ls), GPUEMU_E2E_VSIX (default: gpuemu.vsix),
 * GPUEMU_E2E_ARTIFACTS (default: editors/vscode/test-artifacts), CHROMIUM (/usr/bin/chromium).
 */
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { Browser, Locator, Page, chromium } from "playwright-core";

const EXT = path.resolve(__dirname, "..", "..");
const REPO = path.resolve(EXT, "..", "..");
const CODE_SERVER_DIR = process.env.CODE_SERVER_DIR ?? path.join(EXT, ".e2e", "code-server");
const ENTRY = path.join(CODE_SERVER_DIR, "node_modules", "code-server", "out", "node", "entry.js");
const SERVER = process.env.GPUEMU_E2E_SERVER ?? path.join(REPO, ".venv", "bin", "gpuemu-ls");
const VSIX = process.env.GPUEMU_E2E_VSIX ?? path.join(EXT, "gpuemu.vsix");
const ARTIFACTS = process.env.GPUEMU_E2E_ARTIFACTS ?? path.join(EXT, "test-artifacts");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];
const OP = "softmax_tail_mask";
const FILE = `${OP}.py`;

interface StepResult {
  name: string;
  ok: boolean;
  seconds: number;
  detail?: string;
  error?: string;
}

const results: StepResult[] = [];
const t0 = Date.now();
let currentPage: Page | undefined;

function log(msg: string): void {
  process.stdout.write(`[e2e ${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);
}

/** GPUEMU_E2E_ONLY (a regular expression): run only the steps whose names match, for working on one step. */
const ONLY = process.env.GPUEMU_E2E_ONLY ? new RegExp(process.env.GPUEMU_E2E_ONLY) : undefined;

async function step(name: string, fn: () => Promise<string | void>): Promise<boolean> {
  const start = Date.now();
  if (ONLY && !ONLY.test(name)) {
    results.push({ name, ok: false, seconds: 0, error: "skipped (GPUEMU_E2E_ONLY)" });
    log(`SKIPPED: ${name}`);
    return false;
  }
  log(`${name} ...`);
  try {
    const detail = (await fn()) ?? undefined;
    results.push({ name, ok: true, seconds: (Date.now() - start) / 1000, detail });
    log(`ok: ${name}${detail ? ` (${detail})` : ""}`);
    return true;
  } catch (err) {
    const error = err instanceof Error ? err.message : String(err);
    results.push({ name, ok: false, seconds: (Date.now() - start) / 1000, error });
    log(`FAILED: ${name}: ${error}`);
    if (currentPage) {
      await currentPage
        .screenshot({ path: path.join(ARTIFACTS, `failed-step-${results.length}.png`) })
        .catch(() => undefined);
    }
    return false;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs: number, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what}${last ? ` (last error: ${String(last)})` : ""}`);
}

function copyWorkspace(dest: string): void {
  fs.cpSync(path.join(REPO, "examples", "buggy"), dest, {
    recursive: true,
    filter: (src) => !src.split(path.sep).includes(".gpuemu") && !src.includes("__pycache__"),
  });
}

async function shot(page: Page, name: string, target?: Locator): Promise<string> {
  const file = path.join(ARTIFACTS, name);
  if (target) await target.screenshot({ path: file });
  else await page.screenshot({ path: file });
  return file;
}

async function command(page: Page, title: string): Promise<void> {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 10_000 });
  await input.fill(`>${title}`);
  const row = page.locator(".quick-input-widget .monaco-list-row", { hasText: title }).first();
  await row.waitFor({ state: "visible", timeout: 10_000 });
  await page.waitForTimeout(200);
  await page.keyboard.press("Enter");
}

/** Run a step through a quick-input box up to three times: the box can close under us when focus moves
 * (a notification, a panel finishing its layout); Escape clears what is left before the next try. */
async function viaQuickInput(page: Page, what: string, step: () => Promise<void>): Promise<void> {
  let last: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await step();
      return;
    } catch (err) {
      last = err;
      await page.keyboard.press("Escape");
      await page.waitForTimeout(500);
    }
  }
  throw new Error(`could not ${what}: ${String(last)}`);
}

/** Open NAME through Quick Open (Ctrl+P) and wait for its tab. */
async function quickOpen(page: Page, name: string): Promise<void> {
  const input = page.locator(".quick-input-widget input");
  await viaQuickInput(page, `open ${name}`, async () => {
    await page.keyboard.press("Control+P");
    await input.waitFor({ state: "visible", timeout: 10_000 });
    await input.fill(name, { timeout: 5_000 });
    // the row whose file name is NAME exactly: a recently opened file that merely matches the query (the
    // reproduction softmax_tail_mask_1238.py for softmax_tail_mask.py) is listed above it
    const exact = page.locator(".quick-input-widget .monaco-list-row", {
      has: page.locator(".label-name", { hasText: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`) }),
    });
    await exact.first().waitFor({ timeout: 10_000 });
    await exact.first().click();
    await page.locator(".tab.active", { hasText: name }).waitFor({ timeout: 20_000 });
  });
}

/** Go to LINE:COLUMN in the active editor. */
async function gotoLine(page: Page, line: number, column = 1): Promise<void> {
  const input = page.locator(".quick-input-widget input");
  await viaQuickInput(page, `go to line ${line}:${column}`, async () => {
    await page.locator(".editor-group-container.active .monaco-editor .view-lines").first().click();
    await page.keyboard.press("Control+G");
    await input.waitFor({ state: "visible", timeout: 10_000 });
    await input.fill(`:${line}:${column}`, { timeout: 5_000 });
    await page.waitForTimeout(200);
    await page.keyboard.press("Enter");
    await page.waitForTimeout(300);
  });
}

/** Texts of the notification toasts on screen. */
async function toasts(page: Page): Promise<string[]> {
  return (await page.locator(".notifications-toasts .notification-toast").allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim());
}

/** The toast whose text matches, once it shows. */
async function toast(page: Page, re: RegExp, timeoutMs = 60_000): Promise<Locator> {
  return waitFor(
    `a notification matching ${re}`,
    async () => {
      for (const t of await page.locator(".notifications-toasts .notification-toast").all()) {
        if (re.test((await t.innerText()).replace(/\s+/g, " "))) return t;
      }
      return undefined;
    },
    timeoutMs,
    300,
  );
}

async function clearNotifications(page: Page): Promise<void> {
  await command(page, "Notifications: Clear All Notifications").catch(() => undefined);
  await page.waitForTimeout(300);
}

/** The cursor's line in the active editor (status bar "Ln 63, Col 5"). */
async function cursorLine(page: Page): Promise<number> {
  const text = await page.locator('[id="status.editor.selection"]').first().innerText();
  const m = /Ln (\d+)/.exec(text);
  if (!m) throw new Error(`no cursor position in the status bar: ${text}`);
  return Number(m[1]);
}

/** Results of OP stored by runs the server started on a save (runs.command = "gpuemu-ls (save)"). */
function saveRuns(ws: string): number {
  const db = path.join(ws, ".gpuemu", "gpuemu.db");
  if (!fs.existsSync(db)) return 0;
  const script = [
    "import sqlite3, sys",
    "c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True, timeout=5)",
    "q = \"select count(*) from op_results r join runs u on u.id = r.run_id where r.op = ? and u.command like '%(save)%' and r.finished_at is not null\"",
    "print(c.execute(q, (sys.argv[2],)).fetchone()[0])",
  ].join("\n");
  try {
    return Number(execFileSync("python3", ["-c", script, db, OP], { encoding: "utf8", timeout: 20_000 }).trim());
  } catch {
    return 0;
  }
}

interface Problem {
  file: string;
  op: string;
  code: string;
  /** "error", "warning" or "info", from the row's severity icon */
  severity: string;
  text: string;
  related: string[];
}

/** Every row of the Problems panel (tree view). The list is virtual: only rows on screen exist, so the
 * caller makes the panel tall enough (no scrolling: a hover that opens under the mouse swallows wheel
 * events). Level 1 rows are files ("1 problems in file X.py of folder ."), level 2 their problems
 * (message, then source and code: "gpuemu mismatch [Ln 63, Col 5]"), level 3 a problem's related
 * information ("op NAME in gpuemu.toml at line 28 and character 1 in gpuemu.toml"). */
async function problemsList(page: Page): Promise<{ problems: Problem[]; files: string[] }> {
  const panel = page.locator(".markers-panel");
  await panel.locator(".monaco-list").first().waitFor({ state: "visible", timeout: 20_000 });
  const rows = new Map<number, { text: string; level: string; aria: string; icon: string }>();
  for (const r of await panel.locator(".monaco-list-row").all()) {
    const index = Number(await r.getAttribute("data-index"));
    const text = (await r.innerText().catch(() => "")).trim();
    if (!Number.isFinite(index) || !text) continue;
    const icon = (await r.locator(".codicon-error, .codicon-warning, .codicon-info").first().getAttribute("class", { timeout: 500 }).catch(() => "")) ?? "";
    rows.set(index, { text, level: (await r.getAttribute("aria-level")) ?? "", aria: (await r.getAttribute("aria-label")) ?? "", icon });
  }
  const problems: Problem[] = [];
  const files: string[] = [];
  let file = "";
  for (const [, row] of [...rows.entries()].sort((a, b) => a[0] - b[0])) {
    const text = row.text.replace(/\s+/g, " ");
    if (row.level === "1") {
      file = /in file (.+?) of folder /.exec(row.aria)?.[1] ?? row.text.split("\n")[0].trim();
      files.push(file);
    } else if (row.level === "2") {
      const code = /\bgpuemu \(?([\w-]+)\)? ?\[Ln \d+/.exec(text)?.[1] ?? "";
      const severity = /codicon-error/.test(row.icon) ? "error" : /codicon-warning/.test(row.icon) ? "warning" : /codicon-info/.test(row.icon) ? "info" : "";
      problems.push({ file, op: /^([\w.-]+):/.exec(text)?.[1] ?? "", code, severity, text, related: [] });
    } else if (row.level === "3" && problems.length) {
      problems[problems.length - 1].related.push(row.aria || text);
    }
  }
  return { problems, files };
}

/** Set (or clear, with "") the Problems panel's filter. */
async function filterProblems(page: Page, text: string): Promise<void> {
  const box = page.getByPlaceholder(/^Filter \(e\.g\. text/).first();
  await box.waitFor({ state: "visible", timeout: 10_000 });
  await box.fill(text);
  await page.waitForTimeout(800);
}

/** The extension's output channel (the server's window/logMessage lines), from the user-data logs. */
function serverLog(userData: string): string {
  const logs = path.join(userData, "logs");
  let text = "";
  for (const f of fs.existsSync(logs) ? (fs.readdirSync(logs, { recursive: true }) as string[]) : []) {
    if (path.basename(f) === "gpuemu-ls.log" || /gpuemu-ls\.log$/.test(f)) text += fs.readFileSync(path.join(logs, f), "utf8");
  }
  return text;
}

/** A fresh user-data-dir: settings for a quiet workbench, the server under test, quick mode. */
function writeUserData(dir: string, trustPrompt: boolean): void {
  fs.mkdirSync(path.join(dir, "User"), { recursive: true });
  const settings = {
    "gpuemu.server.command": SERVER,
    "gpuemu.mode": "quick",
    "security.workspace.trust.enabled": trustPrompt,
    "security.workspace.trust.startupPrompt": "always",
    "security.workspace.trust.emptyWindow": false,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "workbench.enableExperiments": false,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.commandCenter.enabled": false,
    "chat.disableAIFeatures": true,
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "extensions.ignoreRecommendations": true,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "editor.minimap.enabled": false,
    "editor.codeLens": true,
    "window.commandCenter": false,
    "testing.automaticallyOpenPeekView": "never",
    "testing.openTesting": "neverOpen",
    "files.autoSave": "off",
    "git.enabled": false,
  };
  fs.writeFileSync(path.join(dir, "User", "settings.json"), JSON.stringify(settings, null, 2));
  // code-server is a remote window: machine-scoped settings (gpuemu.server.*) come from the
  // remote machine's settings, not from the user settings
  fs.mkdirSync(path.join(dir, "Machine"), { recursive: true });
  fs.writeFileSync(
    path.join(dir, "Machine", "settings.json"),
    JSON.stringify({ "gpuemu.server.command": SERVER, "gpuemu.mode": "quick" }, null, 2),
  );
}

async function main(): Promise<number> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  for (const f of fs.readdirSync(ARTIFACTS)) fs.rmSync(path.join(ARTIFACTS, f), { recursive: true, force: true });
  for (const [what, p] of [
    ["code-server (run scripts/e2e.sh to install it)", ENTRY],
    ["the .vsix (npm run package)", VSIX],
    ["gpuemu-ls", SERVER],
    ["chromium", CHROMIUM],
  ]) {
    if (!fs.existsSync(p)) throw new Error(`missing ${what}: ${p}`);
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "gpuemu-vscode-e2e-"));
  const ws = path.join(tmp, "buggy");
  const userData = path.join(tmp, "user-data");
  const extDir = path.join(tmp, "extensions");
  copyWorkspace(ws);
  writeUserData(userData, false);
  const configYaml = path.join(tmp, "code-server.yaml");
  fs.writeFileSync(configYaml, "auth: none\ncert: false\n");
  const base = ["--config", configYaml, "--user-data-dir", userData, "--extensions-dir", extDir];
  const servers: ChildProcess[] = [];
  const startCodeServer = async (dataDir: string, folder: string, trust: boolean, logName: string): Promise<string> => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const logFd = fs.openSync(path.join(ARTIFACTS, logName), "w");
    const args = [ENTRY, "--config", configYaml, "--user-data-dir", dataDir, "--extensions-dir", extDir, "--auth", "none",
      "--bind-addr", `127.0.0.1:${port}`, "--disable-telemetry", "--disable-update-check", "--disable-getting-started-override",
      "--ignore-last-opened", ...(trust ? ["--disable-workspace-trust"] : []), folder];
    const proc = spawn(process.execPath, args, {
      stdio: ["ignore", logFd, logFd],
      env: { ...process.env, GPUEMU_USER_CONFIG: path.join(tmp, "no-user-config.toml") },
    });
    servers.push(proc);
    await waitFor("code-server /healthz", async () => (await fetch(`${url}/healthz`)).ok, 60_000, 500);
    return url;
  };

  let browser: Browser | undefined;
  try {
    const installed = await step("install the .vsix with code-server --install-extension", async () => {
      const out = execFileSync(process.execPath, [ENTRY, ...base, "--install-extension", VSIX, "--force"], {
        encoding: "utf8",
        timeout: 120_000,
      });
      const list = execFileSync(process.execPath, [ENTRY, ...base, "--list-extensions", "--show-versions"], {
        encoding: "utf8",
        timeout: 60_000,
      });
      if (!/gpuemu\.gpuemu@/.test(list)) throw new Error(`not installed: ${out}\n${list}`);
      return list.trim();
    });
    if (!installed) return 1;

    let url = "";
    await step("start code-server", async () => {
      url = await startCodeServer(userData, ws, true, "code-server.log");
      return url;
    });

    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
    const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
    const page = await context.newPage();
    currentPage = page;
    page.on("pageerror", (e) => log(`page error: ${e.message}`));

    await step("open the workspace in VS Code (code-server)", async () => {
      await page.goto(`${url}/?folder=${encodeURIComponent(ws)}`);
      await page.locator(".monaco-workbench").waitFor({ state: "visible", timeout: 90_000 });
      await page.locator(".explorer-folders-view .monaco-list-row", { hasText: "gpuemu.toml" }).first().waitFor({ timeout: 60_000 });
      // the extension activates on workspaceContains:**/gpuemu.toml and shows its status item
      await page.locator(".statusbar-item", { hasText: "gpuemu" }).first().waitFor({ timeout: 60_000 });
      return (await page.locator(".statusbar-item", { hasText: "gpuemu" }).first().innerText()).trim();
    });

    await step("a fresh workspace gets results without opening a file (first run); one problem per failing op, on its .py", async () => {
      // no stored results in the copy, and no file opened: the first run (gpuemu.runOnOpen, default "quick")
      // validates every op once in the background
      const toml = fs.readFileSync(path.join(ws, "gpuemu.toml"), "utf8");
      const ops = [...toml.matchAll(/^\[\[ops\]\]\s*\nname = "([^"]+)"/gm)].map((m) => m[1]);
      const status = page.locator(".statusbar-item", { hasText: "gpuemu" }).first();
      const seen: string[] = [];
      const done = await waitFor(
        "the first run's verdicts in the status bar",
        async () => {
          const text = (await status.innerText()).trim();
          if (seen[seen.length - 1] !== text) seen.push(text);
          const m = new RegExp(`gpuemu: (\\d+) of ${ops.length} ops failed`).exec(text);
          return m ? { failed: Number(m[1]), text } : undefined;
        },
        420_000,
        1000,
      ).catch((err) => {
        throw new Error(`${String(err)}; status bar texts seen: ${seen.join(" | ")}`);
      });
      // while it ran, the status bar counted the run up ("5 of 18 ops done, 2 failed"), never down
      const counts = seen.map((t) => /gpuemu: (\d+) of (\d+) ops done/.exec(t)).filter((m): m is RegExpExecArray => m !== null);
      if (!counts.length) throw new Error(`no "N of M ops done" while the first run ran: ${seen.join(" | ")}`);
      const backwards = counts.find((m, i) => i > 0 && Number(m[1]) < Number(counts[i - 1][1]));
      const last = counts[counts.length - 1];
      if (backwards || Number(last[2]) !== ops.length) throw new Error(`the status bar did not count up to ${ops.length}: ${seen.join(" | ")}`);
      const tabs = await page.locator(".tab").count();
      if (tabs) throw new Error(`${tabs} editor tab(s) open: the results must come without opening a file`);
      // the server says it was the first run (window/logMessage, in the output channel)
      const started = /run \d+ started: (\d+) ops \(quick, first run\)/.exec(serverLog(userData));
      if (!started || Number(started[1]) !== ops.length) throw new Error(`no first run of ${ops.length} ops in the server log`);
      // Problems: every failure once, on the op's .py, with its gpuemu.toml entry as related information
      // (a maximized panel in a tall window shows every problem at once: the list renders only what is on screen)
      await page.keyboard.press("Control+Shift+M");
      await page.locator(".markers-panel").waitFor({ state: "visible", timeout: 20_000 });
      await command(page, "View: Toggle Maximized Panel");
      await page.setViewportSize({ width: 1600, height: 3000 });
      await page.mouse.move(5, 5);
      let lastSeen = "";
      const { problems, files } = await waitFor(
        "the Problems panel to list the first run's failures",
        async () => {
          const got = await problemsList(page);
          lastSeen = JSON.stringify(got).slice(0, 1500);
          return new Set(got.problems.filter((p) => p.code !== "edge-finding").map((p) => p.op)).size >= done.failed ? got : undefined;
        },
        60_000,
        1000,
      )
        .catch((err) => {
          throw new Error(`${String(err)}; the panel showed: ${lastSeen}`);
        })
        .finally(async () => {
          await shot(page, "0-first-run-problems.png");
          await page.setViewportSize({ width: 1600, height: 1000 });
          await command(page, "View: Toggle Maximized Panel");
        });
      // an edge finding (a failure only where inputs overflow the accumulation precision, or at NaN/inf
      // inputs) is shown as a warning and does not fail the op; everything else is an error of a failing op
      const edges = problems.filter((p) => p.code === "edge-finding");
      const badEdge = edges.find((p) => p.severity !== "warning");
      if (badEdge) throw new Error(`an edge finding shown as '${badEdge.severity}', not a warning: ${badEdge.text.slice(0, 200)}`);
      const bugs = problems.filter((p) => p.code !== "edge-finding");
      const notError = bugs.find((p) => p.severity !== "error");
      if (notError) throw new Error(`a failure shown as '${notError.severity}', not an error: ${notError.text.slice(0, 200)}`);
      const failingOps = new Set(bugs.map((p) => p.op));
      if (failingOps.size !== done.failed) {
        throw new Error(`${done.failed} ops failed, errors name ${failingOps.size}: ${[...failingOps].join(", ")}`);
      }
      if (files.includes("gpuemu.toml") || problems.some((p) => !p.file.endsWith(".py"))) {
        throw new Error(`a problem outside the ops' .py files: ${files.join(", ")}`);
      }
      const keys = problems.map((p) => `${p.op} [${p.code}]`);
      const twice = keys.filter((k, i) => keys.indexOf(k) !== i);
      if (twice.length) throw new Error(`shown more than once: ${twice.join(", ")}`);
      for (const p of problems) {
        if (!ops.includes(p.op) || (/_ok$/.test(p.op) && p.code !== "edge-finding")) throw new Error(`a problem of ${p.op}: ${p.text.slice(0, 200)}`);
        if (!p.code || !p.related.some((r) => r.startsWith(`op ${p.op} in gpuemu.toml at line `) && r.endsWith(" in gpuemu.toml"))) {
          throw new Error(`no [[ops]] entry as related information: ${p.text.slice(0, 200)} / ${p.related.join(" | ")}`);
        }
      }
      const counter = (await page.locator('[id="status.problems"]').first().innerText()).replace(/\s+/g, " ").trim();
      // the counter shows errors, warnings (and infos) side by side: "11 2" for 11 errors and 2 warnings
      const counted = (counter.match(/\d+/g) ?? []).reduce((sum, n) => sum + Number(n), 0);
      if (counted !== problems.length) throw new Error(`the status bar counts '${counter}', the panel ${problems.length}`);
      await page.keyboard.press("Control+Shift+M"); // hide it again
      return `${done.text} after ${seen.join(" -> ")}; ${bugs.length} errors for ${failingOps.size} failing ops and ${edges.length} edge-finding warning(s) in ${files.length} files: ${keys.join(", ")}`;
    });

    const squiggle = await step(`open and save ${FILE}: an error squiggle on def ${OP}`, async () => {
      await quickOpen(page, FILE);
      const editor = page.locator(".editor-instance .monaco-editor").first();
      await editor.waitFor({ state: "visible", timeout: 20_000 });
      const defLine = fs.readFileSync(path.join(ws, FILE), "utf8").split("\n").findIndex((l) => l.startsWith(`def ${OP}(`)) + 1;
      if (defLine <= 0) throw new Error(`no def ${OP} in ${FILE}`);
      const line = editor.locator(".view-line", { hasText: `def ${OP}(` }).first();
      const squiggleOnDef = async () => {
        const lb = await line.boundingBox();
        if (!lb) return undefined;
        for (const sq of await editor.locator(".squiggly-error").all()) {
          const b = await sq.boundingBox();
          if (b && Math.abs(b.y + b.height / 2 - (lb.y + lb.height / 2)) < lb.height && b.width > 20) return { lb, b };
        }
        return undefined;
      };
      // opening validates the file's ops (no stored result newer than the file)
      await gotoLine(page, defLine, 5);
      await waitFor("a squiggle on the def line after opening", squiggleOnDef, 180_000, 500);
      // a real edit (a trailing newline), then save: didSave -> a new validation of the file's ops
      const saveRunsBefore = saveRuns(ws);
      await editor.locator(".view-lines").click();
      await page.keyboard.press("Control+End");
      await page.keyboard.press("Enter");
      await page.keyboard.press("Control+S");
      await page.locator(".tab.active.dirty").waitFor({ state: "detached", timeout: 10_000 });
      await waitFor("the validation started by the save, finished in the store", async () => saveRuns(ws) > saveRunsBefore, 180_000, 500);
      await gotoLine(page, defLine, 5);
      const hit = await waitFor("a .squiggly-error decoration on the def line after saving", squiggleOnDef, 60_000, 500);
      // the squiggle covers the function name (after "def "), not the whole line
      const name = line.locator("span > span", { hasText: new RegExp(`^${OP}$`) }).first();
      const nb = await name.boundingBox();
      if (!nb) throw new Error(`no token ${OP} on the def line`);
      if (Math.abs(hit.b.x - nb.x) > 4 || Math.abs(hit.b.x + hit.b.width - (nb.x + nb.width)) > 4) {
        throw new Error(`squiggle spans x=${hit.b.x}..${hit.b.x + hit.b.width}, the name ${nb.x}..${nb.x + nb.width}`);
      }
      // the code lens shows the finished result, not "queued"/"running"
      await waitFor(
        "the code lens above the def to show the saved run's result",
        async () => {
          const lenses = (await editor.locator(".contentWidgets .codelens-decoration, .codelens-decoration").allInnerTexts()).join(" | ");
          return lenses.includes(`gpuemu ${OP}:`) && !/queued|running/.test(lenses) ? lenses : undefined;
        },
        60_000,
        500,
      ).catch(() => undefined);
      // the red badge at the def (the failed test's message): a short summary, cases and the diagnosis' condition,
      // as many failed as the code lens says (it was "# seed=1238 dt…35617136955261 != …", a cut diff)
      const lens = (await editor.locator(".codelens-decoration").allInnerTexts()).join(" | ");
      const failedCases = new RegExp(`gpuemu ${OP}: (\\d+)/(\\d+) passed, (\\d+) failed`).exec(lens);
      if (!failedCases) throw new Error(`no result in the code lens: ${lens}`);
      const badge = await waitFor(
        "the red badge on the def line",
        async () => {
          const lb = await line.boundingBox();
          for (const w of await editor.locator(".test-error-content-widget").all()) {
            const b = await w.boundingBox();
            if (lb && b && Math.abs(b.y + b.height / 2 - (lb.y + lb.height / 2)) < lb.height) return (await w.innerText()).trim();
          }
          return undefined;
        },
        30_000,
        500,
      );
      const want = `${failedCases[3]}/${failedCases[2]} failed: `;
      if (!badge.startsWith(want) || badge.length <= want.length || /seed=|…|\n/.test(badge)) {
        throw new Error(`the badge says '${badge}', expected '${want}<condition>'`);
      }
      await page.mouse.move(5, 5);
      await page.waitForTimeout(300);
      await shot(page, "1-squiggle.png");
      return `line ${defLine}, under the name ${OP} (${Math.round(hit.b.width)}px); badge '${badge}'; ${saveRuns(ws) - saveRunsBefore} save-triggered run(s) of ${OP}`;
    });

    await step("the Problems panel lists the failure with seed, dtype and shape", async () => {
      await page.keyboard.press("Control+Shift+M");
      const panel = page.locator(".markers-panel");
      await panel.waitFor({ state: "visible", timeout: 20_000 });
      // the panel lists every failing op's problem (one each, several lines long): filter to the op's file
      await filterProblems(page, FILE);
      const row = await waitFor(
        "a Problems entry of softmax_tail_mask with seed, dtype and shape",
        async () => {
          for (const r of await panel.locator(".monaco-list-row").all()) {
            const text = (await r.innerText()).replace(/\s+/g, " ");
            if (text.includes(OP) && /seed \d+/.test(text) && /float32/.test(text) && /x=\[\d+, \d+\]/.test(text)) return text;
          }
          return undefined;
        },
        60_000,
      );
      const { problems } = await problemsList(page);
      const ours = problems.filter((p) => p.op === OP);
      if (ours.length !== 1 || ours[0].file !== FILE) throw new Error(`${OP} problems: ${JSON.stringify(ours)}`);
      await shot(page, "2-problems.png");
      await filterProblems(page, "");
      return row.slice(0, 200);
    });

    let reproName = "";
    await step("the Quick Fix menu offers Reproduce, which opens .gpuemu/repro/...py", async () => {
      if (!squiggle) throw new Error("no squiggle to put the cursor on");
      const editor = page.locator(".editor-instance .monaco-editor").first();
      await editor.locator(".view-lines").click();
      const defLine = fs.readFileSync(path.join(ws, FILE), "utf8").split("\n").findIndex((l) => l.startsWith(`def ${OP}(`)) + 1;
      await gotoLine(page, defLine, 8);
      const menu = page.locator(".action-widget");
      const item = menu.locator(".monaco-list-row", { hasText: `Reproduce failure of ${OP}` }).first();
      await waitFor(
        "the Quick Fix menu with 'Reproduce failure'",
        async () => {
          if (!(await menu.isVisible())) {
            await page.keyboard.press("Control+.");
            await page.waitForTimeout(1500);
          }
          if (await item.isVisible()) return true;
          await page.keyboard.press("Escape");
          return undefined;
        },
        60_000,
        500,
      );
      const titles = (await menu.locator(".monaco-list-row").allInnerTexts()).map((t) => t.trim());
      await shot(page, "3-quick-fix.png");
      const seed = /seed (\d+)/.exec(await item.innerText())?.[1];
      // choose it with the keyboard (the menu's pointer block swallows synthetic clicks)
      for (let i = 0; i < 10 && !((await menu.locator(".monaco-list-row.focused").innerText().catch(() => "")).includes("Reproduce")); i++) {
        await page.keyboard.press("ArrowDown");
        await page.waitForTimeout(100);
      }
      await page.keyboard.press("Enter");
      reproName = `${OP}_${seed}.py`;
      await page.locator(".tab", { hasText: reproName }).first().waitFor({ state: "visible", timeout: 120_000 });
      const file = path.join(ws, ".gpuemu", "repro", reproName);
      if (!fs.existsSync(file)) throw new Error(`${file} does not exist`);
      await page.waitForTimeout(500);
      await shot(page, "4-repro-tab.png");
      return `menu: ${titles.join(" | ")}; opened ${reproName}`;
    });

    await step("the reproduction opens at its verdict line (a real tab) with Run in Terminal and Debug; Debug says why not", async () => {
      if (!reproName) throw new Error("no reproduction opened");
      const file = path.join(ws, ".gpuemu", "repro", reproName);
      const verdict = fs.readFileSync(file, "utf8").split("\n").findIndex((l) => /^\s*print\("FAILED: "/.test(l)) + 1;
      if (verdict <= 0) throw new Error(`no verdict line in ${reproName}`);
      const line = await waitFor("the cursor on the verdict line", async () => ((await cursorLine(page)) === verdict ? verdict : undefined), 20_000);
      const tab = page.locator(".tab.active", { hasText: reproName });
      const italic = await tab.locator(".italic").count();
      if (italic) throw new Error("the reproduction opened in a preview tab (italic title)");
      const note = await toast(page, new RegExp(`${OP} seed \\d+ still fails`));
      const text = (await note.innerText()).replace(/\s+/g, " ");
      const buttons = (await note.locator(".monaco-button").allInnerTexts()).map((b) => b.trim());
      for (const b of ["Run in Terminal", "Debug"]) if (!buttons.includes(b)) throw new Error(`no ${b} button: ${buttons.join(", ")}`);
      await shot(page, "4b-repro-verdict-line.png");
      await note.locator(".monaco-button", { hasText: "Debug" }).click();
      const why = await toast(page, /Debug needs the Python extension/, 30_000);
      const whyText = (await why.innerText()).replace(/\s+/g, " ");
      await shot(page, "4c-repro-debug-why-not.png");
      await clearNotifications(page);
      return `cursor on line ${line} (${fs.readFileSync(file, "utf8").split("\n")[line - 1].trim()}); notification: ${text.slice(0, 160)}; buttons: ${buttons.join(", ")}; Debug: ${whyText.slice(0, 120)}`;
    });

    await step("the Testing view lists the ops with pass/fail icons after gpuemu: Run All Ops", async () => {
      await page.keyboard.press("Escape");
      await command(page, "gpuemu: Run All Ops");
      await command(page, "View: Show Testing");
      const view = page.locator(".test-explorer");
      await view.waitFor({ state: "visible", timeout: 20_000 });
      // expand the workspace item (buggy) if collapsed
      const wsRow = view.locator(".monaco-list-row", { hasText: "buggy" }).first();
      await wsRow.waitFor({ timeout: 30_000 });
      if ((await wsRow.getAttribute("aria-expanded")) === "false") await wsRow.locator(".monaco-tl-twistie").click();
      const toml = fs.readFileSync(path.join(ws, "gpuemu.toml"), "utf8");
      const ops = [...toml.matchAll(/^\[\[ops\]\]\s*\nname = "([^"]+)"/gm)].map((m) => m[1]);
      if (ops.length < 10) throw new Error(`only ${ops.length} [[ops]] found in gpuemu.toml`);
      let seen = "";
      const summary = await waitFor(
        "every op listed with a pass or fail icon, none running",
        async () => {
          // rows' aria-labels: "softmax_tail_mask (Failed), in 1.4s"
          const rows = (await view.locator(".monaco-list-row").evaluateAll((els) => els.map((e) => e.getAttribute("aria-label") ?? ""))).map(
            (aria) => ({ aria, label: aria.replace(/ \(.*$/, ""), state: /\(([^)]+)\)/.exec(aria)?.[1] ?? "" }),
          );
          seen = JSON.stringify(rows.map((r) => r.aria));
          let passed = 0;
          let failed = 0;
          for (const r of rows) {
            if (/running|queued|enqueued/i.test(r.state)) return undefined;
            if (r.state === "Passed") passed += 1;
            if (r.state === "Failed" || r.state === "Errored") failed += 1;
          }
          // a duration ("in 1.6s") on every op: all of them ran in this session (Run All), not only
          // the two of the saved file, nor stored results (which have none)
          const labels = rows.filter((r) => / in [\d.]+m?s$/.test(r.aria)).map((r) => r.label);
          const missing = ops.filter((o) => !labels.includes(o));
          if (missing.length || passed === 0 || failed === 0) return undefined;
          return { passed, failed, rows: rows.length };
        },
        240_000,
        1000,
      ).catch((err) => {
        throw new Error(`${String(err)}; rows seen: ${seen}`);
      });
      // the op's duration is its own time (the log's "(2.35 s)" of this run), not its wait in the queue
      const runId = [...serverLog(userData).matchAll(/run (\d+) started: \d+ ops \(quick, run request\)/g)].pop()?.[1];
      const own = new RegExp(`run ${runId}: FAIL op ${OP}: [^\\n]*\\(([\\d.]+) s\\)`).exec(serverLog(userData));
      const shown = new RegExp(`"${OP} \\(Failed\\), in ([\\d.]+)(m?s)"`).exec(seen);
      if (!own || !shown) throw new Error(`no duration to compare: log ${own?.[0]}, row ${shown?.[0]}`);
      const shownS = Number(shown[1]) / (shown[2] === "ms" ? 1000 : 1);
      if (Math.abs(shownS - Number(own[1])) > 0.06) throw new Error(`Testing shows ${shown[0]}, the op took ${own[1]} s`);
      const passIcons = await view.locator(".computed-state.codicon-testing-passed-icon").count();
      const failIcons = await view.locator(".computed-state.codicon-testing-failed-icon").count();
      if (passIcons < 1 || failIcons < 1) throw new Error(`icons: ${passIcons} passed, ${failIcons} failed`);
      const status = (await page.locator(".statusbar-item", { hasText: "gpuemu" }).first().innerText()).trim();
      if (!new RegExp(`gpuemu: \\d+ of ${ops.length} ops failed`).test(status)) throw new Error(`status bar says '${status}'`);
      await shot(page, "5-testing-view.png");
      return `${ops.length} ops listed (${summary.passed} passed, ${summary.failed} failed); icons: ${passIcons} passed, ${failIcons} failed; status bar: ${status}; ${OP} in ${shownS} s (log: ${own[1]} s)`;
    });

    const defLineOf = () => fs.readFileSync(path.join(ws, FILE), "utf8").split("\n").findIndex((l) => l.startsWith(`def ${OP}(`)) + 1;
    await step("clicking the failed op in the Testing view lands on its def, with the case message and an expected/actual diff", async () => {
      await clearNotifications(page);
      await quickOpen(page, "gpuemu.toml"); // away from the op's file: the click must bring us there
      const view = page.locator(".test-explorer");
      const row = view.locator(`.monaco-list-row[aria-label^="${OP} ("]`).first();
      await row.waitFor({ timeout: 20_000 });
      // the op's item has its failing cases as children, so a click only expands it (VS Code opens leaves
      // on click): "Go to Test" from the item's context menu opens its location
      await row.click();
      await row.click({ button: "right" });
      const goTo = page.locator(".monaco-menu .action-label", { hasText: /^Go to Test$/ }).first();
      await goTo.waitFor({ state: "visible", timeout: 10_000 });
      await shot(page, "6a-go-to-test-menu.png");
      await goTo.click();
      await page.locator(".tab.active", { hasText: FILE }).waitFor({ timeout: 20_000 });
      const defLine = defLineOf();
      const at = await waitFor("the cursor on the def line", async () => ((await cursorLine(page)) === defLine ? defLine : undefined), 20_000);
      await shot(page, "6-test-item-at-def.png");
      // the failure's peek at the def (Test: Peek Output, the message nearest the cursor): the case line and
      // the diff editor (expected = reference, actual = op)
      await command(page, "Test: Peek Output");
      const peek = page.locator(".test-output-peek, .peekview-widget").first();
      await peek.waitFor({ state: "visible", timeout: 20_000 });
      const peekText = await waitFor(
        "the case line in the failure peek",
        async () => {
          const t = (await peek.innerText()).replace(/\s+/g, " ");
          return /\[mismatch\] seed=\d+ dtype=\w+ x=\[\d+, \d+\]/.test(t) ? t : undefined;
        },
        20_000,
        500,
      );
      // the peek sits in the op's file, at its def
      const peekLine = await cursorLine(page);
      if (Math.abs(peekLine - defLine) > 1) throw new Error(`the peek opened at line ${peekLine}, the def is at ${defLine}`);
      const diff = peek.locator(".monaco-diff-editor").first();
      await diff.waitFor({ state: "visible", timeout: 20_000 });
      const diffText = (await diff.innerText()).replace(/\s+/g, " ");
      if (!/\[\d+, \d+\] = /.test(diffText)) throw new Error(`the diff shows no element values: ${diffText.slice(0, 300)}`);
      // the worst element's neighbourhood, the failing ones marked, and where the failing elements lie in words
      const around = /# around the worst element: \w+\[(\d+):(\d+), (\d+):(\d+)\]/.exec(diffText);
      if (!around) throw new Error(`the diff shows no neighbourhood of the worst element: ${diffText.slice(0, 600)}`);
      const rowLines = diffText.match(/\w+\[\d+, \d+:\d+\](?:\s+\[?-?[\d.e+-]+\*?\]?|\s+\[?(?:NaN|-?inf)\*?\]?)+/g) ?? [];
      if (rowLines.length < 2 || !rowLines.some((l) => l.includes("*"))) throw new Error(`no rows of values with their failing elements marked: ${diffText.slice(0, 600)}`);
      if (!/# failing elements of \w+: .*\brows?\b.*\bcolumns?\b/.test(diffText)) throw new Error(`the diff does not say where the failing elements lie: ${diffText.slice(0, 600)}`);
      await shot(page, "7-failure-peek-diff.png");
      await page.keyboard.press("Escape");
      return `def line ${at}; peek: ${peekText.slice(0, 160)}; diff: ${diffText.slice(0, 160)}`;
    });

    await step("failing cases are children of the op, each with a Reproduce action", async () => {
      await command(page, "View: Show Testing");
      const view = page.locator(".test-explorer");
      const row = view.locator(`.monaco-list-row[aria-label^="${OP} ("]`).first();
      await row.waitFor({ timeout: 20_000 });
      if ((await row.getAttribute("aria-expanded")) === "false") await row.locator(".monaco-tl-twistie").click();
      // a case's row shows its label "seed N" and the case as description; VS Code's aria-label leads with the
      // description ("float32 x=[15, 9] contiguous boundary (Failed)"), so the rows are found by their label
      const caseRows = view.locator(".monaco-list-row", { has: page.locator(".label", { hasText: /^seed \d+/ }) });
      const caseRow = caseRows.first();
      await caseRow.waitFor({ timeout: 20_000 });
      const cases = await caseRows.evaluateAll((els) =>
        els.map((e) => `${e.querySelector(".label")?.textContent ?? ""} / ${e.getAttribute("aria-label") ?? ""}`),
      );
      if (!cases.every((c) => /\(Failed\)/.test(c))) throw new Error(`case children not all failed: ${cases.join(" | ")}`);
      if (!cases.every((c) => /x=\[\d+, \d+\]/.test(c))) throw new Error(`case children without their case: ${cases.join(" | ")}`);
      const seed = /^seed (\d+)/.exec(cases[0])?.[1];
      if (!seed) throw new Error(`no seed in ${cases[0]}`);
      await caseRow.hover();
      const action = caseRow.locator('.action-label[aria-label="Reproduce This Case"]');
      await action.waitFor({ state: "visible", timeout: 10_000 });
      await shot(page, "8-case-children.png");
      await action.click();
      await page.locator(".tab.active", { hasText: `${OP}_${seed}.py` }).waitFor({ timeout: 120_000 });
      await clearNotifications(page);
      return `${cases.length} case children: ${cases.slice(0, 3).join(" | ")}; Reproduce opened ${OP}_${seed}.py`;
    });

    await step("the Debug profile says why it cannot debug without the Python extension", async () => {
      await quickOpen(page, FILE);
      await gotoLine(page, defLineOf(), 5);
      await command(page, "Test: Debug Test at Cursor");
      const why = await toast(page, /Debug needs the Python extension/, 120_000);
      const text = (await why.innerText()).replace(/\s+/g, " ");
      await shot(page, "9-debug-profile-why-not.png");
      await clearNotifications(page);
      return text.slice(0, 200);
    });

    await step("continuous run (the watch profile): turned on for the op, a save of its file shows as a watch run", async () => {
      await clearNotifications(page);
      await command(page, "View: Show Testing");
      const view = page.locator(".test-explorer");
      const wsRow = view.locator(".monaco-list-row", { hasText: "buggy" }).first();
      await wsRow.waitFor({ timeout: 30_000 });
      if ((await wsRow.getAttribute("aria-expanded")) === "false") await wsRow.locator(".monaco-tl-twistie").click();
      const row = view.locator(`.monaco-list-row[aria-label^="${OP} ("]`).first();
      await row.waitFor({ timeout: 20_000 });
      await row.click({ button: "right" });
      const turnOn = page.locator(".monaco-menu .action-label", { hasText: /^Turn on Continuous Run/ }).first();
      await turnOn.waitFor({ state: "visible", timeout: 10_000 });
      await turnOn.hover();
      await turnOn.click();
      await page.locator(".monaco-menu").first().waitFor({ state: "hidden", timeout: 5000 }).catch(async () => {
        await page.keyboard.press("Enter"); // the item is highlighted under the mouse: Enter runs it
      });
      const on = await waitFor(
        "the extension's log: continuous run on for the op",
        async () => /continuous run \(\w+\) on: [^\n]*softmax_tail_mask/.exec(serverLog(userData))?.[0],
        20_000,
        500,
      );
      await shot(page, "9a-continuous-run-on.png");
      const before = saveRuns(ws);
      const original = fs.readFileSync(path.join(ws, FILE), "utf8");
      await quickOpen(page, FILE);
      await gotoLine(page, 1, 1);
      await page.keyboard.type("# saved under continuous run\n");
      await page.keyboard.press("Control+S");
      await waitFor("the save validated the op", async () => saveRuns(ws) > before, 180_000, 1000);
      // the watched op's results come in as a run of the continuous request, named "gpuemu (watch)"
      await command(page, "Test: Show Output");
      await command(page, "Test Results: Focus on Test Results View");
      // the runs tree beside the output: its rows' labels (the panel is narrow: text is cut, not the DOM's)
      const rows = page.locator(".test-output-peek-tree .monaco-list-row");
      await rows.first().waitFor({ state: "visible", timeout: 20_000 });
      let seen: string[] = [];
      const named = await waitFor(
        "a run named gpuemu (watch) in the Test Results view",
        async () => {
          seen = await rows.evaluateAll((els) => els.map((e) => `${e.getAttribute("aria-label") ?? ""} / ${e.textContent ?? ""}`));
          const hit = seen.find((t) => /gpuemu \(watch\)/.test(t));
          // the runs of one save are listed newest first, the rest folded under "N older results"
          const older = rows.filter({ hasText: /older results/ }).first();
          if (!hit && (await older.count()) && (await older.getAttribute("aria-expanded")) !== "true") await older.click();
          return hit;
        },
        60_000,
        1000,
      ).catch((err) => {
        throw new Error(`${String(err)}; runs tree rows: ${seen.join(" | ")}`);
      });
      await shot(page, "9b-continuous-run-result.png");
      // off again, and the file back as it was
      await command(page, "Test: Stop Continuous Run");
      fs.writeFileSync(path.join(ws, FILE), original); // the editor is not dirty: it reloads the file
      return `${on}; watch run listed: ${named.slice(0, 200)}`;
    });

    await step("gpuemu.toml completion offers the distributions values", async () => {
      // the engine's list, from the server's own Python
      const venvPython = path.join(path.dirname(SERVER), "python");
      const expected = JSON.parse(
        execFileSync(
          fs.existsSync(venvPython) ? venvPython : "python3",
          ["-c", "import json; from gpuemu_ls.engine.config.keys import DISTRIBUTIONS; print(json.dumps(list(DISTRIBUTIONS)))"],
          { encoding: "utf8", timeout: 60_000, cwd: REPO },
        ),
      ) as string[];
      await clearNotifications(page);
      await quickOpen(page, "gpuemu.toml");
      // gpuemu.toml opens as TOML (the extension's grammar), not Plain Text: a key, a string and a table header
      // each in their own colour
      const mode = (await page.locator('[id="status.editor.mode"]').first().innerText()).trim();
      if (mode !== "TOML") throw new Error(`gpuemu.toml opened as '${mode}'`);
      const tomlEditor = page.locator(".editor-instance .monaco-editor").first();
      const colour = async (lineText: string, token: string) =>
        tomlEditor
          .locator(".view-line", { hasText: lineText })
          .first()
          .locator("span > span", { hasText: new RegExp(`^${token.replace(/[[\]"]/g, "\\$&")}$`) })
          .first()
          .evaluate((e) => (globalThis as unknown as { getComputedStyle(el: unknown): { color: string } }).getComputedStyle(e).color);
      const colours = [await colour(`name = "${OP}"`, "name"), await colour(`name = "${OP}"`, `"${OP}"`), await colour("[[ops]]", "ops")];
      if (new Set(colours).size !== 3) throw new Error(`key, string and table name are not told apart: ${colours.join(", ")}`);
      const nameLine = fs.readFileSync(path.join(ws, "gpuemu.toml"), "utf8").split("\n").indexOf(`name = "${OP}"`) + 1;
      await gotoLine(page, nameLine, 1);
      await page.keyboard.press("End");
      await page.keyboard.press("Enter");
      await page.keyboard.type('distributions = ["', { delay: 40 });
      const widget = page.locator(".editor-widget.suggest-widget");
      const labels = widget.locator(".monaco-list-row .label-name");
      await waitFor(
        "the suggest widget with completions",
        async () => {
          if ((await widget.isVisible()) && (await labels.count()) > 0) return true;
          await page.keyboard.press("Control+Space");
          await page.waitForTimeout(1500);
          return undefined;
        },
        30_000,
        500,
      );
      await page.waitForTimeout(500);
      const first = (await labels.allInnerTexts()).map((l) => l.trim());
      await shot(page, "9-toml-completion.png");
      // the list is virtual: walk it to see every item
      const seen = new Set<string>(first);
      for (let i = 0; i < expected.length + 2; i++) {
        await page.keyboard.press("ArrowDown");
        await page.waitForTimeout(80);
        for (const l of await labels.allInnerTexts()) seen.add(l.trim());
      }
      await page.keyboard.press("Escape");
      await command(page, "File: Revert File");
      const missing = expected.filter((d) => !seen.has(d));
      if (missing.length) throw new Error(`not offered: ${missing.join(", ")}; offered: ${[...seen].join(", ")}`);
      const other = first.filter((l) => !expected.includes(l));
      if (other.length) throw new Error(`offered besides the distributions: ${other.join(", ")}`);
      return `language ${mode}, colours ${colours.join(" / ")}; ${seen.size} items: ${[...seen].join(", ")}`;
    });

    await step(".gpuemu/ is hidden from the Explorer", async () => {
      if (!fs.existsSync(path.join(ws, ".gpuemu"))) throw new Error(".gpuemu/ was never written");
      await command(page, "View: Show Explorer");
      const rows = page.locator(".explorer-folders-view .monaco-list-row");
      await rows.first().waitFor({ timeout: 20_000 });
      const labels = (await rows.allInnerTexts()).map((t) => t.trim());
      if (labels.some((l) => l === ".gpuemu")) throw new Error(`.gpuemu listed: ${labels.join(", ")}`);
      if (!labels.includes("gpuemu.toml")) throw new Error(`explorer rows: ${labels.join(", ")}`);
      await shot(page, "10-explorer.png");
      return `explorer: ${labels.join(", ")}`;
    });

    await step("gpuemu: Open Correctness Report shows the workspace's HTML report in a tab, failing op included", async () => {
      await clearNotifications(page);
      await command(page, "gpuemu: Open Correctness Report");
      const tab = page.locator(".tab", { hasText: "gpuemu report:" }).first();
      await tab.waitFor({ timeout: 120_000 });
      // a webview is an iframe holding the page's own iframe
      const body = page.frameLocator("iframe.webview").frameLocator("iframe#active-frame").locator("body");
      const text = await waitFor(
        "the report's page in the webview",
        async () => {
          const t = (await body.innerText({ timeout: 2_000 }).catch(() => "")).replace(/\s+/g, " ");
          return t.includes("correctness report") && t.includes(OP) ? t : undefined;
        },
        60_000,
        500,
      );
      await shot(page, "10b-report.png");
      const errors = (await toasts(page)).filter((t) => /could not be built/.test(t));
      if (errors.length) throw new Error(`the report failed: ${errors.join(" || ")}`);
      await command(page, "View: Close Editor");
      return `report tab open: ${text.slice(0, 160)}`;
    });

    await step("calibrate a buggy op: progress while it runs, then one warning; the log has no error, nor after a restart", async () => {
      // variance_empty_split (NaN where N == 1): the cheapest buggy op of the workspace to calibrate
      const target = "variance_empty_split";
      await clearNotifications(page);
      const logBefore = serverLog(userData).length;
      await command(page, "gpuemu: Calibrate Tolerances of Op...");
      const input = page.locator(".quick-input-widget input");
      await input.waitFor({ state: "visible", timeout: 10_000 });
      await input.fill(target);
      // the exact name comes first (its twin variance_empty_split_ok second): Enter picks it
      await page.locator(".quick-input-widget .monaco-list-row").first().waitFor({ timeout: 10_000 });
      await page.waitForTimeout(300);
      await page.keyboard.press("Enter");
      // a notification counts the cases while they run
      const progress = await toast(page, new RegExp(`gpuemu: calibrating ${target}(?!_ok)`), 30_000);
      const counted = await waitFor(
        "the calibration's progress counting its cases",
        async () => {
          const t = (await progress.innerText().catch(() => "")).replace(/\s+/g, " ");
          return /float32: \d+ of \d+ cases/.test(t) ? t : undefined;
        },
        120_000,
        200,
      );
      await shot(page, "9c-calibrate-progress.png");
      const refusal = await toast(page, new RegExp(`refusing to calibrate '${target}'`), 240_000);
      await page.waitForTimeout(1500); // a second message or a lingering progress would show by now
      const refusalText = (await refusal.innerText()).replace(/\s+/g, " ");
      const severity = (await refusal.locator(".codicon-warning, .codicon-error, .codicon-info").first().getAttribute("class")) ?? "";
      if (!/codicon-warning/.test(severity)) throw new Error(`the refusal is not a warning: ${severity}`);
      const about = (await toasts(page)).filter((t) => /calibrat/i.test(t));
      if (about.length !== 1) throw new Error(`expected one notification about the calibration, got ${about.length}: ${about.join(" || ")}`);
      await shot(page, "9d-calibrate-refused.png");
      // the log: the refusal at info level, no traceback, no error
      const restartMark = serverLog(userData).length;
      await command(page, "gpuemu: Restart Language Server");
      await waitFor("the server restarted", async () => serverLog(userData).slice(restartMark).includes(`starting ${SERVER}`), 60_000, 500);
      const status = page.locator(".statusbar-item", { hasText: "gpuemu" }).first();
      await waitFor("the status bar back", async () => !/stopped|starting/.test(await status.innerText()), 60_000, 500);
      await page.waitForTimeout(2000); // the old server's exit, its last lines
      const logged = serverLog(userData).slice(logBefore);
      if (!new RegExp(`\\[info\\] gpuemu: calibrate ${target}: refusing`).test(logged)) throw new Error(`no info line for the refusal: ${logged.slice(0, 1500)}`);
      const errors = logged.split("\n").filter((l) => /\[error\]|Traceback/.test(l));
      if (errors.length) throw new Error(`the log marks errors: ${errors.join(" || ").slice(0, 1500)}`);
      if (!/\[info\] gpuemu-ls stopped/.test(logged.slice(restartMark - logBefore))) throw new Error(`the restart's stop is not an info line: ${logged.slice(restartMark - logBefore, restartMark - logBefore + 800)}`);
      await clearNotifications(page);
      return `progress: ${counted.slice(0, 120)}; message: ${refusalText.slice(0, 200)}; restart logged at info, no error line`;
    });

    await step("a missing server: one message with Install (no ENOENT), and fixing the setting restarts it", async () => {
      await clearNotifications(page);
      const machine = path.join(userData, "Machine", "settings.json");
      const good = fs.readFileSync(machine, "utf8");
      const missing = path.join(tmp, "nowhere", "gpuemu-ls");
      fs.writeFileSync(machine, JSON.stringify({ ...JSON.parse(good), "gpuemu.server.command": missing }, null, 2));
      const note = await toast(page, /gpuemu-ls, the language server, is not installed/, 60_000);
      const buttons = (await note.locator("a, .monaco-button").allInnerTexts()).map((b) => b.trim());
      if (!buttons.includes("Install")) throw new Error(`no Install action: ${buttons.join(", ")}`);
      await page.waitForTimeout(4000);
      const all = await toasts(page);
      const dup = all.filter((t) => /not installed|ENOENT|could not start|couldn't create connection/i.test(t));
      if (dup.length !== 1) throw new Error(`expected one message, got ${dup.length}: ${dup.join(" || ")}`);
      const status = page.locator(".statusbar-item", { hasText: "gpuemu" }).first();
      await waitFor("status bar: not installed", async () => /not installed/.test(await status.innerText()), 20_000);
      await shot(page, "11-missing-server.png");
      fs.writeFileSync(machine, good);
      const back = await waitFor(
        "the server restarted after the setting was fixed",
        async () => {
          const t = (await status.innerText()).trim();
          return /not installed|stopped|starting/.test(t) ? undefined : t;
        },
        60_000,
        500,
      );
      // the message no longer applies: it is gone, not left for the user to close
      await waitFor("the 'not installed' message withdrawn", async () => !(await toasts(page)).some((t) => /not installed/.test(t)), 20_000, 500);
      await clearNotifications(page);
      return `message: ${dup[0].slice(0, 200)}; actions: ${buttons.join(", ")}; status after the fix: ${back}; the message withdrawn`;
    });

    await step("Install runs pip into the server's Python as a task, then starts the server it installed", async () => {
      // a fresh virtual environment without gpuemu-ls, named by gpuemu.server.command: Install must put
      // gpuemu-ls into that environment's Python (from gpuemu.server.installSource, this checkout) and start it
      await clearNotifications(page);
      const machine = path.join(userData, "Machine", "settings.json");
      const good = fs.readFileSync(machine, "utf8");
      const venv = path.join(tmp, "fresh-venv");
      execFileSync("python3", ["-m", "venv", venv], { timeout: 120_000 });
      const server = path.join(venv, "bin", "gpuemu-ls");
      fs.writeFileSync(
        machine,
        JSON.stringify({ ...JSON.parse(good), "gpuemu.server.command": server, "gpuemu.server.installSource": REPO }, null, 2),
      );
      const note = await toast(page, /gpuemu-ls, the language server, is not installed/, 60_000);
      if (!(await note.innerText()).includes(path.join(venv, "bin", "python"))) throw new Error(`not offered for the venv's Python: ${await note.innerText()}`);
      await note.locator("a", { hasText: /^Install$/ }).first().click();
      await toast(page, /Installing gpuemu-ls into /, 30_000); // the install notice replaces "not installed"
      const doneText = await waitFor(
        "pip to end",
        async () => /gpuemu-ls installed into [^\n]*: starting it/.exec(serverLog(userData))?.[0] ?? (await toasts(page)).find((t) => /pip install of gpuemu-ls .* failed/.test(t)),
        480_000,
        1000,
      );
      if (/failed/.test(doneText)) throw new Error(doneText);
      if (!fs.existsSync(server)) throw new Error(`${server} does not exist after Install`);
      await waitFor("the installed server started", async () => serverLog(userData).includes(`starting ${server}`), 60_000, 500);
      const status = page.locator(".statusbar-item", { hasText: "gpuemu" }).first();
      const after = await waitFor(
        "the status bar leaves 'not installed'",
        async () => {
          const t = (await status.innerText()).trim();
          return /not installed|stopped|starting/.test(t) ? undefined : t;
        },
        60_000,
        500,
      );
      // neither "not installed" nor "installing" stays once the server runs
      await waitFor(
        "the install notices withdrawn",
        async () => !(await toasts(page)).some((t) => /not installed|Installing gpuemu-ls|installed into/.test(t)),
        20_000,
        500,
      ).catch(async (err) => {
        throw new Error(`${String(err)}: ${(await toasts(page)).join(" || ")}`);
      });
      await shot(page, "12-installed-server.png");
      fs.writeFileSync(machine, good);
      await clearNotifications(page);
      return `${doneText.split("\n")[0]}; status: ${after}; the notices withdrawn`;
    });

    await step("untrusted workspace: configuration diagnostics only, nothing runs", async () => {
      // a second VS Code on a fresh copy, with workspace trust on and refused
      await page.close();
      for (const proc of servers) proc.kill("SIGTERM");
      const ws2 = path.join(tmp, "untrusted", "buggy");
      copyWorkspace(ws2);
      const userData2 = path.join(tmp, "user-data-untrusted");
      writeUserData(userData2, true);
      const url2 = await startCodeServer(userData2, ws2, false, "code-server-untrusted.log");
      const page2 = await context.newPage();
      currentPage = page2;
      await page2.goto(`${url2}/?folder=${encodeURIComponent(ws2)}`);
      await page2.locator(".monaco-workbench").waitFor({ state: "visible", timeout: 90_000 });
      const no = page2.locator(".monaco-dialog-box .monaco-button", { hasText: "No, I don't trust the authors" });
      await no.waitFor({ state: "visible", timeout: 60_000 });
      await shot(page2, "6-trust-prompt.png");
      await no.click();
      await page2.locator(".explorer-folders-view .monaco-list-row", { hasText: "gpuemu.toml" }).first().waitFor({ timeout: 60_000 });
      await page2.locator(".statusbar-item", { hasText: "gpuemu" }).first().waitFor({ timeout: 60_000 });
      // the server is started with trusted = false
      const logOf = () => {
        const logs = path.join(userData2, "logs");
        for (const f of fs.existsSync(logs) ? (fs.readdirSync(logs, { recursive: true }) as string[]) : []) {
          if (path.basename(f) === "gpuemu-ls.log") return fs.readFileSync(path.join(logs, f), "utf8");
        }
        return "";
      };
      await waitFor("the server log saying the workspace is not trusted", async () => /NOT trusted/.test(logOf()), 30_000, 500);
      // open the buggy op: nothing runs, so no failure appears
      await quickOpen(page2, FILE);
      await page2.keyboard.press("Control+Shift+M");
      const panel = page2.locator(".markers-panel");
      await panel.waitFor({ state: "visible", timeout: 20_000 });
      // configuration diagnostics still work: an unknown key typed into gpuemu.toml is reported
      await quickOpen(page2, "gpuemu.toml");
      const nameLine = fs.readFileSync(path.join(ws2, "gpuemu.toml"), "utf8").split("\n").indexOf(`name = "${OP}"`) + 1;
      await gotoLine(page2, nameLine, 1);
      await page2.keyboard.press("End");
      await page2.keyboard.press("Enter");
      await page2.keyboard.type('refrence = "typo"');
      const unknown = await waitFor(
        "an 'unknown key' problem for the typed key",
        async () => {
          const text = (await panel.innerText()).replace(/\s+/g, " ");
          return /unknown key 'refrence'/.test(text) ? text : undefined;
        },
        30_000,
        500,
      );
      // the problem's "did you mean" is a quick fix that applies it
      const fix = page2.locator(".action-widget .monaco-list-row", { hasText: "Change 'refrence' to 'reference'" }).first();
      await waitFor(
        "the Quick Fix 'Change 'refrence' to 'reference''",
        async () => {
          if (await fix.isVisible()) return true;
          await page2.keyboard.press("Escape");
          await gotoLine(page2, nameLine + 1, 2);
          await page2.keyboard.press("Control+.");
          await page2.waitForTimeout(1500);
          return undefined;
        },
        30_000,
        500,
      );
      await shot(page2, "7a-did-you-mean-fix.png");
      for (let i = 0; i < 10 && !((await page2.locator(".action-widget .monaco-list-row.focused").innerText().catch(() => "")).includes("refrence")); i++) {
        await page2.keyboard.press("ArrowDown");
        await page2.waitForTimeout(100);
      }
      await page2.keyboard.press("Enter");
      const fixed = await waitFor(
        "the fix applied: the key reads 'reference'",
        async () => {
          const t = (await page2.locator(".editor-instance .view-line").allInnerTexts()).map((l) => l.replace(/\u00a0/g, " "));
          return t.some((l) => l.trim() === 'reference = "typo"') ? t.find((l) => l.trim() === 'reference = "typo"') : undefined;
        },
        20_000,
        500,
      );
      await waitFor("the 'unknown key' problem gone", async () => !/unknown key 'refrence'/.test((await panel.innerText()).replace(/\s+/g, " ")), 20_000, 500);
      await page2.waitForTimeout(6000); // time in which a trusted server would have validated the op
      const text = (await panel.innerText()).replace(/\s+/g, " ");
      if (/wrong values|\[mismatch\]/.test(text)) throw new Error(`a validation result appeared in an untrusted workspace: ${text.slice(0, 300)}`);
      if (fs.existsSync(path.join(ws2, ".gpuemu", "repro"))) throw new Error("workspace code ran (a reproduction was written)");
      await shot(page2, "7-untrusted.png");
      const status = (await page2.locator(".statusbar-item", { hasText: "gpuemu" }).first().innerText()).trim();
      // saved, the broken gpuemu.toml (the key is there twice now) shows in the Testing view under its workspace
      // as "gpuemu.toml:LINE:COL: ...", not as an item named by the file's absolute path
      await page2.keyboard.press("Control+S");
      await command(page2, "View: Show Testing");
      const tests2 = page2.locator(".test-explorer");
      await tests2.waitFor({ state: "visible", timeout: 20_000 });
      let rowsSeen: string[] = [];
      const tomlError = await waitFor(
        "the gpuemu.toml error in the Testing view",
        async () => {
          const wsRow = tests2.locator(".monaco-list-row", { hasText: "buggy" }).first();
          if ((await wsRow.count()) && (await wsRow.getAttribute("aria-expanded")) === "false") await wsRow.locator(".monaco-tl-twistie").click();
          rowsSeen = (await tests2.locator(".monaco-list-row").allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim());
          return rowsSeen.find((t) => /gpuemu\.toml:\d+/.test(t) || t.includes(ws2));
        },
        30_000,
        500,
      ).catch((err) => {
        throw new Error(`${String(err)}; rows: ${rowsSeen.join(" | ")}`);
      });
      if (tomlError.includes(ws2) || !/^gpuemu\.toml:\d+:\d+: /.test(tomlError)) throw new Error(`the toml error reads '${tomlError}'`);
      await shot(page2, "7b-toml-error-in-testing.png");
      return `status bar: ${status}; problems: ${unknown.slice(0, 160)}; quick fix applied: ${fixed?.trim()}; Testing: ${tomlError.slice(0, 160)}`;
    });
  } finally {
    if (browser) await browser.close().catch(() => undefined);
    for (const proc of servers) {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        await new Promise((r) => setTimeout(r, 1000));
        if (proc.exitCode === null) proc.kill("SIGKILL");
      }
    }
    // the extension's output channels (server log) as artifacts
    for (const [dir, prefix] of [
      [path.join(userData, "logs"), "output-"],
      [path.join(tmp, "user-data-untrusted", "logs"), "output-untrusted-"],
    ]) {
      if (!fs.existsSync(dir)) continue;
      for (const f of fs.readdirSync(dir, { recursive: true }) as string[]) {
        if (/gpuemu/i.test(path.basename(f)) && f.endsWith(".log")) {
          fs.copyFileSync(path.join(dir, f), path.join(ARTIFACTS, `${prefix}${path.basename(f)}`));
        }
      }
    }
    fs.writeFileSync(
      path.join(ARTIFACTS, "results.json"),
      JSON.stringify({ server: SERVER, vsix: VSIX, seconds: (Date.now() - t0) / 1000, steps: results }, null, 2),
    );
    if (!process.env.GPUEMU_E2E_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
    else log(`kept ${tmp}`);
  }
  const failed = results.filter((r) => !r.ok);
  log(`${results.length - failed.length}/${results.length} steps passed in ${((Date.now() - t0) / 1000).toFixed(1)}s; artifacts in ${ARTIFACTS}`);
  return failed.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`error: ${err instanceof Error ? err.stack : String(err)}`);
    process.exit(2);
  },
);
