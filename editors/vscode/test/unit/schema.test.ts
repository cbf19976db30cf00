import { strict as assert } from "node:assert";
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import Ajv from "ajv";

// The JSON schema contributed for gpuemu.toml (contributes.tomlValidation) against the example
// workspaces, and against files the engine rejects.
const EXT = join(__dirname, "..", "..");
const REPO = join(EXT, "..", "..");
const schema = JSON.parse(readFileSync(join(EXT, "schemas", "gpuemu.schema.json"), "utf8"));

function validator() {
  const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
  ajv.addKeyword("enumDescriptions"); // VS Code's extension of JSON schema, for completion docs
  return ajv.compile(schema);
}
const validate = validator();

// smol-toml is an ES module; this file compiles to CommonJS, so it is loaded with import()
let parse: (toml: string) => Record<string, unknown>;
before(async () => {
  parse = (await import("smol-toml")).parse;
});

function check(toml: string): string[] {
  const ok = validate(parse(toml));
  return ok ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
}

const examples = readdirSync(join(REPO, "examples"))
  .map((d) => join(REPO, "examples", d, "gpuemu.toml"))
  .filter((f) => existsSync(f));

const minimal = `
[[ops]]
name = "softmax"
module = "softmax:softmax_kernel"
reference = "refs/softmax_ref.py"
`;

describe("gpuemu.schema.json", () => {
  it("is a valid draft-07 schema", () => {
    assert.equal(schema.$schema, "http://json-schema.org/draft-07/schema#");
    assert.equal(typeof validate, "function");
  });

  it("accepts every example workspace's gpuemu.toml", () => {
    assert.ok(examples.length >= 2, `examples found: ${examples}`);
    for (const file of examples) {
      assert.deepEqual(check(readFileSync(file, "utf8")), [], file);
    }
  });

  it("accepts the full configuration of the README", () => {
    const full = `
[project]
name = "kernels"
framework = "numpy"
allow_external_paths = false
description = "x"

[validation]
dtypes = ["float32", "float16", "bfloat16"]
seed = 0
check_nan = true
check_inf = true
iterations = 50
timeout = 30
distributions = ["normal", "uniform", "boundary", "large", "constant_rows", "masked_rows", "partial_inf", "special"]
max_failure_snapshots = 200
memory_limit_mb = 8192
[validation.tolerances]
float32 = { atol = 1e-5, rtol = 1e-5 }

[[ops]]
name = "softmax"
module = "softmax:softmax_kernel"
reference = "refs/softmax_ref.py"
invariants = ["non_negative", "shape_preserved"]
dtypes = ["float32", "float16"]
layouts = ["contiguous", "transposed", "strided"]
distributions = ["normal", "large"]
framework = "pytorch"
input_names = ["x", "target"]
output_dtype = "float32"
timeout = 10
iterations = 100
seeds = [17, 4242]
[ops.inputs.x]
shape = ["B", "N"]
distributions = ["normal"]
[ops.inputs.target]
shape = ["B"]
dtype = "int64"
range = [0, "C"]
[ops.dims]
B = { min = 1, max = 64, default = 8 }
N = { min = 1, max = 4096, default = 1024 }
C = [10, 100, 1000]
K = 7
[ops.kwargs]
axis = -1
[ops.tolerances]
float16 = { atol = 2e-3, rtol = 2e-3 }

[[ops]]
name = "matmul"
execution_mode = "script_based"
op_script = "ops/matmul_op.py"
reference = "refs/matmul_ref.py"

[[ops]]
name = "remote"
execution_mode = "client_side"
reference = "ref:f"

[[kernels]]
name = "tiled_matmul"
source = "kernels/matmul.cu"
arch = "sm_90"
flags = ["-O3"]
include_dirs = ["include"]
defines = ["TILE=32"]
[kernels.artifact_checks]
max_registers = 64
max_spills = 0
max_local_memory_bytes = 0
max_shared_memory_bytes = 49152
forbidden_instructions = ["LDL", "ptx:ld.volatile", "re:vprintf"]
required_instructions = []

[policies]
fail_on_regression = false
warn_threshold = 0.8

[ci]
quick_dtypes = ["float32"]
thorough_timeout = 600
parallel_jobs = 4
fuzz_iterations = 100
regression_threshold = 0.1
[ci.quick]
iterations = 16
dtypes = ["float32"]

[cuda]
nvcc = "/usr/local/cuda/bin/nvcc"
arch = "sm_90"
flags = []
include_dirs = []
defines = []
[cuda.artifact_checks]
max_registers = 128
`;
    assert.deepEqual(check(full), []);
  });

  const rejected: [string, string, RegExp][] = [
    ["an unknown top-level table", `${minimal}\n[projekt]\nname = "x"\n`, /must NOT have additional properties.*projekt/],
    ["an unknown key in [[ops]]", minimal.replace('name = "softmax"', 'name = "softmax"\nrefrence = "x"'), /refrence/],
    ["an unknown key in [project]", `[project]\nnme = "x"\n${minimal}`, /nme/],
    ["an unknown key in [validation]", `[validation]\nseeds = 1\n${minimal}`, /seeds/],
    ["a non-float tolerance dtype", `[validation.tolerances]\nint32 = { atol = 1 }\n${minimal}`, /int32/],
    ["an unknown key in a tolerance", `[validation.tolerances]\nfloat32 = { atol = 1, tol = 2 }\n${minimal}`, /tol/],
    ["an unknown key in [ops.inputs.x]", `${minimal}[ops.inputs.x]\nshape = ["B"]\nshap = 1\n[ops.dims]\nB = 4\n`, /shap/],
    ["an unknown key in a dim", `${minimal}[ops.dims]\nB = { min = 1, max = 4, dflt = 2 }\n`, /dflt|must match exactly one/],
    ["an unknown key in [ci.quick]", `[ci.quick]\niteration = 3\n${minimal}`, /iteration/],
    ["an unknown key in [policies]", `[policies]\nfail_on_regressions = true\n${minimal}`, /fail_on_regressions/],
    ["an unknown key in [cuda.artifact_checks]", `[cuda.artifact_checks]\nmax_regs = 3\n${minimal}`, /max_regs/],
    ["an unknown key in [[kernels]]", `[[kernels]]\nname = "k"\nsource = "k.cu"\nsrc = "k.cu"\n`, /src/],
    ["an unknown dtype", `[validation]\ndtypes = ["float8"]\n${minimal}`, /allowed values/],
    ["an unknown layout", minimal + 'layouts = ["tiled"]\n', /allowed values/],
    ["an unknown distribution", minimal + 'distributions = ["gaussian"]\n', /allowed values/],
    ["an unknown invariant", minimal + 'invariants = ["sorted"]\n', /allowed values/],
    ["an unknown execution_mode", minimal + 'execution_mode = "remote"\n', /allowed values/],
    ["an unknown framework", `[project]\nframework = "mxnet"\n${minimal}`, /allowed values/],
    ["a wrong type", `[validation]\nseed = "zero"\n${minimal}`, /must be integer/],
    ["an op without a reference", `[[ops]]\nname = "a"\nmodule = "a:f"\n`, /required property 'reference'/],
    ["script_based without op_script", `[[ops]]\nname = "a"\nreference = "r.py"\nexecution_mode = "script_based"\n`, /op_script/],
    ["an op with nothing to run", `[[ops]]\nname = "a"\nreference = "r.py"\n`, /module|op_script/],
    ["a module that is not module:function", minimal.replace("softmax:softmax_kernel", "softmax.py"), /pattern/],
  ];
  for (const [what, toml, expected] of rejected) {
    it(`rejects ${what}`, () => {
      const errors = check(toml);
      assert.ok(errors.length > 0, `expected an error for ${what}`);
      assert.match(errors.join("\n"), expected);
    });
  }
});
