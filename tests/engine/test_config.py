"""gpuemu.toml: every key of the schema loads; every problem names file, line and column with a hint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.cases.generate import Domain, value_domain
from gpuemu_ls.engine.config.keys import DEFAULT_DISTRIBUTIONS
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import ArtifactChecksConfig, DimSpec, InputSpec, Tolerance, resolve_tolerance
from gpuemu_ls.engine.errors import ConfigError, Problem

OPS_PY = """
import numpy as np

def softmax(x, target, eps=1e-5):
    return x

def reference(x, target, eps=1e-5):
    return x
"""

FULL = """
[project]
name = "kernels"
framework = "numpy"
description = "every key"
allow_external_paths = false

[validation]
dtypes = ["float32", "float16", "bfloat16"]
check_nan = false
check_inf = false
seed = 11
iterations = 7
timeout = 12.5
distributions = ["normal", "boundary"]
max_failure_snapshots = 9
memory_limit_mb = 2048
scale = 2.0
offset = -1
sign = "negative"
range = [-8, 4.5]

[validation.tolerances]
float32 = { atol = 1e-4, rtol = 1e-5 }
float16 = { rtol = 3e-3 }

[[ops]]
name = "softmax"
module = "ops:softmax"
reference = "ops:reference"
execution_mode = "in_process"
input_names = ["x", "target"]
invariants = ["finite", "non_negative", "normalized", "shape_preserved"]
dtypes = ["float32", "bfloat16"]
layouts = ["contiguous", "strided"]
distributions = ["normal", "masked_rows"]
framework = "numpy"
output_dtype = "float32"
timeout = 3
iterations = 5
seeds = [4, 8]
description = "a softmax"
scale = 0.5
range = [-1, "C"]

[ops.inputs.x]
shape = ["B", "N", 3]
distributions = ["normal"]
sign = "positive"
offset = 0.5

[ops.inputs.target]
shape = ["B"]
dtype = "int64"
range = [0, "C"]

[ops.dims]
B = { min = 1, max = 64, default = 8 }
N = { min = 2, max = 4096 }
C = 10
D = [16, 32, 64]

[ops.kwargs]
eps = 1e-5
mode = "fast"

[ops.tolerances]
float32 = { atol = 2e-4 }
bfloat16 = { atol = 5e-2, rtol = 5e-2 }

[[ops]]
name = "scripted"
op_script = "ops/op.py"
reference = "refs/ref.py"
execution_mode = "script_based"

[[ops]]
name = "remote"
reference = "refs/ref.py"
execution_mode = "client_side"

[[kernels]]
name = "gemm"
source = "kernels/gemm.cu"
reference = "ops:reference"
function = "gemm_kernel"
arch = "sm_80"
flags = ["-O3"]
include_dirs = ["include"]
defines = ["TILE=64"]
description = "a gemm"

[kernels.artifact_checks]
max_registers = 128
max_spills = 0
max_local_memory_bytes = 0
max_shared_memory_bytes = 49152
forbidden_instructions = ["LDL", "STL"]
required_instructions = ["HMMA"]

[policies]
fail_on_regression = true
warn_threshold = 0.5

[ci]
quick_dtypes = ["float16"]
thorough_timeout = 600
parallel_jobs = 2
fuzz_iterations = 33
regression_threshold = 0.25

[ci.quick]
iterations = 4
dtypes = ["bfloat16"]

[cuda]
nvcc = "/usr/local/cuda/bin/nvcc"
arch = "sm_90a"
flags = ["-lineinfo"]
include_dirs = ["third_party"]
defines = ["NDEBUG"]

[cuda.artifact_checks]
max_registers = 255
"""

SUPPORT = {
    "ops.py": OPS_PY,
    "ops/op.py": "print('{}')\n",
    "refs/ref.py": "print('{}')\n",
    "kernels/gemm.cu": "__global__ void gemm_kernel() {}\n",
}


def problems(root: Path, text: str | None = None, **kw: object) -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        load_config(root, text=text, **kw)  # type: ignore[arg-type]
    return info.value.problems


def only(root: Path, text: str | None = None) -> Problem:
    found = problems(root, text)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def line_col(text: str, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the n-th occurrence of ``needle`` in ``text``."""
    pos = -1
    for _ in range(occurrence):
        pos = text.index(needle, pos + 1)
    before = text[:pos]
    return before.count("\n") + 1, pos - (before.rfind("\n") + 1) + 1


OP_HEAD = """
[[ops]]
name = "a"
module = "ops:softmax"
reference = "ops:reference"
"""


def test_full_config_loads_every_key(workspace) -> None:
    root = workspace(FULL, SUPPORT)
    cfg = load_config(root)
    assert cfg.project_name == "kernels" and cfg.framework == "numpy" and not cfg.allow_external_paths
    v = cfg.validation
    assert v.dtypes == ("float32", "float16", "bfloat16")
    assert (v.check_nan, v.check_inf, v.seed, v.iterations, v.timeout) == (False, False, 11, 7, 12.5)
    assert v.distributions == ("normal", "boundary")
    assert (v.max_failure_snapshots, v.memory_limit_mb) == (9, 2048)
    assert v.tolerances == {"float32": Tolerance(1e-4, 1e-5), "float16": Tolerance(None, 3e-3)}

    op = cfg.op("softmax")
    assert (op.module, op.reference, op.execution_mode, op.framework) == (
        "ops:softmax",
        "ops:reference",
        "in_process",
        "numpy",
    )
    assert op.input_names == ("x", "target")
    assert op.inputs == (
        InputSpec("x", ("B", "N", 3), None, None, ("normal",), offset=0.5, sign="positive"),
        InputSpec("target", ("B",), "int64", (0, "C"), None),
    )
    # value domains, field by field: input > op > [validation]
    assert (v.scale, v.offset, v.sign, v.range) == (2.0, -1.0, "negative", (-8.0, 4.5))
    assert (op.scale, op.offset, op.sign, op.range) == (0.5, -1.0, "negative", (-1.0, "C"))
    assert value_domain(op, op.inputs[0], {"C": 10}) == Domain(0.5, 0.5, "positive", (-1.0, 10.0))
    assert op.dims == {
        "B": DimSpec("B", 1, 64, 8),
        "N": DimSpec("N", 2, 4096, 32),  # no default: 32 clamped into the range
        "C": DimSpec("C", 10, 10, 10),
        "D": DimSpec("D", 16, 64, 16, (16, 32, 64)),
    }
    assert op.kwargs == {"eps": 1e-5, "mode": "fast"}
    assert op.invariants == ("finite", "non_negative", "normalized", "shape_preserved")
    assert op.dtypes == ("float32", "bfloat16") and op.layouts == ("contiguous", "strided")
    assert op.distributions == ("normal", "masked_rows")
    assert (op.output_dtype, op.timeout, op.iterations, op.seeds) == ("float32", 3.0, 5, (4, 8))
    assert op.tolerances == {"float32": Tolerance(2e-4, None), "bfloat16": Tolerance(5e-2, 5e-2)}
    assert op.runnable and not op.reference_is_script

    scripted = cfg.op("scripted")
    assert scripted.execution_mode == "script_based" and scripted.op_script == "ops/op.py"
    assert scripted.reference_is_script and scripted.layouts == ("contiguous",)
    # an op without [ops.inputs] gets the seed docs' default input x[B, N]
    assert scripted.inputs == (InputSpec("x", ("B", "N")),) and set(scripted.dims) == {"B", "N"}
    # no module: runs in the client's process, never "passed" here
    assert not cfg.op("remote").runnable

    (k,) = cfg.kernels
    assert (k.name, k.source, k.reference, k.function, k.arch) == (
        "gemm",
        "kernels/gemm.cu",
        "ops:reference",
        "gemm_kernel",
        "sm_80",
    )
    assert (k.flags, k.include_dirs, k.defines) == (("-O3",), ("include",), ("TILE=64",))
    assert k.artifact_checks == ArtifactChecksConfig(128, 0, 0, 49152, ("LDL", "STL"), ("HMMA",))
    assert (cfg.policies.fail_on_regression, cfg.policies.warn_threshold) == (True, 0.5)
    ci = cfg.ci
    assert ci.quick_dtypes == ("bfloat16",)  # [ci.quick] dtypes wins over quick_dtypes
    assert cfg.op("scripted").scale == 2.0 and cfg.op("scripted").range == (-8.0, 4.5)  # [validation]'s
    assert (ci.quick_iterations, ci.thorough_timeout, ci.parallel_jobs) == (4, 600, 2)
    assert (ci.fuzz_iterations, ci.regression_threshold) == (33, 0.25)
    cu = cfg.cuda
    assert (cu.nvcc, cu.arch, cu.flags, cu.include_dirs, cu.defines) == (
        "/usr/local/cuda/bin/nvcc",
        "sm_90a",
        ("-lineinfo",),
        ("third_party",),
        ("NDEBUG",),
    )
    assert cu.artifact_checks.max_registers == 255
    # positions of whole entries, for editor diagnostics
    assert cfg.op_span(op).line == line_col(FULL, "[[ops]]")[0]
    assert cfg.kernel_span(k).line == line_col(FULL, "[[kernels]]")[0]


def test_defaults_when_keys_are_absent(workspace) -> None:
    cfg = load_config(workspace(OP_HEAD, {"ops.py": OPS_PY}))
    op = cfg.op("a")
    assert cfg.validation.dtypes == ("float32", "float16", "bfloat16") and cfg.validation.seed == 0
    assert op.layouts == ("contiguous", "transposed", "strided") and op.distributions == DEFAULT_DISTRIBUTIONS
    assert op.execution_mode == "in_process" and op.framework == "numpy"
    assert cfg.ci.quick_dtypes is None  # not set: float32 plus a few half-precision cases
    assert (op.scale, op.offset, op.sign, op.range) == (None, None, None, None)
    assert value_domain(op, op.inputs[0], {}) == Domain()


def test_toml_syntax_error_names_line_and_column(workspace) -> None:
    text = '[project]\nname = "x"\n[validation]\nseed = \n'
    p = only(workspace(text))
    assert p.message.startswith("TOML syntax error")
    assert (p.file.name, p.line, p.column) == ("gpuemu.toml", 4, 8)
    assert p.hint and "toml.io" in p.hint
    assert str(p).startswith(f"{p.file}:4:8: error: TOML syntax error")


def test_unknown_key_with_did_you_mean(workspace) -> None:
    text = OP_HEAD + 'modul = "ops:softmax"\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "unknown key 'modul' in ops[0]"
    assert (p.line, p.column) == line_col(text, "modul =")
    assert p.hint == "did you mean 'module'?"


def test_unknown_key_without_close_match_lists_the_known_keys(workspace) -> None:
    text = '[validation]\ncolour = "red"\n'
    p = only(workspace(text))
    assert (p.line, p.column) == (2, 1)
    assert p.hint.startswith("known keys:") and "check_nan" in p.hint and "tolerances" in p.hint


def test_wrong_type(workspace) -> None:
    text = '[validation]\nseed = "zero"\ncheck_nan = 1\n'
    seed, nan = problems(workspace(text))
    assert seed.message == "validation.seed must be an integer, not a string" and (seed.line, seed.column) == (2, 8)
    assert nan.message == "validation.check_nan must be true or false, not an integer" and nan.line == 3


def test_bad_dtype_names(workspace) -> None:
    text = (
        OP_HEAD + 'dtypes = ["float32", "flaot16"]\n[ops.inputs.x]\nshape = ["B"]\ndtype = "int65"\n[ops.dims]\nB = 4\n'
    )
    listed, fixed = problems(workspace(text, {"ops.py": OPS_PY}))
    assert listed.message == "unknown dtype 'flaot16'" and listed.hint == "did you mean 'float16'?"
    assert (listed.line, listed.column) == line_col(text, '"flaot16"')
    assert fixed.message == "unknown dtype 'int65'" and (fixed.line, fixed.column) == line_col(text, '"int65"')


def test_tolerance_for_a_non_float_dtype(workspace) -> None:
    text = "[validation.tolerances]\nint32 = { atol = 0 }\n"
    p = only(workspace(text))
    assert "int32" in p.message and (p.line, p.column) == (2, 1)


def test_missing_script(workspace) -> None:
    text = OP_HEAD.replace('"ops:reference"', '"refs/missing.py"')
    root = workspace(text, {"ops.py": OPS_PY})
    p = only(root)
    assert p.message == "script 'refs/missing.py' not found"
    assert (p.line, p.column) == line_col(text, '"refs/missing.py"')
    assert str(root / "refs" / "missing.py") in p.hint


def test_module_not_found(workspace) -> None:
    text = OP_HEAD.replace("ops:softmax", "kernelz:softmax")
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message.startswith("module 'kernelz' not found in the workspace")
    assert (p.line, p.column) == line_col(text, '"kernelz:softmax"')
    assert p.hint == "expected kernelz.py next to gpuemu.toml"


def test_function_checked_with_ast_without_importing(workspace, tmp_path: Path) -> None:
    marker = tmp_path / "imported.txt"
    mod = (
        f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit('must not be imported')\n\ndef softmax(x):\n"
        "    return x\n\ndef reference(x):\n    return x\n"
    )
    good = OP_HEAD.replace("ops:", "explodes:")
    root = workspace(good, {"explodes.py": mod})
    cfg = load_config(root)
    assert cfg.op("a").module == "explodes:softmax"
    assert not marker.exists() and "explodes" not in sys.modules

    bad = good.replace("explodes:softmax", "explodes:softmaxx")
    (root / "gpuemu.toml").write_text(bad)
    p = only(root)
    assert p.message == "explodes.py defines no 'softmaxx'" and p.hint == "did you mean 'softmax'?"
    assert (p.line, p.column) == line_col(bad, '"explodes:softmaxx"')
    assert not marker.exists() and "explodes" not in sys.modules


def test_an_attribute_of_a_top_level_class_is_a_callable_ref(workspace) -> None:
    """``module = "file:Class.apply"``: a library's autograd Function, checked by its class name (ast)."""
    mod = "class Softmax:\n    @staticmethod\n    def apply(x):\n        return x\n\n\ndef reference(x):\n"
    mod += "    return x\n"
    good = OP_HEAD.replace("ops:softmax", "fns:Softmax.apply").replace("ops:", "fns:")
    root = workspace(good, {"fns.py": mod})
    assert load_config(root).op("a").module == "fns:Softmax.apply"
    bad = good.replace("fns:Softmax.apply", "fns:Softmx.apply")
    (root / "gpuemu.toml").write_text(bad)
    p = only(root)
    assert p.message == "fns.py defines no 'Softmx'" and p.hint == "did you mean 'Softmax'?"
    for malformed in ("fns:Softmax.", "fns:Softmax..apply", "fns:1x.apply"):
        (root / "gpuemu.toml").write_text(good.replace("fns:Softmax.apply", malformed))
        assert "is not 'module:function'" in only(root).message, malformed


def test_duplicate_op_name_hint_names_first_line(workspace) -> None:
    text = OP_HEAD + OP_HEAD
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "duplicate op name 'a'"
    assert (p.line, p.column) == line_col(text, '"a"', 2)
    assert p.hint == f"first defined at line {line_col(text, 'name')[0]}"


def test_dim_used_but_not_declared(workspace) -> None:
    text = OP_HEAD + '[ops.inputs.x]\nshape = ["B", "N"]\n[ops.dims]\nB = 4\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "dim 'N' is used but not declared in [ops.dims]"
    assert (p.line, p.column) == line_col(text, '"N"')
    assert p.hint.startswith("add N = {")


def test_default_outside_min_max(workspace) -> None:
    text = OP_HEAD + '[ops.inputs.x]\nshape = ["B"]\n[ops.dims]\nB = { min = 2, max = 8, default = 9 }\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "dim B: default 9 is outside [2, 8]"
    assert (p.line, p.column) == line_col(text, "9 }")


def test_range_bound_naming_an_undeclared_dim(workspace) -> None:
    text = (
        OP_HEAD + '[ops.inputs.x]\nshape = ["B"]\n[ops.inputs.t]\nshape = ["B"]\ndtype = "int64"\n'
        'range = [0, "C"]\n[ops.dims]\nB = 4\n'
    )
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "dim 'C' is used but not declared in [ops.dims]"
    assert (p.line, p.column) == line_col(text, '"C"')


def test_input_names_not_matching_inputs(workspace) -> None:
    text = (
        OP_HEAD + 'input_names = ["x", "y"]\n[ops.inputs.x]\nshape = ["B"]\n[ops.inputs.z]\nshape = ["B"]\n'
        "[ops.dims]\nB = 4\n"
    )
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert "input_names ['x', 'y'] do not match" in p.message and "['x', 'z']" in p.message
    assert (p.line, p.column) == line_col(text, '["x", "y"]')
    assert p.hint and "input_names" in p.hint


def test_script_outside_the_workspace(workspace, tmp_path: Path) -> None:
    (tmp_path / "outside_ref.py").write_text("print('{}')\n")
    text = OP_HEAD.replace('"ops:reference"', '"../outside_ref.py"')
    root = workspace(text, {"ops.py": OPS_PY})
    p = only(root)
    assert p.message.startswith("'../outside_ref.py' resolves outside the workspace")
    assert (p.line, p.column) == line_col(text, '"../outside_ref.py"')
    assert "allow_external_paths = true" in p.hint
    allowed = "[project]\nallow_external_paths = true\n" + text
    (root / "gpuemu.toml").write_text(allowed)
    cfg = load_config(root)
    assert cfg.allow_external_paths and cfg.op("a").reference == "../outside_ref.py"


def test_script_based_without_op_script(workspace) -> None:
    text = OP_HEAD + 'execution_mode = "script_based"\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "execution_mode = 'script_based' needs op_script"
    assert (p.line, p.column) == line_col(text, '"script_based"')
    assert "op_script" in p.hint


def test_several_errors_reported_at_once_sorted_by_line(workspace) -> None:
    text = (
        '[validation]\ndtypes = ["float99"]\n'
        + OP_HEAD.replace("ops:softmax", "ops:nope")
        + 'colour = 1\n[ops.inputs.x]\nshape = ["B", "Q"]\n[ops.dims]\nB = { min = 4, max = 2 }\n'
        + OP_HEAD
    )
    found = problems(workspace(text, {"ops.py": OPS_PY}))
    lines = [p.line for p in found]
    assert lines == sorted(lines) and len(found) == 6
    assert [p.message.split(" ")[0] for p in found] == ["unknown", "ops.py", "unknown", "dim", "dim", "duplicate"]
    assert all(p.file.name == "gpuemu.toml" and p.column for p in found)


def test_user_defaults_are_overridden_by_the_project(workspace, tmp_path: Path, monkeypatch) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[validation]\ndtypes = ["float16"]\nseed = 7\ntimeout = 5\n[ci]\nfuzz_iterations = 9\n')
    monkeypatch.setenv("GPUEMU_USER_CONFIG", str(user))
    cfg = load_config(workspace("[validation]\nseed = 3\n" + OP_HEAD, {"ops.py": OPS_PY}))
    assert cfg.validation.seed == 3  # the project wins
    assert cfg.validation.dtypes == ("float16",) and cfg.validation.timeout == 5.0  # user defaults fill the rest
    assert cfg.ci.fuzz_iterations == 9
    assert cfg.op("a").dtypes == ("float16",)


def test_error_in_user_defaults_names_the_user_file(workspace, tmp_path: Path, monkeypatch) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[validation]\ndtypes = ["float16"]\nbogus = 1\n')
    monkeypatch.setenv("GPUEMU_USER_CONFIG", str(user))
    p = only(workspace(OP_HEAD, {"ops.py": OPS_PY}))
    assert p.file == user and (p.line, p.column) == (3, 1)
    assert p.message == "unknown key 'bogus' in validation"


def test_missing_gpuemu_toml_hints_at_init(tmp_path: Path) -> None:
    p = only(tmp_path)
    assert "no gpuemu.toml" in p.message and "gpuemu init" in p.hint


def test_unsaved_buffer_text_is_checked_instead_of_the_file(workspace) -> None:
    root = workspace(OP_HEAD, {"ops.py": OPS_PY})
    p = only(root, OP_HEAD + "iterations = 0\n")
    assert p.message == "ops[0].iterations must be > 0, got 0"


def test_resolve_tolerance_precedence_field_by_field(workspace) -> None:
    text = (
        "[validation.tolerances]\nfloat32 = { atol = 1e-3, rtol = 1e-3 }\nfloat16 = { atol = 5e-3 }\n"
        + OP_HEAD
        + "[ops.tolerances]\nfloat32 = { rtol = 2e-6 }\n"
    )
    cfg = load_config(workspace(text, {"ops.py": OPS_PY}))
    op, val = cfg.op("a"), cfg.validation
    assert resolve_tolerance(op, val, "float32") == (1e-3, 2e-6)  # atol from project, rtol from op
    assert resolve_tolerance(op, val, "float16") == (5e-3, dt.DEFAULT_TOLERANCES["float16"][1])
    assert resolve_tolerance(op, val, "bfloat16") == dt.DEFAULT_TOLERANCES["bfloat16"]
    assert resolve_tolerance(op, val, "int64") == (0.0, 0.0)  # integers compare exactly


def test_candidate_and_fixed_dims(workspace) -> None:
    text = OP_HEAD + '[ops.inputs.x]\nshape = ["D", "K"]\n[ops.dims]\nD = [64, 16, 32]\nK = 7\n'
    op = load_config(workspace(text, {"ops.py": OPS_PY})).op("a")
    assert op.dims["D"] == DimSpec("D", 16, 64, 64, (64, 16, 32))
    assert op.dims["D"].contains(32) and not op.dims["D"].contains(48)
    assert op.dims["K"] == DimSpec("K", 7, 7, 7)


def test_declared_but_unused_dim_is_a_warning_not_an_error(workspace) -> None:
    text = OP_HEAD + '[ops.inputs.x]\nshape = ["B"]\n[ops.dims]\nB = 4\nZ = 3\n'
    cfg = load_config(workspace(text, {"ops.py": OPS_PY}))
    (w,) = cfg.warnings
    assert "'Z' is declared but no input uses it" in w.message and w.line == text.count("\n", 0, text.index("Z =")) + 1


def test_unknown_array_of_tables_has_a_position(workspace) -> None:
    text = '[project]\nname = "x"\n\n[[opz]]\nname = "a"\n'
    p = only(workspace(text))
    assert p.message == "unknown key 'opz' in the top level" and p.hint == "did you mean 'ops'?"
    assert (p.line, p.column) == (4, 1)


def test_module_with_syntax_error_points_at_the_syntax_error(workspace) -> None:
    text = OP_HEAD.replace('"ops:reference"', '"refmod:reference"')
    p = only(workspace(text, {"ops.py": "def softmax(x):\n    return x +* 2\n", "refmod.py": OPS_PY}))
    assert p.message.startswith("cannot parse ops.py to find 'softmax': syntax error at ops.py:2")
    assert (p.line, p.column) == line_col(text, '"ops:softmax"')
    assert "ops.py:2" in f"{p.message} {p.hint}"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("timeout = nan", "validation.timeout must be a finite number, got nan"),
        ("timeout = inf", "validation.timeout must be a finite number, got inf"),
        ("tolerances = { float32 = { atol = inf } }", "must be a finite number, got inf"),
        ("seed = 9007199254740992", "validation.seed must be in 0..9007199254740991, got 9007199254740992"),
        ("seed = -1", "validation.seed must be in 0..9007199254740991, got -1"),
    ],
)
def test_numbers_a_check_could_not_honour_are_refused(workspace, line: str, says: str) -> None:
    """nan switches a timeout off, an inf tolerance passes anything, a seed past 2**53 - 1 changes in an editor."""
    text = f"[validation]\n{line}\n" + OP_HEAD
    p = only(workspace(text, SUPPORT))
    assert says in p.message and p.line == 2, p


def test_deep_nesting_is_a_config_error_not_a_crash(workspace) -> None:
    text = OP_HEAD + "deep = " + "[" * 20_000 + "]" * 20_000 + "\n"
    p = only(workspace(text, SUPPORT))
    assert "nesting too deep" in p.message and p.line == 6


def test_compiler_defines_with_shell_characters_are_refused(workspace) -> None:
    text = OP_HEAD + '\n[[kernels]]\nname = "k"\nsource = "k.cu"\ndefines = ["OK=1", "X=$(touch PWNED)"]\n'
    p = only(workspace(text, {**SUPPORT, "k.cu": "__global__ void k() {}\n"}))
    assert "'X=$(touch PWNED)' holds characters a shell would interpret" in p.message
    assert (p.line, p.column) == line_col(text, '"X=$(')


@pytest.mark.parametrize(
    ("where", "line", "says", "at"),
    [
        ("validation", "scale = 0", "validation.scale must be > 0, got 0", "0"),
        ("validation", "scale = -2.5", "validation.scale must be > 0, got -2.5", "-2.5"),
        ("validation", 'scale = "big"', "validation.scale must be a number, not a string", '"big"'),
        ("validation", "offset = nan", "validation.offset must be a finite number, got nan", "nan"),
        ("validation", 'sign = "up"', "unknown sign 'up'", '"up"'),
        ("validation", "range = [1, 1]", "empty range [1, 1]", "[1, 1]"),
        ("validation", "range = [0, inf]", "a range bound must be a finite number, got inf", "inf"),
        ("validation", 'range = [0, "N"]', "validation.range bounds are numbers", '"N"'),
        ("validation", "range = [0]", "range is [low, high] with two bounds", "[0]"),
        ("op", "scale = inf", "ops[0].scale must be a finite number, got inf", "inf"),
        ("op", 'sign = "positiv"', "unknown sign 'positiv'", '"positiv"'),
        ("op", 'range = [0, "Q"]', "dim 'Q' is used but not declared in [ops.dims]", '"Q"'),
        ("op", "range = [3.0, -3.0]", "empty range [3.0, -3.0]", "[3.0, -3.0]"),
        ("input", "scale = 0.0", "ops[0].inputs.x.scale must be > 0, got 0.0", "0.0"),
        ("input", "offset = true", "ops[0].inputs.x.offset must be a number, not a boolean", "true"),
        ("input", 'sign = "any "', "unknown sign 'any '", '"any "'),
        ("input", "range = [-inf, 1.0]", "a range bound must be a finite number, got -inf", "-inf"),
    ],
)
def test_value_domain_errors_name_their_position(workspace, where: str, line: str, says: str, at: str) -> None:
    head = f"[validation]\n{line}\n" if where == "validation" else ""
    op_line = f"{line}\n" if where == "op" else ""
    input_line = f"{line}\n" if where == "input" else ""
    text = head + OP_HEAD + op_line + f'[ops.inputs.x]\nshape = ["B"]\n{input_line}[ops.dims]\nB = 4\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert says in p.message, p
    assert (p.line, p.column) == line_col(text, at, text[: text.index(line)].count(at) + 1), p


def test_domain_keys_on_an_integer_input_are_refused(workspace) -> None:
    text = OP_HEAD + '[ops.inputs.t]\nshape = ["B"]\ndtype = "int32"\nrange = [0, 9]\nscale = 2.0\n[ops.dims]\nB = 4\n'
    p = only(workspace(text, {"ops.py": OPS_PY}))
    assert p.message == "scale applies to float inputs; input t is int32" and "range" in p.hint
    assert (p.line, p.column) == line_col(text, "scale")


def test_an_op_range_may_name_a_dim_and_uses_it(workspace) -> None:
    text = OP_HEAD + 'range = [0, "C"]\n[ops.inputs.x]\nshape = ["B"]\n[ops.dims]\nB = 4\nC = 7\n'
    cfg = load_config(workspace(text, {"ops.py": OPS_PY}))
    op = cfg.op("a")
    assert op.range == (0.0, "C") and not cfg.warnings  # C counts as used
    assert value_domain(op, op.inputs[0], {"B": 4, "C": 7}).range == (0.0, 7.0)


def test_ulp_tolerance_resolves_as_a_whole_statement(workspace) -> None:
    from gpuemu_ls.engine.config.model import resolve_bound

    text = (
        "[validation.tolerances]\nbfloat16 = { atol = 1e-2, rtol = 1e-2 }\nfloat32 = { ulp = 2 }\n"
        + OP_HEAD
        + "[ops.tolerances]\nbfloat16 = { ulp = 0 }\nfloat16 = { ulp = 1, atol = 1e-3 }\n"
    )
    cfg = load_config(workspace(text, {"ops.py": OPS_PY}))
    op, val = cfg.op("a"), cfg.validation
    exact = resolve_bound(op, val, "bfloat16")
    assert (exact.atol, exact.rtol, exact.ulp, exact.exact) == (0.0, 0.0, 0, True)  # not widened by the project's
    assert resolve_bound(op, val, "float16") == type(exact)(1e-3, 0.0, 1)
    assert resolve_bound(op, val, "float32") == type(exact)(0.0, 0.0, 2)  # from [validation.tolerances]
    assert resolve_bound(op, val, "float64").ulp is None  # the default rule
    assert resolve_tolerance(op, val, "bfloat16") == (0.0, 0.0)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("float32 = { ulp = -1 }", "ulp must be an integer in [0, 1048576], got -1"),
        ("float32 = { ulp = 1.5 }", "must be an integer"),
        ("float32 = { ulp = 2000000 }", "ulp must be an integer in [0, 1048576]"),
        ("float32 = { ulp = true }", "must be an integer"),
    ],
)
def test_bad_ulp_is_a_config_error_with_its_position(workspace, entry: str, words: str) -> None:
    root = workspace(OP_HEAD + "[ops.tolerances]\n" + entry + "\n", {"ops.py": OPS_PY})
    p = only(root)
    assert words in p.message and p.line == (OP_HEAD + "[ops.tolerances]\n").count("\n") + 1, p


def test_nan_contract_must_be_a_boolean(workspace) -> None:
    p = only(workspace(OP_HEAD + 'nan_contract = "yes"\n', {"ops.py": OPS_PY}))
    assert "nan_contract must be true or false" in p.message
    cfg = load_config(workspace(OP_HEAD + "nan_contract = true\n", {"ops.py": OPS_PY}, name="ok"))
    assert cfg.op("a").nan_contract is True
