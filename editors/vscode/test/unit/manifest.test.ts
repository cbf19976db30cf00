import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

// package.json contributions against what the extension code uses.
const EXT = join(__dirname, "..", "..");
const pkg = JSON.parse(readFileSync(join(EXT, "package.json"), "utf8"));
const source = readFileSync(join(EXT, "src", "extension.ts"), "utf8");

describe("package.json", () => {
  it("contributes the gpuemu.toml schema for TOML extensions", () => {
    assert.deepEqual(pkg.contributes.tomlValidation, [{ fileMatch: "gpuemu.toml", url: "./schemas/gpuemu.schema.json" }]);
  });

  it("opens gpuemu.toml as TOML, with the grammar it ships (VS Code and code-server ship none) in both .vsix", () => {
    const lang = pkg.contributes.languages.find((l: { id: string }) => l.id === "toml");
    assert.deepEqual(lang.filenames, ["gpuemu.toml"]);
    const [grammar] = pkg.contributes.grammars;
    assert.deepEqual([grammar.language, grammar.scopeName], ["toml", "source.toml.gpuemu"]);
    const tm = JSON.parse(readFileSync(join(EXT, grammar.path), "utf8"));
    assert.equal(tm.scopeName, grammar.scopeName);
    JSON.parse(readFileSync(join(EXT, lang.configuration), "utf8"));
    for (const ignore of [".vscodeignore", ".vscodeignore.bundled"]) {
      const kept = readFileSync(join(EXT, ignore), "utf8").split("\n");
      for (const f of [grammar.path, lang.configuration]) assert.ok(kept.includes(`!${f.replace(/^\.\//, "")}`), `${ignore} drops ${f}`);
    }
    // every pattern is a valid regular expression (Oniguruma's syntax here is within JavaScript's)
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) return node.forEach(walk);
      if (node && typeof node === "object") {
        for (const [k, v] of Object.entries(node)) {
          if (["match", "begin", "end"].includes(k) && typeof v === "string") new RegExp(v);
          else walk(v);
        }
      }
    };
    walk(tm);
  });

  it("supports untrusted workspaces in limited mode, with the server settings restricted", () => {
    const u = pkg.capabilities.untrustedWorkspaces;
    assert.equal(u.supported, "limited");
    assert.ok(u.description.length > 20);
    assert.ok(u.restrictedConfigurations.includes("gpuemu.server.command"));
  });

  it("registers every contributed command, and every server command", () => {
    const registered = new Set([...source.matchAll(/reg\("(gpuemu\.[A-Za-z]+)"/g)].map((m) => m[1]));
    for (const c of pkg.contributes.commands) assert.ok(registered.has(c.command), c.command);
    for (const c of ["gpuemu.reproduce", "gpuemu.minimize", "gpuemu.calibrate", "gpuemu.runOp", "gpuemu.runAll", "gpuemu.runQuick", "gpuemu.runThorough"]) {
      assert.ok(registered.has(c), `server command ${c}`);
    }
  });

  it("has the settings of the brief", () => {
    const props = Object.keys(pkg.contributes.configuration.properties);
    for (const k of ["gpuemu.server.command", "gpuemu.server.args", "gpuemu.mode", "gpuemu.onSave", "gpuemu.iterations", "gpuemu.jobs", "gpuemu.storePath"]) {
      assert.ok(props.includes(k), k);
    }
  });

  it("pins the toolchain that works here and never sets a stdio transport", () => {
    assert.equal(pkg.dependencies["vscode-languageclient"], "11.0.0");
    assert.equal(pkg.devDependencies["@types/vscode"], "1.91.0");
    assert.equal(pkg.devDependencies["@vscode/vsce"], "3.9.2");
    assert.equal(pkg.engines.vscode, "^1.91.0");
    assert.doesNotMatch(source, /TransportKind/);
  });
});
