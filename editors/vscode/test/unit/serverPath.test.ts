import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { expandPath, resolveServer, venvCandidates } from "../../src/serverPath";

const base = {
  configured: "",
  args: [] as string[],
  folders: ["/ws/a", "/ws/b"],
  trusted: true,
  platform: "linux" as NodeJS.Platform,
  home: "/home/u",
  exists: (_: string) => false,
};

describe("resolveServer (which gpuemu-ls to start)", () => {
  it("uses the gpuemu.server.command setting first", () => {
    const r = resolveServer({ ...base, configured: "/opt/gpuemu/bin/gpuemu-ls", args: ["-v"], exists: () => true });
    assert.deepEqual(r, { command: "/opt/gpuemu/bin/gpuemu-ls", args: ["-v"], source: "setting", cwd: "/ws/a" });
  });

  it("expands ${workspaceFolder}, ${userHome}, ~ and folder-relative paths in the setting", () => {
    assert.equal(resolveServer({ ...base, configured: "${workspaceFolder}/env/bin/gpuemu-ls" }).command, "/ws/a/env/bin/gpuemu-ls");
    assert.equal(resolveServer({ ...base, configured: "~/bin/gpuemu-ls" }).command, "/home/u/bin/gpuemu-ls");
    assert.equal(resolveServer({ ...base, configured: "${userHome}/x" }).command, "/home/u/x");
    assert.equal(resolveServer({ ...base, configured: "tools/gpuemu-ls" }).command, "/ws/a/tools/gpuemu-ls");
    assert.equal(resolveServer({ ...base, configured: "gpuemu-ls-dev" }).command, "gpuemu-ls-dev", "a bare name stays a PATH lookup");
  });

  it("takes the workspace's .venv/bin/gpuemu-ls when it exists (first folder that has one)", () => {
    const r = resolveServer({ ...base, exists: (f) => f === "/ws/b/.venv/bin/gpuemu-ls" });
    assert.deepEqual(r, { command: "/ws/b/.venv/bin/gpuemu-ls", args: [], source: "workspace-venv", cwd: "/ws/a" });
  });

  it("falls back to gpuemu-ls on PATH", () => {
    assert.deepEqual(resolveServer(base), { command: "gpuemu-ls", args: [], source: "path", cwd: "/ws/a" });
    assert.equal(resolveServer({ ...base, folders: [] }).cwd, undefined);
  });

  it("never starts a binary from an untrusted workspace's .venv", () => {
    const r = resolveServer({ ...base, trusted: false, exists: () => true });
    assert.equal(r.source, "path");
    assert.equal(r.command, "gpuemu-ls");
  });

  it("knows the Windows venv layout", () => {
    assert.deepEqual(venvCandidates("C:\\ws", "win32"), ["C:\\ws\\.venv\\Scripts\\gpuemu-ls.exe", "C:\\ws\\.venv\\Scripts\\gpuemu-ls"]);
    const r = resolveServer({ ...base, platform: "win32", folders: ["C:\\ws"], exists: (f) => f.endsWith(".exe") });
    assert.equal(r.command, "C:\\ws\\.venv\\Scripts\\gpuemu-ls.exe");
    assert.equal(expandPath("tools\\gpuemu-ls.exe", ["C:\\ws"], "C:\\Users\\u", "win32"), "C:\\ws\\tools\\gpuemu-ls.exe");
  });
});
