/**
 * The HTML report built by the CLI, without VS Code (unit-testable): `gpuemu report --format html` of a
 * workspace into a private temporary folder (mkdtemp: this user's only), read back, the folder removed.
 */
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** The CLI's arguments after the Python: the report of `workspace` into `out`. */
export function reportArgs(workspace: string, out: string): string[] {
  return ["-m", "gpuemu_ls", "-C", workspace, "report", "--format", "html", "--output", out];
}

/** The page's HTML. Exit 1 with the page written only says a check did not pass (or nothing is stored yet);
 * anything else is an error carrying the CLI's last line of stderr. */
export async function buildReport(python: string, env: Record<string, string> | undefined, workspace: string): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpuemu-report-"));
  const out = path.join(dir, "report.html");
  try {
    await new Promise<void>((resolve, reject) => {
      const options = { cwd: dir, env: { ...process.env, ...env }, timeout: 300_000, maxBuffer: 16 << 20 };
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
