import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  expandPath,
  findCheckout,
  findOnPath,
  BUNDLED_ENTRY,
  installCommand,
  missingServerMessage,
  pythonBeside,
  resolveServer,
  venvCandidates,
} from "../../src/serverPath";

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
    const r = resolveServer({ ...base, configured: "/opt/gpuemu/bin/gpuemu-ls", args: ["-v"], exists: (f) => f === "/opt/gpuemu/bin/gpuemu-ls" });
    assert.deepEqual(r, { command: "/opt/gpuemu/bin/gpuemu-ls", args: ["-v"], source: "setting", cwd: "/ws/a", missing: false });
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
    assert.deepEqual(resolveServer(base), { command: "gpuemu-ls", args: [], source: "path", cwd: "/ws/a", missing: true });
    const onPath = resolveServer({ ...base, pathEnv: "/usr/bin:/opt/env/bin", exists: (f) => f.startsWith("/opt/env/bin/") });
    assert.deepEqual(onPath, { command: "gpuemu-ls", args: [], source: "path", cwd: "/ws/a", missing: false, python: "/opt/env/bin/python" });
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

  it("takes gpuemu-ls beside the Python extension's selected interpreter first, before the setting", () => {
    const python = "/home/u/envs/k/bin/python";
    const r = resolveServer({
      ...base,
      configured: "/opt/gpuemu/bin/gpuemu-ls",
      interpreter: python,
      exists: (f) => f === "/home/u/envs/k/bin/gpuemu-ls" || f === "/opt/gpuemu/bin/gpuemu-ls",
    });
    assert.deepEqual(r, { command: "/home/u/envs/k/bin/gpuemu-ls", args: [], source: "interpreter", cwd: "/ws/a", python });
    const win = resolveServer({ ...base, platform: "win32", interpreter: "C:\\env\\Scripts\\python.exe", exists: (f) => f === "C:\\env\\Scripts\\gpuemu-ls.exe" });
    assert.equal(win.command, "C:\\env\\Scripts\\gpuemu-ls.exe");
  });

  it("goes on to the setting, then PATH, when the interpreter has no gpuemu-ls; installs go to that interpreter", () => {
    const python = "/usr/bin/python3.12";
    const viaSetting = resolveServer({ ...base, configured: "/opt/g/gpuemu-ls", interpreter: python, exists: (f) => f === "/opt/g/gpuemu-ls" });
    assert.equal(viaSetting.source, "setting");
    assert.equal(viaSetting.python, python);
    const none = resolveServer({ ...base, interpreter: python, pathEnv: "/usr/bin" });
    assert.deepEqual([none.source, none.missing, none.python], ["path", true, python]);
  });

  it("says a configured server that does not exist is missing (no spawn, no ENOENT)", () => {
    const r = resolveServer({ ...base, configured: "/nowhere/gpuemu-ls" });
    assert.equal(r.missing, true);
    assert.match(missingServerMessage(r, undefined), /\/nowhere\/gpuemu-ls \(gpuemu\.server\.command\) does not exist/);
    const bare = resolveServer({ ...base, configured: "gpuemu-ls-dev", pathEnv: "/a:/b", exists: (f) => f === "/b/gpuemu-ls-dev" });
    assert.equal(bare.missing, false, "a bare name is looked up on PATH");
    const p = resolveServer(base);
    assert.match(missingServerMessage(p, "/usr/bin/python3"), /beside the selected Python interpreter \(\/usr\/bin\/python3\)/);
  });
});

describe("install and PATH helpers", () => {
  it("finds a command on PATH like spawn would", () => {
    assert.equal(findOnPath("gpuemu-ls", "/x::/y", "linux", (f) => f === "/y/gpuemu-ls"), "/y/gpuemu-ls");
    assert.equal(findOnPath("gpuemu-ls", undefined, "linux", () => true), undefined);
    assert.equal(findOnPath("gpuemu-ls", "C:\\a;C:\\b", "win32", (f) => f === "C:\\b\\gpuemu-ls.exe"), "C:\\b\\gpuemu-ls.exe");
  });

  it("knows the Python of a venv's server", () => {
    assert.equal(pythonBeside("/v/bin/gpuemu-ls", "linux", (f) => f === "/v/bin/python"), "/v/bin/python");
    assert.equal(pythonBeside("gpuemu-ls", "linux", () => true), undefined);
  });

  it("installs with python -m pip install <checkout or wheel>", () => {
    assert.deepEqual(installCommand("/v/bin/python", "/src/gpuemu-ls"), { command: "/v/bin/python", args: ["-m", "pip", "install", "/src/gpuemu-ls"] });
  });

  it("finds the gpuemu-ls checkout above a workspace (examples/buggy of this repository)", () => {
    const { readFileSync } = require("node:fs") as typeof import("node:fs");
    const { join } = require("node:path") as typeof import("node:path");
    const repo = join(__dirname, "..", "..", "..", "..");
    const read = (f: string) => {
      try {
        return readFileSync(f, "utf8");
      } catch {
        return undefined;
      }
    };
    assert.equal(findCheckout(join(repo, "examples", "buggy"), read), repo);
    assert.equal(findCheckout("/", read), undefined);
    assert.equal(findCheckout("/p/q", (f) => (f === "/p/pyproject.toml" ? '[project]\nname = "other"\n' : undefined)), undefined);
  });
});

describe("the bundled variant (a .vsix carrying the server's package in bundled/libs)", () => {
  const libs = "/ext/gpuemu/bundled/libs";

  it("runs the bundled package with python3 from PATH when no gpuemu-ls is installed anywhere", () => {
    const r = resolveServer({ ...base, bundledLibs: libs, pathEnv: "/usr/bin", exists: (f) => f === "/usr/bin/python3" });
    assert.deepEqual(r, {
      command: "/usr/bin/python3",
      args: ["-P", "-c", BUNDLED_ENTRY],
      source: "bundled",
      cwd: "/ws/a",
      python: "/usr/bin/python3",
      env: { PYTHONPATH: libs },
    });
  });

  it("prefers the selected interpreter's Python, and passes gpuemu.server.args on", () => {
    const r = resolveServer({ ...base, args: ["-v"], bundledLibs: libs, interpreter: "/envs/k/bin/python", pathEnv: "/usr/bin", exists: (f) => f === "/usr/bin/python3" });
    assert.equal(r.command, "/envs/k/bin/python");
    assert.deepEqual(r.args, ["-P", "-c", BUNDLED_ENTRY, "-v"]);
  });

  it("never wins over a gpuemu-ls that is installed (interpreter, setting, workspace .venv, PATH)", () => {
    const onPath = resolveServer({ ...base, bundledLibs: libs, pathEnv: "/usr/bin", exists: (f) => f === "/usr/bin/gpuemu-ls" || f === "/usr/bin/python3" });
    assert.equal(onPath.source, "path");
    const venv = resolveServer({ ...base, bundledLibs: libs, exists: (f) => f === "/ws/a/.venv/bin/gpuemu-ls" });
    assert.equal(venv.source, "workspace-venv");
  });

  it("without a Python to run it, the server is missing (one message with Install)", () => {
    const r = resolveServer({ ...base, bundledLibs: libs, pathEnv: "/usr/bin" });
    assert.equal(r.source, "path");
    assert.equal(r.missing, true);
  });

  it("the entry point is the one the gpuemu-ls script runs (pyproject.toml)", () => {
    const pyproject = readFileSync(join(__dirname, "..", "..", "..", "..", "pyproject.toml"), "utf8");
    const script = /^gpuemu-ls\s*=\s*"([\w.]+):(\w+)"/m.exec(pyproject);
    assert.ok(script, "no gpuemu-ls script in pyproject.toml");
    assert.equal(BUNDLED_ENTRY, `from ${script[1]} import ${script[2]}; raise SystemExit(${script[2]}())`);
  });
});
