/**
 * gpuemu: Open Correctness Report. `gpuemu report --format html` of a workspace's stored results, built in a
 * private temporary folder (reportBuild.ts) and shown in a webview. The page is
 * self-contained: its own Content-Security-Policy lets it load nothing, its one script (the op filter) is
 * allowed by hash, so the webview needs no local resources.
 */
import * as path from "node:path";
import * as vscode from "vscode";
import { buildReport } from "./reportBuild";

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
