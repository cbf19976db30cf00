"""One case in process: real ops and references through CallableRunner/ScriptRunner, scored by run_case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kit.cases import spec_with
from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.cases.plan import derive_case
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import Config
from gpuemu_ls.engine.run import wire
from gpuemu_ls.engine.run.case import CaseContext, CaseResult, run_case
from gpuemu_ls.engine.run.frameworks import Adapter
from gpuemu_ls.engine.run.runners import CallableRunner, CallError, Runner, ScriptRunner

TOML = (
    project_toml(validation={"dtypes": ["float32", "float16", "bfloat16"]})
    + op_toml(
        "softmax",
        module="case_ops:softmax",
        reference="case_ops:softmax_ref",
        invariants=["non_negative", "normalized", "shape_preserved"],
        dims={"B": (1, 8, 3), "N": (1, 300, 64)},
    )
    + op_toml(
        "layernorm",
        module="case_ops:layernorm",
        reference="case_ops:layernorm_ref",
        dtypes=["float32"],
        distributions=["constant_rows"],
        dims={"B": (1, 16, 4), "N": (1, 2048, 512)},
        tables={"kwargs": {"eps": 1e-05}},
    )
    + op_toml(
        "matmul",
        module="case_ops:matmul",
        reference="case_ops:matmul_ref",
        dtypes=["float32"],
        layouts=["contiguous", "transposed"],
        distributions=["normal"],
        inputs={"a": ["M", "K"], "b": ["K", "N"]},
        dims={"M": (1, 32, 16), "K": (1, 4096, 2048), "N": (1, 32, 16)},
    )
    + op_toml(
        "rowmean",
        module="case_ops:rowmean",
        reference="case_ops:rowmean_ref",
        dtypes=["float32"],
        dims={"B": (1, 64, 16), "N": (1, 256, 64)},
    )
    + op_toml(
        "scale",
        module="case_ops:scale",
        reference="case_ops:scale_ref",
        invariants=["finite", "non_negative"],
        dtypes=["float16"],
        dims={"B": (1, 8, 2), "N": (1, 64, 4)},
    )
)

OPS = """
import numpy as np


def softmax(x):
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        m = xf.max(axis=-1, keepdims=True)
        e = np.exp(xf - np.where(np.isneginf(m), 0, m))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def softmax_ref(x):
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def softmax_masked_zeros(x):
    y = softmax(x)
    return np.where(np.isnan(y), 0, y).astype(x.dtype)


def normalize_zero_safe(x):
    xf = np.asarray(x, dtype=np.float32)
    s = xf.sum(axis=-1, keepdims=True)
    return np.where(s == 0, 0, xf / np.where(s == 0, 1, s)).astype(x.dtype)


def normalize_naive_ref(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return x / x.sum(axis=-1, keepdims=True)


def softmax_buggy(x):
    return (softmax(x).astype(np.float32) * np.float32(1.001)).astype(x.dtype)


def softmax_nan(x):
    y = softmax(x)
    y[..., 0] = np.nan
    return y


def softmax_f64(x):
    return softmax(x).astype(np.float64)


def softmax_mutates(x):
    y = softmax(x)
    x[...] = 0
    return y


def softmax_writes_gap(x):
    y = softmax(x)
    if x.base is not None and x.base.size > x.size:
        x.base[..., 1] = 0  # inside the strided gap, not a logical element
    return y


def softmax_raises(x):
    y = softmax(x)
    raise IndexError("tile index out of range")


def softmax_none(x):
    out = np.empty_like(x)
    np.copyto(out, softmax(x))


def softmax_two(x):
    return {"result": softmax(x), "lse": x.max(axis=-1)}


def softmax_shape(x):
    return softmax(x)[:, :-1]


def softmax_negative_zeros(x):
    y = softmax(x)
    y[y == 0] = -1e-9  # within atol of the reference's exact zeros, but negative
    return y


def layernorm(x, eps):
    # float32 with tree (pairwise) sums, as a GPU kernel reduces
    xf = np.ascontiguousarray(x, dtype=np.float32)
    n = np.float32(max(xf.shape[-1], 1))
    mean = xf.sum(axis=-1, keepdims=True, dtype=np.float32) / n
    d = xf - mean
    var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) / n
    return (d / np.sqrt(var + np.float32(eps))).astype(x.dtype)


def layernorm_buggy(x, eps):
    xf = np.ascontiguousarray(x, dtype=np.float32)
    mean = xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    d = xf - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=np.float32)
    return (d / np.sqrt(var + np.float32(eps) * np.float32(1000))).astype(x.dtype)  # wrong eps


def layernorm_ref(x, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def matmul(a, b):
    return (np.asarray(a, dtype=np.float32) @ np.asarray(b, dtype=np.float32)).astype(a.dtype)


def matmul_short_k(a, b):
    k = a.shape[-1]
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if k <= 64:
        return a32 @ b32
    return (a32[:, : k - 1] @ b32[: k - 1]).astype(a.dtype)  # drops the last K element


def matmul_ref(a, b):
    return a @ b


def layernorm_numpy(x, eps):
    # numpy's own float32 reductions on the logical array: over a transposed view the last axis is strided
    # and numpy sums it sequentially (error ~ n u, one direction on constant rows), not pairwise
    xf = np.asarray(x, dtype=np.float32)
    mean = xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    d = xf - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=np.float32)
    return (d / np.sqrt(var + np.float32(eps))).astype(x.dtype)


def rowmean(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=np.float32).mean(axis=-1, dtype=np.float32).astype(x.dtype)


def rowmean_doubles_small(x):
    y = rowmean(x)
    return np.where(np.abs(y) < 1e6, 2 * y, y).astype(x.dtype)  # a real bug, hidden where |y| is huge


def rowmean_ref(x):
    return x.mean(axis=-1)


def scale(x):
    return (np.asarray(x, dtype=np.float32) * np.float32(1000)).astype(x.dtype)


def scale_ref(x):
    return x * 1000.0


def matmul_long(a, b):
    return (a.astype(np.longdouble) @ b.astype(np.longdouble)).astype(a.dtype)


def matmul_ftz(a, b):  # flushes subnormal inputs to zero, as tensor-core and fast-math paths may
    tiny = np.finfo(np.float32).tiny
    a32, b32 = (np.where(np.abs(t) < tiny, 0, t).astype(np.float32) for t in (a, b))
    return (a32 @ b32).astype(a.dtype)
"""

SCRIPT_OK = """
import base64, json, sys
import numpy as np

req = json.load(sys.stdin)
t = req["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype="<f8").reshape(t["shape"])
with np.errstate(invalid="ignore", over="ignore"):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True)
print(json.dumps({"outputs": {"result": {"shape": list(y.shape), "dtype": "float64",
                                         "data": base64.b64encode(y.astype("<f8").tobytes()).decode()}}}))
"""

SCRIPT_OP = """
import base64, json, sys
import numpy as np

req = json.load(sys.stdin)
t = req["inputs"]["x"]
dtype = {"float32": "<f4"}[t["dtype"]]
flat = np.frombuffer(base64.b64decode(t["data"]), dtype=dtype)
strides = t.get("strides")
if strides:
    x = np.lib.stride_tricks.as_strided(flat, t["shape"], [s * 4 for s in strides])
else:
    x = flat.reshape(t["shape"])
xf = x.astype(np.float32)
e = np.exp(xf - xf.max(axis=-1, keepdims=True))
y = (e / e.sum(axis=-1, keepdims=True)).astype("<f4")
print(json.dumps({"shape": list(y.shape), "dtype": "float32", "data": base64.b64encode(y.tobytes()).decode()}))
"""

FILES = {
    "case_ops.py": OPS,
    "refs/ok.py": SCRIPT_OK,
    "refs/raises.py": "import sys\nsys.stdin.read()\n\nraise RuntimeError('reference blew up')\n",
    "refs/exits.py": "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(3)\n",
    "refs/junk.py": "print('loading weights')\nprint('{}')\n",
    "refs/silent.py": "import sys\nsys.stdin.read()\n",
    "ops/softmax_op.py": SCRIPT_OP,
}


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory, write_tree) -> Config:
    root = write_tree(tmp_path_factory.mktemp("case"), {"gpuemu.toml": TOML, **FILES})
    return load_config(root, user_config=root / "none.toml")


def ctx_for(
    cfg: Config, op_name: str, module: str | None = None, reference: str | None = None, op_runner: Runner | None = None
) -> CaseContext:
    op = cfg.op(op_name)
    root = cfg.root
    if op_runner is None:
        op_runner = CallableRunner(root, module or op.module, op.input_names, Adapter(), "op")
    ref = reference or op.reference
    ref_runner: Runner = (
        ScriptRunner(root, ref, "reference")
        if ref.endswith(".py")
        else CallableRunner(root, ref, op.input_names, Adapter(), "reference")
    )
    return CaseContext(root, op, cfg.validation, op_runner, ref_runner)


def run(
    cfg: Config, module: str, seed: int = 0, op_name: str = "softmax", reference: str | None = None, **changes: object
) -> CaseResult:
    ctx = ctx_for(cfg, op_name, module, reference)
    return run_case(ctx, spec_with(ctx.op, seed, **changes))


def test_a_correct_op_passes_across_dtypes_layouts_and_distributions(cfg: Config) -> None:
    ctx = ctx_for(cfg, "softmax")
    results = [run_case(ctx, derive_case(ctx.op, s)) for s in range(48)]
    bad = [(r.seed, r.kind, r.message) for r in results if not r.passed]
    assert bad == []
    seen = {(r.spec.dtype, r.spec.layout) for r in results}
    assert len(seen) == 9  # every dtype met every layout
    assert all(r.snapshot is None for r in results)  # passing cases keep no snapshot


def test_a_buggy_op_fails_with_mismatch(cfg: Config) -> None:
    r = run(
        cfg,
        "case_ops:softmax_buggy",
        dtype="float32",
        layout="contiguous",
        distribution="normal",
        dims={"B": 2, "N": 50},
    )
    assert r.status == "failed" and r.kind == "mismatch" and not r.passed
    assert "elements off" in r.message and r.tolerance == (1e-5, 1e-5)
    assert r.snapshot is not None and r.snapshot["x"].shape == (2, 50)
    assert r.features["outputs"]["result"]["bad_rows"] == 2


def test_nan_where_the_reference_is_finite(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_nan", dtype="float16", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "unexpected_nan"
    assert r.comparisons[0].unexpected_nan == 2


def test_nan_where_the_reference_is_nan_too_passes(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax", dtype="float32", distribution="masked_rows", dims={"B": 4, "N": 16})
    assert r.passed, r.message


def test_wrong_output_dtype(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_f64", dtype="bfloat16", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "dtype_mismatch"
    assert "is float64, expected bfloat16" in r.message


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_op_mutating_its_input(cfg: Config, layout: str) -> None:
    r = run(cfg, "case_ops:softmax_mutates", layout=layout, distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "input_mutation" and "x" in r.message


def test_op_writing_into_the_strided_gap(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_writes_gap", layout="strided", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "input_mutation"
    ok = run(cfg, "case_ops:softmax_writes_gap", layout="contiguous", distribution="normal", dims={"B": 2, "N": 8})
    assert ok.passed


def test_op_raising_is_an_error_at_the_users_line(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_raises", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "error" and r.kind == "op_error" and not r.passed
    assert r.message.startswith("op raised IndexError: tile index out of range")
    assert Path(r.file) == cfg.root / "case_ops.py"
    assert r.line == OPS.splitlines().index('    raise IndexError("tile index out of range")') + 1
    assert r.snapshot is not None  # an error keeps its inputs for replay


def test_op_returning_none(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_none", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "error" and r.kind == "op_bad_output" and "returned None" in r.message


def test_different_output_names(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_two", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "output_names" and "'lse'" in r.message


def test_wrong_output_shape(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_shape", distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "failed" and r.kind == "shape_mismatch"


def test_invariant_violation_is_reported_with_its_name(cfg: Config) -> None:
    r = run(cfg, "case_ops:softmax_negative_zeros", dtype="float32", distribution="partial_inf", dims={"B": 4, "N": 40})
    assert r.comparisons[0].passed  # -1e-9 against 0 is within atol
    assert r.status == "failed" and r.kind == "invariant"
    assert r.message.startswith("invariant non_negative violated")
    assert r.violations[0].count == int(np.sum(r.snapshot["x"] == -np.inf))


@pytest.mark.parametrize(
    ("script", "kind", "words"),
    [
        ("refs/raises.py", "reference_error", "reference script raised RuntimeError: reference blew up"),
        ("refs/exits.py", "reference_exit", "exited with status 3"),
        ("refs/junk.py", "reference_bad_output", "'loading weights'"),
        ("refs/silent.py", "reference_bad_output", "printed nothing"),
    ],
)
def test_reference_script_failures(cfg: Config, script: str, kind: str, words: str) -> None:
    r = run(cfg, "case_ops:softmax", reference=script, distribution="normal", dims={"B": 2, "N": 8})
    assert r.status == "error" and r.kind == kind and words in r.message
    assert Path(r.file) == (cfg.root / script)
    if kind == "reference_error":
        assert r.line == 4
    if kind == "reference_exit":
        assert "bad input" in r.stderr


def test_reference_script_runs_warm_and_unchanged(cfg: Config) -> None:
    ctx = ctx_for(cfg, "softmax", reference="refs/ok.py")
    results = [run_case(ctx, derive_case(ctx.op, s)) for s in range(12)]
    assert all(r.passed for r in results), [(r.seed, r.kind, r.message) for r in results if not r.passed]


def test_op_script_receives_strides(cfg: Config) -> None:
    runner = ScriptRunner(cfg.root, "ops/softmax_op.py", "op", strides=True)
    ctx = ctx_for(cfg, "softmax", op_runner=runner)
    for layout in ("contiguous", "transposed", "strided"):
        r = run_case(
            ctx, spec_with(ctx.op, 0, dtype="float32", layout=layout, distribution="normal", dims={"B": 3, "N": 9})
        )
        assert r.passed, (layout, r.message)


def test_script_with_syntax_error_names_its_line(cfg: Config, tmp_path: Path) -> None:
    (cfg.root / "refs" / "broken.py").write_text("import json\n\ndef f(:\n    pass\n")
    with pytest.raises(CallError) as info:
        ScriptRunner(cfg.root, "refs/broken.py", "reference")
    assert info.value.kind == "import" and info.value.line == 3


def test_replay_from_a_snapshot_is_byte_for_byte(cfg: Config) -> None:
    ctx = ctx_for(cfg, "softmax", "case_ops:softmax_buggy")
    spec = spec_with(ctx.op, 5, dtype="float32", layout="strided", distribution="normal", dims={"B": 3, "N": 33})
    first = run_case(ctx, spec)
    again = run_case(ctx, spec, snapshot=first.snapshot)
    assert again.from_snapshot and not first.from_snapshot
    assert again.kind == first.kind == "mismatch"
    assert again.comparisons[0].to_dict() == first.comparisons[0].to_dict()
    assert again.snapshot["x"].tobytes() == first.snapshot["x"].tobytes()


def test_ill_conditioned_matmul_passes_thanks_to_sensitivity(cfg: Config) -> None:
    ctx = ctx_for(cfg, "matmul")
    results = [run_case(ctx, derive_case(ctx.op, s)) for s in range(16)]
    assert all(r.passed for r in results), [(r.seed, r.message) for r in results if not r.passed]
    widened = [r for r in results if r.comparisons[0].used_sensitivity]
    assert widened and all(r.comparisons[0].widened > 0 for r in widened)


def test_correct_float32_matmul_on_extreme_values_is_never_failed_for_inherent_overflow(cfg: Config) -> None:
    # a row whose two products (-4.08e38, 3.53e38) overflow float32 in any order, while the true sum (-5.5e37)
    # fits: the float32 evaluation of the reference overflows too, so the element is out of range, not failed
    ctx = ctx_for(cfg, "matmul")
    a = np.array([[1.20006895, 1.03715992], [1.0, 2.0]], dtype=np.float32)
    b = np.array([[-3.40282306e38, 1.0], [3.40282306e38, 0.5]], dtype=np.float32)
    spec = spec_with(ctx.op, 0, layout="contiguous", distribution="boundary", dims={"M": 2, "K": 2, "N": 2})
    result = run_case(ctx, spec, snapshot={"a": a, "b": b})
    assert result.status == "passed", result.message
    c = result.comparisons[0]
    assert c.out_of_range == 1 and c.mismatches == 0 and c.out_of_range_rows == 1
    assert "out of range" in c.summary()


def test_subnormal_inputs_may_be_flushed_to_zero() -> None:
    from gpuemu_ls.engine.run.case import _flushed

    op = type("Op", (), {"inputs": [type("I", (), {"name": "x", "dtype": None})()]})()
    spec = type("Spec", (), {"dtype": "float32"})()
    x = np.array([1e-40, -1e-41, 1.2e-38, 0.0, 1.0])  # two float32 subnormals, the smallest normal, 0, 1
    flushed = _flushed(op, spec, {"x": x})  # type: ignore[arg-type]
    assert flushed is not None and flushed["x"].tolist() == [0.0, 0.0, 1.2e-38, 0.0, 1.0]
    assert _flushed(op, spec, {"x": np.array([1.0, 2.0])}) is None  # type: ignore[arg-type]
    bf16 = type("Spec", (), {"dtype": "bfloat16"})()
    assert _flushed(op, bf16, {"x": np.array([1e-39])})["x"].tolist() == [0.0]  # type: ignore[arg-type,index]


def test_matmul_with_a_real_bug_still_fails(cfg: Config) -> None:
    ctx = ctx_for(cfg, "matmul", "case_ops:matmul_short_k")
    results = [run_case(ctx, derive_case(ctx.op, s)) for s in range(8)]
    failed = [r for r in results if r.status == "failed"]
    assert failed and all(r.kind == "mismatch" for r in failed)
    assert all(r.spec.dims["K"] <= 64 for r in results if r.passed)


def test_constant_rows_layernorm_widened_where_measured(cfg: Config) -> None:
    ctx = ctx_for(cfg, "layernorm")
    r = run_case(ctx, derive_case(ctx.op, 14))
    c = r.comparisons[0]
    assert r.passed and c.used_sensitivity and c.widened > 100


def test_layernorm_with_a_real_bug_still_fails(cfg: Config) -> None:
    ctx = ctx_for(cfg, "layernorm", "case_ops:layernorm_buggy")
    spec = spec_with(ctx.op, 1, distribution="normal", dims={"B": 4, "N": 64})
    r = run_case(ctx, spec)
    assert r.status == "failed" and r.kind == "mismatch"


def test_ill_conditioned_correct_layernorm_passes(cfg: Config) -> None:
    ctx = ctx_for(cfg, "layernorm")
    results = [run_case(ctx, derive_case(ctx.op, s)) for s in range(8)]
    bad = [(r.seed, r.comparisons[0].mismatches, r.comparisons[0].total) for r in results if not r.passed]
    assert bad == []


VENV_OPS = """
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".venv", "lib", "python3", "site-packages"))
import tinylib  # noqa: E402


def op(x):
    return tinylib.reshape(x, (3, 3))


def ref(x):
    return x
"""


TINYLIB = "def reshape(x, shape):\n    raise ValueError('cannot reshape')\n"


def test_error_inside_a_library_in_a_workspace_venv_points_at_the_op(workspace) -> None:
    root = workspace(
        '[[ops]]\nname = "v"\nmodule = "venv_ops:op"\nreference = "venv_ops:ref"\n'
        '[ops.inputs.x]\nshape = ["N"]\n[ops.dims]\nN = 4\n',
        {
            "venv_ops.py": VENV_OPS,
            ".venv/lib/python3/site-packages/tinylib.py": TINYLIB,
        },
    )
    cfg = load_config(root)
    op = cfg.op("v")
    ctx = CaseContext(
        root,
        op,
        cfg.validation,
        CallableRunner(root, "venv_ops:op", ("x",), Adapter(), "op"),
        CallableRunner(root, "venv_ops:ref", ("x",), Adapter(), "reference"),
    )
    r = run_case(ctx, derive_case(op, 0))
    assert r.kind == "op_error"
    assert (Path(r.file).name, r.line) == (
        "venv_ops.py",
        VENV_OPS.splitlines().index("    return tinylib.reshape(x, (3, 3))") + 1,
    )


SIBLING_REF = """
import base64, json, sys
import numpy as np
from sibling_helpers import softmax  # refs/sibling_helpers.py, next to this script

t = json.load(sys.stdin)["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype="<f8").reshape(t["shape"])
y = softmax(x)
print(json.dumps({"shape": list(y.shape), "dtype": "float64", "data": base64.b64encode(y.tobytes()).decode()}))
"""


def test_reference_script_can_import_its_sibling_module(cfg: Config, tmp_path: Path) -> None:
    (cfg.root / "refs" / "sibling_helpers.py").write_text(
        "import numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n"
    )
    (cfg.root / "refs" / "sibling.py").write_text(SIBLING_REF)
    # the script runs unchanged with plain `python refs/sibling.py`
    x = np.arange(6.0).reshape(2, 3)
    request = wire.encode_request({"x": x}, {})
    standalone = subprocess.run(
        [sys.executable, "refs/sibling.py"], input=request, capture_output=True, text=True, cwd=cfg.root, timeout=60
    )
    assert standalone.returncode == 0, standalone.stderr
    r = run(cfg, "case_ops:softmax", reference="refs/sibling.py", distribution="normal", dims={"B": 2, "N": 8})
    assert r.passed, r.message


# --- verdicts: working-precision rounding drift, per-element slack, reference overflow (issues 12, 18) -------


def test_numpys_own_float32_layernorm_over_constant_transposed_rows_passes(cfg: Config) -> None:
    # a sequential float32 sum over a strided axis drifts by about n u in one direction on constant rows
    ctx = ctx_for(cfg, "layernorm", "case_ops:layernorm_numpy")
    results = [
        run_case(ctx, spec_with(ctx.op, s, layout="transposed", dims={"B": 8, "N": n}))
        for s in range(4)
        for n in (257, 1000, 2048)
    ]
    bad = [(r.seed, r.spec.dims, r.message) for r in results if not r.passed]
    assert bad == []


def test_a_small_element_does_not_borrow_the_slack_of_a_huge_ill_conditioned_one(cfg: Config) -> None:
    # a 1-D output (the "row" is the whole batch): rows 0-3 cancel huge values (ill-conditioned means near
    # zero would get slack), rows 4-15 are small and well conditioned; doubling them is a bug on every case
    ctx = ctx_for(cfg, "rowmean", "case_ops:rowmean_doubles_small")
    ok = ctx_for(cfg, "rowmean")
    rng = np.random.default_rng(7)
    for trial in range(6):
        x = rng.standard_normal((16, 64)) * 0.5
        x[:4] = rng.choice([-1.0, 1.0], (4, 64)) * 2.0 ** rng.integers(40, 56, (4, 64))
        x = x.astype(np.float32)
        spec = spec_with(ctx.op, trial, layout="contiguous", distribution="large", dims={"B": 16, "N": 64})
        buggy = run_case(ctx, spec, snapshot={"x": x})
        assert buggy.status == "failed", buggy.message
        assert buggy.comparisons[0].mismatches >= 12  # every small row, whatever its huge neighbours
        assert run_case(ok, spec, snapshot={"x": x}).passed


def test_float64_reference_overflow_is_out_of_range_not_a_failure(cfg: Config) -> None:
    # products of 1e200 overflow float64; the long double evaluation knows the true sum is finite
    # a correct float64 kernel that accumulates in long double returns the true 0; float64 itself gives NaN
    ctx = ctx_for(cfg, "matmul", "case_ops:matmul_long")
    a = np.array([[1e200, 1e200], [1.0, 2.0]])
    b = np.array([[1e200, 0.5], [-1e200, 0.25]])
    spec = spec_with(
        ctx.op, 0, dtype="float64", layout="contiguous", distribution="boundary", dims={"M": 2, "K": 2, "N": 2}
    )
    r = run_case(ctx, spec, snapshot={"a": a, "b": b})
    assert r.passed, r.message
    c = r.comparisons[0]
    assert c.out_of_range == 1 and c.suspect_nan == 0 and c.mismatches == 0


def test_finite_invariant_accepts_an_inf_the_comparison_accepted(cfg: Config) -> None:
    # 100 * 1000 is beyond float16's range: the correct kernel's inf is what float16 holds there
    ctx = ctx_for(cfg, "scale")
    x = np.array([[100.0, 0.001], [-0.5, 64.0]], dtype=np.float16)
    r = run_case(ctx, spec_with(ctx.op, 0, layout="contiguous", dims={"B": 2, "N": 2}), snapshot={"x": x})
    assert r.passed, (r.message, r.violations)


def test_a_reference_nan_from_nan_free_inputs_is_suspect_not_the_ops_failure(cfg: Config) -> None:
    # a naive reference: a fully masked row gives -inf - -inf = NaN; the op correctly returns zeros there
    ctx = ctx_for(cfg, "softmax", "case_ops:softmax", "case_ops:softmax_ref")
    x = np.array([[-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], dtype=np.float32)
    spec = spec_with(ctx.op, 0, dtype="float32", layout="contiguous", dims={"B": 2, "N": 3})
    r = run_case(ctx, spec, snapshot={"x": x})
    c = r.comparisons[0]
    assert c.suspect_nan == 0 or r.passed  # NaN in both: matched either way
    zeros = ctx_for(cfg, "softmax", "case_ops:softmax_masked_zeros", "case_ops:softmax_ref")
    r = run_case(zeros, spec, snapshot={"x": x})
    assert r.passed, r.message
    c = r.comparisons[0]
    # the reference is undefined at a fully -inf row: said as such, not as a reference fault
    assert c.suspect_nan == 3 and c.suspect_inf == 3, c.summary()
    assert "undefined (NaN) at infinite inputs" in c.summary() and "check the reference" not in c.summary()
    # NaN from finite inputs (0/0 of a zero row through a naive normalisation) is a reference fault to check
    finite = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    naive = ctx_for(cfg, "softmax", "case_ops:normalize_zero_safe", "case_ops:normalize_naive_ref")
    r = run_case(naive, spec, snapshot={"x": finite})
    c = r.comparisons[0]
    assert r.passed and c.suspect_nan == 3 and c.suspect_inf == 0, c.summary()
    assert "from finite inputs: check the reference" in c.summary()
