import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { buildReport, reportArgs } from "../../src/reportBuild";

/** The repository's Python with gpuemu-ls (README set-up); the test runs the real CLI with it. */
const PYTHON = join(__dirname, "..", "..", "..", "..", ".venv", "bin", "python");
const TOML = `[validation]
dtypes = ["float32"]
iterations = 4

[[ops]]
name = "double"
module = "ops:double"
reference = "ops:reference"
[ops.inputs.x]
shape = ["N"]
[ops.dims]
N = { min = 1, max = 64, default = 8 }
`;
const OPS = "import numpy as np\n\ndef double(x):\n    return x * 2\n\ndef reference(x):\n    return np.asarray(x, dtype=np.float64) * 2.0\n";

describe("the HTML report built by the CLI", { skip: !existsSync(PYTHON) && `no ${PYTHON}` }, () => {
  let ws = "";
  before(() => {
    ws = mkdtempSync(join(tmpdir(), "gpuemu-report-test-"));
    writeFileSync(join(ws, "gpuemu.toml"), TOML);
    writeFileSync(join(ws, "ops.py"), OPS);
    execFileSync(PYTHON, ["-m", "gpuemu_ls", "-C", ws, "test", "--no-progress"], { env: { ...process.env, GPUEMU_USER_CONFIG: "/dev/null/none" } });
  });
  after(() => rmSync(ws, { recursive: true, force: true }));

  it("is the workspace's stored results as one page, and leaves no temporary folder behind", async () => {
    const before = readdirSync(tmpdir()).filter((n) => n.startsWith("gpuemu-report-") && !ws.endsWith(n)).length;
    const html = await buildReport(PYTHON, undefined, ws);
    assert.ok(html.startsWith("<!DOCTYPE html>"));
    assert.match(html, /http-equiv="Content-Security-Policy" content="default-src &#x27;none&#x27;/);
    assert.match(html, /data-op="double"/);
    assert.match(html, /<td class="verdict v-passed">PASS<\/td>/);
    const left = readdirSync(tmpdir()).filter((n) => n.startsWith("gpuemu-report-") && !ws.endsWith(n)).length;
    assert.equal(left, before);
  });

  it("asks the CLI for the html format of that workspace", () => {
    assert.deepEqual(reportArgs("/w", "/t/r.html"), ["-m", "gpuemu_ls", "-C", "/w", "report", "--format", "html", "--output", "/t/r.html"]);
  });
});
