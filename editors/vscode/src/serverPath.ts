/**
 * Which `gpuemu-ls` to start (pure: file existence and platform are passed in, for unit tests).
 *
 * Order: the `gpuemu-ls` next to the Python extension's selected interpreter (when that extension is
 * installed and the interpreter has gpuemu-ls); else the `gpuemu.server.command` setting; else the
 * workspace's own `.venv` (trusted workspaces only: a binary inside an untrusted workspace is
 * workspace code); else `gpuemu-ls` on PATH; else, in the bundled variant of the extension (a .vsix that
 * carries the server's Python package and its dependencies in `bundled/libs`, as Microsoft's template for
 * Python tools does), that package run by a Python (the selected interpreter, else `python3` on PATH).
 * `missing` says when the chosen one does not exist, so the extension shows one message with an Install
 * button instead of spawning it (ENOENT).
 */
import * as path from "node:path";

export interface ResolveInput {
  /** `gpuemu.server.command` ("" when unset). */
  configured: string;
  /** `gpuemu.server.args`. */
  args: readonly string[];
  /** fsPaths of the workspace folders, in order. */
  folders: readonly string[];
  trusted: boolean;
  platform: NodeJS.Platform;
  home: string;
  exists: (file: string) => boolean;
  /** The Python extension's selected interpreter (its executable), when that extension is installed. */
  interpreter?: string;
  /** The PATH environment variable (to tell whether a bare `gpuemu-ls` would be found). */
  pathEnv?: string;
  /** The extension's `bundled/libs` folder, in the bundled variant only (undefined when it has none). */
  bundledLibs?: string;
}

export interface ResolvedServer {
  command: string;
  args: string[];
  source: "interpreter" | "setting" | "workspace-venv" | "path" | "bundled";
  /** Extra environment for the server (the bundled variant's PYTHONPATH). */
  env?: Record<string, string>;
  cwd?: string;
  /** The command does not exist (no file there, or not on PATH): do not spawn it. */
  missing?: boolean;
  /** The Python to `pip install` gpuemu-ls into when it is missing. */
  python?: string;
}

const BIN = "gpuemu-ls";

/** `${workspaceFolder}`, `${userHome}` and a leading `~` expanded; a relative path with a separator is taken from the first folder. */
export function expandPath(p: string, folders: readonly string[], home: string, platform: NodeJS.Platform): string {
  const pathMod = platform === "win32" ? path.win32 : path.posix;
  let out = p.trim();
  const first = folders[0];
  out = out.replace(/\$\{userHome\}/g, home);
  if (first !== undefined) out = out.replace(/\$\{workspaceFolder\}/g, first);
  if (out === "~" || out.startsWith("~/") || out.startsWith("~\\")) out = home + out.slice(1);
  const hasSep = out.includes("/") || (platform === "win32" && out.includes("\\"));
  if (hasSep && !pathMod.isAbsolute(out) && first !== undefined) out = pathMod.join(first, out);
  return out;
}

/** The workspace virtual-environment locations of the server, per platform. */
export function venvCandidates(folder: string, platform: NodeJS.Platform): string[] {
  if (platform === "win32") {
    return [path.win32.join(folder, ".venv", "Scripts", `${BIN}.exe`), path.win32.join(folder, ".venv", "Scripts", BIN)];
  }
  return [path.posix.join(folder, ".venv", "bin", BIN)];
}

/** `gpuemu-ls` in the same folder as a Python interpreter (bin/ or Scripts\\). */
export function interpreterServer(python: string, platform: NodeJS.Platform): string[] {
  const pathMod = platform === "win32" ? path.win32 : path.posix;
  const dir = pathMod.dirname(python);
  return platform === "win32" ? [pathMod.join(dir, `${BIN}.exe`), pathMod.join(dir, "Scripts", `${BIN}.exe`)] : [pathMod.join(dir, BIN)];
}

/** A bare command looked up on PATH (as spawn would), or undefined. */
export function findOnPath(command: string, pathEnv: string | undefined, platform: NodeJS.Platform, exists: (f: string) => boolean): string | undefined {
  const pathMod = platform === "win32" ? path.win32 : path.posix;
  const sep = platform === "win32" ? ";" : ":";
  const exts = platform === "win32" ? ["", ".exe", ".cmd", ".bat"] : [""];
  for (const dir of (pathEnv ?? "").split(sep)) {
    if (!dir) continue;
    for (const ext of exts) {
      const f = pathMod.join(dir, command + ext);
      if (exists(f)) return f;
    }
  }
  return undefined;
}

/** The Python a server path belongs to (`<venv>/bin/gpuemu-ls` -> `<venv>/bin/python`), for installs and reproductions. */
export function pythonBeside(server: string, platform: NodeJS.Platform, exists: (f: string) => boolean): string | undefined {
  const pathMod = platform === "win32" ? path.win32 : path.posix;
  if (!pathMod.isAbsolute(server)) return undefined;
  const dir = pathMod.dirname(server);
  const names = platform === "win32" ? ["python.exe"] : ["python", "python3"];
  for (const n of names) {
    const f = pathMod.join(dir, n);
    if (exists(f)) return f;
  }
  return undefined;
}

/** Without the keys whose value is undefined (tidy results, simple comparisons). */
function clean(r: ResolvedServer): ResolvedServer {
  for (const k of Object.keys(r) as (keyof ResolvedServer)[]) if (r[k] === undefined) delete r[k];
  return r;
}

export function resolveServer(input: ResolveInput): ResolvedServer {
  return clean(resolveUncleaned(input));
}

function resolveUncleaned(input: ResolveInput): ResolvedServer {
  const args = [...input.args];
  const cwd = input.folders[0];
  const hasSep = (c: string) => c.includes("/") || (input.platform === "win32" && c.includes("\\"));
  if (input.interpreter) {
    for (const candidate of interpreterServer(input.interpreter, input.platform)) {
      if (input.exists(candidate)) return { command: candidate, args, source: "interpreter", cwd, python: input.interpreter };
    }
  }
  const python = (server: string) => input.interpreter ?? pythonBeside(server, input.platform, input.exists);
  if (input.configured.trim() !== "") {
    const command = expandPath(input.configured, input.folders, input.home, input.platform);
    const found = hasSep(command) ? input.exists(command) : findOnPath(command, input.pathEnv, input.platform, input.exists) !== undefined;
    return { command, args, source: "setting", cwd, missing: !found, python: python(command) };
  }
  if (input.trusted) {
    for (const folder of input.folders) {
      for (const candidate of venvCandidates(folder, input.platform)) {
        if (input.exists(candidate)) return { command: candidate, args, source: "workspace-venv", cwd, python: python(candidate) };
      }
    }
  }
  const onPath = findOnPath(BIN, input.pathEnv, input.platform, input.exists);
  if (onPath === undefined && input.bundledLibs !== undefined) {
    const py = input.interpreter ?? findOnPath(input.platform === "win32" ? "python" : "python3", input.pathEnv, input.platform, input.exists);
    if (py !== undefined) return bundledServer(py, input.bundledLibs, args, cwd);
  }
  return { command: BIN, args, source: "path", cwd, missing: onPath === undefined, python: input.interpreter ?? (onPath ? pythonBeside(onPath, input.platform, input.exists) : undefined) };
}

/** The bundled package's entry point, the one the `gpuemu-ls` script runs. */
export const BUNDLED_ENTRY = "from gpuemu_ls.cli import server_main; raise SystemExit(server_main())";

/**
 * The bundled variant's server: `python -P -c <entry>` with the bundled libraries first on PYTHONPATH. `-P`
 * (CPython 3.11+, as the bundled wheels are) keeps the working directory, the workspace, off sys.path: a
 * workspace file named like a module the server imports must not replace it.
 */
export function bundledServer(python: string, libs: string, args: string[], cwd: string | undefined): ResolvedServer {
  return { command: python, args: ["-P", "-c", BUNDLED_ENTRY, ...args], source: "bundled", cwd, python, env: { PYTHONPATH: libs } };
}

/** Where the server was looked for, for the "not found" message. */
export function missingServerMessage(r: ResolvedServer, interpreter: string | undefined): string {
  const where =
    r.source === "setting"
      ? `${r.command} (gpuemu.server.command) does not exist`
      : `no gpuemu-ls ${interpreter ? `beside the selected Python interpreter (${interpreter}), ` : ""}in the workspace's .venv or on PATH`;
  return `gpuemu-ls, the language server, is not installed: ${where}.`;
}

/** `python -m pip install SOURCE` (SOURCE: a checkout of gpuemu-ls or a wheel) as a process and arguments. */
export function installCommand(python: string, source: string): { command: string; args: string[] } {
  return { command: python, args: ["-m", "pip", "install", source] };
}

/** The gpuemu-ls checkout holding a folder: the nearest folder above it with a pyproject.toml naming gpuemu-ls. */
export function findCheckout(start: string, read: (file: string) => string | undefined, platform: NodeJS.Platform = "linux"): string | undefined {
  const pathMod = platform === "win32" ? path.win32 : path.posix;
  let dir = start;
  for (let i = 0; i < 40; i++) {
    const text = read(pathMod.join(dir, "pyproject.toml"));
    if (text !== undefined && /^\s*name\s*=\s*["']gpuemu[-_]ls["']/m.test(text)) return dir;
    const up = pathMod.dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
  return undefined;
}
