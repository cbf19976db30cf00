/**
 * gpuemu: Open Correctness Report. `gpuemu report --format html` of a workspace's stored results, written into
 * a private temporary folder (mkdtemp: this user's only, removed once read) and shown in a webview. The page is
 * self-contained: its own Content-Security-Policy lets it load nothing, its one script (the op filter) is
 * allowed by hash, so the webview needs no local resources.
 */
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";

/** The CLI's arguments after the Python: the report of `workspace` into `out` (exit 1 only says an op failed). */
export function reportArgs(workspace: string, out: string): string[] {
  return ["-m", "gpuemu_ls", "-C", workspace, "report", "--format", "html", "--output", out];
}

/** The page's HTML, built by the CLI in a private temporary folder that is removed afterwards. */
export async function buildReport(python: string, env: Record<string, string> | undefined, workspace: string): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpuemu-report-"));
  const out = path.join(dir, "report.html");
  try {
    await new Promise<void>((resolve, reject) => {
      const options = { cwd: workspace, env: { ...process.env, ...env }, timeout: 300_000, maxBuffer: 16 << 20 };
      execFile(python, reportArgs(workspace, out), options, (err, _stdout, stderr) => {
        const code = (err as { code?: unknown } | null)?.code;
        if (err && !(code === 1 && fs.existsSync(out))) reject(new Error(stderr.trim().split("\n").pop() || String(err)));
        else resolve();
      });
    });
    return fs.readFileSync(out, "utf8");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Ask which workspace (when there are several), build its report and show it beside the editor. */
export async function openReport(
  python: string,
  env: Record<string, string> | undefined,
  workspaces: string[],
  log: vscode.LogOutputChannel,
): Promise<void> {
  const workspace =
    workspaces.length <= 1
      ? workspaces[0]
      : await vscode.window.showQuickPick(workspaces, { title: "gpuemu: the report of which workspace?" });
  if (!workspace) {
    if (workspaces.length === 0) void vscode.window.showWarningMessage("gpuemu: no workspace with a gpuemu.toml is open");
    return;
  }
  try {
    const html = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "gpuemu: building the correctness report" },
      () => buildReport(python, env, workspace),
    );
    const panel = vscode.window.createWebviewPanel(
      "gpuemu.report",
      `gpuemu report: ${path.basename(workspace)}`,
      vscode.ViewColumn.Active,
      { enableScripts: true, enableFindWidget: true, localResourceRoots: [] },
    );
    panel.webview.html = html;
  } catch (err) {
    log.error(`gpuemu report --format html failed for ${workspace}: ${String(err)}`);
    void vscode.window.showErrorMessage(`gpuemu: the report could not be built: ${(err as Error).message}`);
  }
}
