/**
 * Which `gpuemu-ls` to start (pure: file existence and platform are passed in, for unit tests).
 *
 * Order: the `gpuemu.server.command` setting; else the workspace's own `.venv` (trusted workspaces
 * only: a binary inside an untrusted workspace is workspace code); else `gpuemu-ls` on PATH.
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
}

export interface ResolvedServer {
  command: string;
  args: string[];
  source: "setting" | "workspace-venv" | "path";
  cwd?: string;
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

export function resolveServer(input: ResolveInput): ResolvedServer {
  const args = [...input.args];
  const cwd = input.folders[0];
  if (input.configured.trim() !== "") {
    return {
      command: expandPath(input.configured, input.folders, input.home, input.platform),
      args,
      source: "setting",
      cwd,
    };
  }
  if (input.trusted) {
    for (const folder of input.folders) {
      for (const candidate of venvCandidates(folder, input.platform)) {
        if (input.exists(candidate)) return { command: candidate, args, source: "workspace-venv", cwd };
      }
    }
  }
  return { command: BIN, args, source: "path", cwd };
}
