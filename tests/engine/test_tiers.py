"""Two tiers of finding (oracle/tier.py): a bug, or an edge finding that shows only where a product of two
inputs overflows the accumulation precision, or where NaN/+inf inputs propagate differently.

Every kernel here is real numpy run through the real runners and ``run_case`` (the worker's unit), on inputs
written by hand so that each case is the one the rule is about. Each rule has a kernel it must excuse as an
edge finding and one that must stay a bug.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from kit.cases import spec_with
from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import Config
from gpuemu_ls.engine.oracle.outcome import op_status
from gpuemu_ls.engine.oracle.tier import overflow_threshold
from gpuemu_ls.engine.run.case import CaseContext, run_case
from gpuemu_ls.engine.run.frameworks import Adapter
from gpuemu_ls.engine.run.runners import CallableRunner, Runner, ScriptRunner

F32_TOP = float(np.finfo(np.float32).max) * (1 - 2.0**-23)

OPS = """
import numpy as np


def rmsnorm(x):
    # a correct kernel: the sum of squares in the accumulation precision (float32, float64 for float64)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    xf = np.asarray(x, dtype=acc)
    with np.errstate(all="ignore"):
        ms = (xf * xf).sum(axis=-1, keepdims=True, dtype=acc) / acc(x.shape[-1])
        return (xf / np.sqrt(ms + acc(1e-6))).astype(x.dtype)


def ref_generic(x):
    # dtype-generic: computes in the dtype it is given (float64 for the verdict, float32 for rule 2)
    with np.errstate(all="ignore"):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def ref_astype(x):
    x = x.astype(np.float64)  # the way most references are written
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def ref_torch(x):
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x)).double()
    return (t / torch.sqrt((t * t).mean(dim=-1, keepdim=True) + 1e-6)).numpy()


def softmax(x):
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        e = np.exp(xf - xf.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def softmax_no_max(x):
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        e = np.exp(xf)  # BUG: unshifted logits overflow from |x| > ~88
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def softmax_ref(x):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def row_sum(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=np.float32).sum(axis=-1).astype(x.dtype)


def row_sum_half_acc(x):
    with np.errstate(all="ignore"):
        # BUG: a float16 accumulator (a serial acc += x[j], as one thread walks its row)
        return np.add.accumulate(np.asarray(x), axis=-1, dtype=x.dtype)[..., -1]


def row_sum_inf_for_nan(x):
    # a convention: a row holding NaN sums to +inf (the kernel turns NaN into +inf first)
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        return np.where(np.isnan(xf), np.float32(np.inf), xf).sum(axis=-1).astype(x.dtype)


def row_sum_leaks_nan(x):
    # a bug: a NaN anywhere poisons every row (a block-wide reduction that mixes rows)
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        out = xf.sum(axis=-1)
        return np.where(np.isnan(out).any(), np.float32(np.nan), out).astype(x.dtype)


def row_sum_ref(x):
    return x.astype(np.float64).sum(axis=-1)


def nan_ref(x):
    return np.full(x.shape[:-1], np.nan)


def sumsq_half(x):
    xh = np.asarray(x, dtype=np.float16)
    with np.errstate(all="ignore"):
        return (xh * xh).astype(np.float32).sum(axis=-1).astype(x.dtype)  # BUG: squares in float16


def sumsq(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        return (xf * xf).sum(axis=-1).astype(x.dtype)


def sumsq_ref(x):
    x = x.astype(np.float64)
    return (x * x).sum(axis=-1)


def copy_nan_to_inf(x):
    # a cast kernel without a NaN guard: NaN becomes +inf
    xf = np.asarray(x, dtype=np.float32).copy()
    xf[np.isnan(xf)] = np.inf
    return xf.astype(x.dtype)


def copy_ref(x):
    return x.astype(np.float64)


def flash_block(x):
    # attention-style row softmax over two key blocks with an online max; a block that is all -inf
    # makes exp(-inf - -inf) = NaN in a row that has finite scores elsewhere (BUG)
    xf = np.asarray(x, dtype=np.float32)
    half = xf.shape[-1] // 2
    with np.errstate(all="ignore"):
        out = np.empty_like(xf)
        m1 = xf[:, :half].max(axis=-1, keepdims=True)
        e1 = np.exp(xf[:, :half] - m1)
        m2 = np.maximum(m1, xf[:, half:].max(axis=-1, keepdims=True))
        e2 = np.exp(xf[:, half:] - m2)
        s = e1.sum(axis=-1, keepdims=True) * np.exp(m1 - m2) + e2.sum(axis=-1, keepdims=True)
        out[:, :half] = e1 * np.exp(m1 - m2) / s
        out[:, half:] = e2 / s
    return out.astype(x.dtype)
"""

SCRIPT_REF = """
import base64, json, sys

import numpy as np

req = json.load(sys.stdin)
t = req["inputs"]["x"]
dt = {"float64": np.float64, "float32": np.float32, "float16": np.float16}[t["dtype"]]
x = np.frombuffer(base64.b64decode(t["data"]), dtype=dt).reshape(t["shape"]).astype(np.float64)  # decodes to float64
y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
out = {"shape": list(y.shape), "dtype": "float64", "data": base64.b64encode(y.astype("<f8").tobytes()).decode()}
print(json.dumps({"outputs": {"result": out}}))
"""


TOML = project_toml(validation={"dtypes": ["float32", "bfloat16", "float16", "float64"]}) + "".join(
    op_toml(n, module=f"tier_ops:{m}", reference=r, dims={"B": (1, 8, 2), "N": (1, 64, 8)}, **k)
    for n, m, r, k in (
        ("rmsnorm", "rmsnorm", "tier_ops:ref_astype", {}),
        ("strict_rmsnorm", "rmsnorm", "tier_ops:ref_astype", {"strict": True}),
        ("softmax", "softmax", "tier_ops:softmax_ref", {}),
        ("row_sum", "row_sum", "tier_ops:row_sum_ref", {}),
        ("sumsq", "sumsq", "tier_ops:sumsq_ref", {}),
        ("copy", "copy_nan_to_inf", "tier_ops:copy_ref", {}),
        ("flash", "flash_block", "tier_ops:softmax_ref", {}),
    )
)
TOML = TOML.replace('name = "copy"', 'name = "copy"\ntolerances = { float32 = { ulp = 0 } }')


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory, write_tree) -> Config:
    root = write_tree(
        tmp_path_factory.mktemp("tiers"), {"gpuemu.toml": TOML, "tier_ops.py": OPS, "refs/rms.py": SCRIPT_REF}
    )
    return load_config(root, user_config=root / "none.toml")


def ctx(cfg: Config, op_name: str, module: str | None = None, reference: str | None = None) -> CaseContext:
    op = cfg.op(op_name)
    op_runner = CallableRunner(cfg.root, module or op.module, op.input_names, Adapter(), "op")
    ref = reference or op.reference
    ref_runner: Runner = (
        ScriptRunner(cfg.root, ref, "reference")
        if ref.endswith(".py")
        else CallableRunner(cfg.root, ref, op.input_names, Adapter(), "reference")
    )
    return CaseContext(cfg.root, op, cfg.validation, op_runner, ref_runner)


def case(cfg: Config, op_name: str, x: np.ndarray, **kw: str):
    c = ctx(cfg, op_name, **kw)
    dims = {"B": x.shape[0], "N": x.shape[1]}
    spec = spec_with(c.op, 0, dtype=x.dtype.name, layout="contiguous", dims=dims)
    return run_case(c, spec, snapshot={"x": x})


def boundary_rows(dtype: object, top: float) -> np.ndarray:
    """Two rows of plain values, one of them holding +-(the dtype's top) as the boundary distribution does."""
    x = np.array([[0.5, -1.25, 2.0, 0.75, -0.5, 1.5, -2.0, 0.25], [1.0, top, -0.5, 2.0, -top, 0.5, 1.5, -1.0]])
    return x.astype(dtype)


# --- (a) overflow: the same tier whatever the reference is written in ---------------------------------------
@pytest.mark.parametrize(
    "reference",
    ["tier_ops:ref_generic", "tier_ops:ref_astype", "tier_ops:ref_torch", "refs/rms.py"],
    ids=["dtype-generic", "astype-float64", "torch-double", "script-float64"],
)
def test_an_overflow_only_at_the_dtype_top_is_an_edge_finding_however_the_reference_is_written(
    cfg: Config, reference: str
) -> None:
    if reference == "tier_ops:ref_torch":
        pytest.importorskip("torch")
    r = case(cfg, "rmsnorm", boundary_rows(np.float32, F32_TOP), reference=reference)
    assert r.status == "edge" and r.tier == "edge", (r.status, r.message)
    assert r.edge is not None and r.edge["reasons"] == ["overflow"]
    assert r.edge["threshold"] == pytest.approx(overflow_threshold("float32", 8))
    assert "product of two inputs exceeds float32" in r.edge["text"]
    assert op_status([r]) == "edge"


def test_the_same_kernel_with_ordinary_values_passes_and_a_float64_case_near_1e308_is_an_edge_too(cfg: Config) -> None:
    assert case(cfg, "rmsnorm", boundary_rows(np.float32, 3.0)).passed
    r = case(cfg, "rmsnorm", boundary_rows(np.float64, float(np.finfo(np.float64).max) * (1 - 2.0**-52)))
    # a float64 kernel squares in float64 like its float64 reference: never a bug there (an edge finding if
    # they part ways, which one more rounding of an overflowed sum may or may not make them)
    assert r.status in ("passed", "edge"), r.message
    if r.status == "edge":
        assert "exceeds float64" in r.edge["text"]


def test_strict_makes_an_edge_finding_fail_and_keeps_its_tier(cfg: Config) -> None:
    r = case(cfg, "strict_rmsnorm", boundary_rows(np.float32, F32_TOP))
    assert r.status == "failed" and r.tier == "edge" and not r.bug
    assert op_status([r]) == "failed"


# --- what must stay a bug --------------------------------------------------------------------------------
def test_no_max_subtraction_is_a_bug_below_the_threshold(cfg: Config) -> None:
    x = np.array([[90.0, 1.0, -3.0, 95.0, 2.0, 0.0, 1.0, 4.0]] * 2, dtype=np.float32)  # |x| ~ 100 << T
    assert case(cfg, "softmax", x).passed
    r = case(cfg, "softmax", x, module="tier_ops:softmax_no_max")
    assert r.status == "failed" and r.tier == "bug", r.message


def test_no_max_subtraction_at_the_top_is_an_edge_case_of_its_own_but_still_a_bug_below(cfg: Config) -> None:
    # at the dtype's top a correct softmax is right and so is the tamed case: the failure of the unshifted
    # kernel there is an edge finding of that case, while ordinary large values (above) make it a bug
    x = boundary_rows(np.float32, F32_TOP)
    assert case(cfg, "softmax", x).status in ("passed", "edge")


def test_a_half_precision_accumulator_is_a_bug(cfg: Config) -> None:
    # partial sums past 65504 in a float16 accumulator, a small total that float16 holds
    x = np.array([[30000.0, 30000.0, 30000.0, -30000.0, -30000.0, -30000.0, 1.0, 2.0]] * 2, dtype=np.float16)
    assert case(cfg, "row_sum", x).passed
    r = case(cfg, "row_sum", x, module="tier_ops:row_sum_half_acc")
    assert r.status == "failed" and r.tier == "bug", r.message


def test_squares_formed_in_float16_are_a_bug(cfg: Config) -> None:
    x = np.full((2, 8), 300.0, dtype=np.float32)  # 300**2 overflows float16, not float32
    assert case(cfg, "sumsq", x).passed
    r = case(cfg, "sumsq", x, module="tier_ops:sumsq_half")
    assert r.status == "failed" and r.tier == "bug", r.message


def test_a_wholly_masked_block_that_turns_a_finite_row_into_nan_is_a_bug(cfg: Config) -> None:
    x = np.array([[-np.inf, -np.inf, -np.inf, -np.inf, 1.0, 2.0, 0.5, -1.0]] * 2, dtype=np.float32)
    r = case(cfg, "flash", x)
    assert r.status == "failed" and r.tier == "bug" and r.kind == "unexpected_nan", r.message


# --- (b) propagation of NaN/+inf inputs ---------------------------------------------------------------------
def test_a_propagation_convention_at_nan_inputs_is_an_edge_finding(cfg: Config) -> None:
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    r = case(cfg, "row_sum", x, module="tier_ops:row_sum_inf_for_nan")
    assert r.status == "edge" and r.edge["reasons"] == ["propagation"], (r.status, r.message)


def test_a_nan_that_leaks_into_a_row_whose_reference_is_finite_is_a_bug(cfg: Config) -> None:
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    r = case(cfg, "row_sum", x, module="tier_ops:row_sum_leaks_nan")
    assert r.status == "failed" and r.tier == "bug", (r.status, r.message)


def test_a_tier_case_that_judged_nothing_is_no_evidence(cfg: Config) -> None:
    # a reference that returns NaN everywhere: with NaN inputs its NaN must be matched; the tier case (finite
    # inputs) judges nothing at all, so it cannot excuse the failure
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    r = case(cfg, "row_sum", x, reference="tier_ops:nan_ref")
    assert r.status == "failed" and r.tier == "bug", (r.status, r.message)
    assert r.features["tier_case"]["status"] == "passed"  # vacuously: every element the reference's NaN


def test_an_exact_op_has_no_propagation_convention(cfg: Config) -> None:
    x = np.array([[1.0, np.nan, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    r = case(cfg, "copy", x)  # ulp = 0: a cast that turns NaN into inf is wrong
    assert r.status == "failed" and r.tier == "bug", (r.status, r.message)


def test_minus_inf_alone_never_makes_a_tier_case(cfg: Config) -> None:
    # masks are part of every attention kernel's contract: a -inf-only failure is always judged as a bug
    x = np.array([[-np.inf, -np.inf, -np.inf, -np.inf, 1.0, 2.0, 0.5, -1.0]] * 2, dtype=np.float32)
    r = case(cfg, "flash", x)
    assert "tier_case" not in r.features and r.tier == "bug"


def test_a_tier_case_replays_from_the_same_inputs(cfg: Config) -> None:
    x = boundary_rows(np.float32, F32_TOP)
    a, b = case(cfg, "rmsnorm", x), case(cfg, "rmsnorm", x.copy())
    assert (a.status, a.edge) == (b.status, b.edge)
    assert dataclasses.asdict(a.spec) == dataclasses.asdict(b.spec)
