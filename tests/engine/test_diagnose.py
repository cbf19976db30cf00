"""Diagnosis lines from real runs of small buggy ops (in process) and from constructed case sets."""

from __future__ import annotations

import re

import pytest
from kit.cases import spec_with
from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.cases.plan import CaseSpec
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import Config
from gpuemu_ls.engine.oracle.diagnose import confirm, diagnose_cases, find_condition
from gpuemu_ls.engine.run.case import CaseContext, CaseResult, run_case
from gpuemu_ls.engine.run.confirm import variant_spec
from gpuemu_ls.engine.run.frameworks import Adapter
from gpuemu_ls.engine.run.runners import CallableRunner

TOML = (
    project_toml(validation={"dtypes": ["float32"]})
    + op_toml(
        "rows",
        module="diag_ops:scale_tail",
        reference="diag_ops:scale_ref",
        layouts=["contiguous"],
        distributions=["normal"],
        dims={"B": 3, "N": (1, 1024, 128)},
    )
    + op_toml(
        "softmax",
        module="diag_ops:softmax_pad_zero",
        reference="diag_ops:softmax_ref",
        layouts=["contiguous"],
        distributions=["normal"],
        dims={"B": 3, "N": (1, 1024, 128)},
    )
    + op_toml(
        "layout",
        module="diag_ops:ignores_strides",
        reference="diag_ops:scale_ref",
        distributions=["normal"],
        dims={"B": (2, 8, 4), "N": (2, 64, 16)},
    )
    + op_toml(
        "matmul",
        module="diag_ops:matmul_overwrite",
        reference="diag_ops:matmul_ref",
        layouts=["contiguous"],
        distributions=["normal"],
        inputs={"a": ["M", "K"], "b": ["K", "N"]},
        dims={"M": 4, "N": 5, "K": [1, 16, 32, 33, 64, 100]},
    )
    + op_toml(
        "matmul_any",
        module="diag_ops:matmul_overwrite",
        reference="diag_ops:matmul_ref",
        distributions=["normal", "uniform", "subnormal"],
        inputs={"a": ["M", "K"], "b": ["K", "N"]},
        dims={"M": (1, 64, 8), "N": (1, 64, 8), "K": (1, 256, 64)},
    )
    + op_toml(
        "attention",
        module="diag_ops:scores_no_scale",
        reference="diag_ops:scores_ref",
        layouts=["contiguous"],
        distributions=["uniform"],
        inputs={"q": ["M", "D"], "k": ["N", "D"]},
        dims={"M": 6, "N": 7, "D": [16, 64, 4, 256]},
    )
    + op_toml(
        "twotrig",
        module="diag_ops:two_triggers",
        reference="diag_ops:scale_ref",
        layouts=["contiguous"],
        distributions=["normal", "large"],
        dims={"B": 3, "N": (1, 1024, 128)},
    )
    # a cast is right only if it is the correctly rounded value (bfloat16 ulp = 0)
    + op_toml(
        "cast",
        module="diag_ops:cast_half_up",
        reference="diag_ops:cast_ref",
        layouts=["contiguous"],
        distributions=["normal", "ties"],
        output_dtype="bfloat16",
        inputs={"x": {"shape": ["B", "N"], "dtype": "float32"}},
        dims={"B": (1, 64, 8), "N": (1, 4096, 64)},
        tables={"tolerances": {"bfloat16": {"ulp": 0}}},
    )
    + op_toml(
        "lse",
        module="diag_ops:lse_max_from_zero",
        reference="diag_ops:lse_ref",
        layouts=["contiguous"],
        distributions=["normal", "large"],
        dims={"B": (1, 8, 2), "N": (1, 64, 8)},
    )
    + op_toml(
        "bias",
        module="diag_ops:bias_tail_128",
        reference="diag_ops:bias_ref",
        layouts=["contiguous"],
        distributions=["normal", "constant_rows"],
        inputs={"x": ["B", "N"], "bias": ["N"]},
        dims={"B": (1, 64, 8), "N": (1, 4096, 1024)},
    )
    + op_toml(
        "masked",
        module="diag_ops:softmax_plain",
        reference="diag_ops:masked_softmax_ref",
        layouts=["contiguous"],
        distributions=["masked_rows", "normal"],
        dims={"B": (4, 8, 6), "N": (2, 64, 16)},
    )
)

OPS = """
import numpy as np


def scale_ref(x):
    return 2.0 * x


def scale_tail(x):
    y = (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)
    n = x.shape[-1]
    if n % 128:
        y[..., (n // 128) * 128:] *= 3  # the partial last tile is wrong
    return y


def bias_ref(x, bias):
    return x + bias


def _bias_tail(x, bias, block):
    n = x.shape[-1]
    y = np.empty_like(x)
    for start in range(0, n, block):
        w = min(block, n - start)
        # the partial last tile reads bias[:w], not bias[start:start + w]: right only while it is the first tile
        b = bias[start:start + w] if w == block else bias[:w]
        y[..., start:start + w] = (np.asarray(x[..., start:start + w], dtype=np.float32) + b).astype(x.dtype)
    return y


def bias_tail_64(x, bias):
    return _bias_tail(x, bias, 64)


def bias_tail_128(x, bias):
    return _bias_tail(x, bias, 128)


def bias_tail_256(x, bias):
    return _bias_tail(x, bias, 256)


def scale_size_one(x):
    y = (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)
    return y if x.shape[-1] != 1 else y * 0.5


def two_triggers(x):
    y = (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)
    if x.shape[-1] > 256 or np.abs(x).max() >= 100:  # long rows or large values
        y = y * np.float32(1.5)
    return y


def scale_eighth(x):
    return (0.25 * np.asarray(x, dtype=np.float32)).astype(x.dtype)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_pad_zero(x):
    xf = np.asarray(x, dtype=np.float32)
    n = xf.shape[-1]
    pad = (-n) % 128  # the last tile is padded with 0.0, not -inf, and the padding is summed
    m = xf.max(axis=-1, keepdims=True)
    m = np.maximum(m, 0) if pad else m
    e = np.exp(xf - m)
    s = e.sum(axis=-1, keepdims=True) + pad * np.exp(-m)
    return (e / s).astype(x.dtype)


def cast_ref(x):
    import ml_dtypes

    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)


def cast_half_up(x):
    import ml_dtypes

    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    out = ((bits + np.uint32(0x8000)) >> np.uint32(16)).astype(np.uint16)  # ties away from zero
    return out.view(ml_dtypes.bfloat16)


def lse_ref(x):
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def lse_max_from_zero(x):
    xf = np.asarray(x, dtype=np.float32)
    m = np.maximum(xf.max(axis=-1, keepdims=True), 0)  # the running max starts at 0, not -inf
    with np.errstate(divide="ignore"):
        return (m + np.log(np.exp(xf - m).sum(axis=-1, keepdims=True)))[..., 0].astype(x.dtype)


def ignores_strides(x):
    # reads the buffer as if it were C-contiguous
    flat = np.lib.stride_tricks.as_strided(x, shape=(x.size,), strides=(x.itemsize,))
    return (2 * flat.reshape(x.shape).astype(np.float32)).astype(x.dtype)


def ignores_gaps(x):
    if x.flags.c_contiguous or x.flags.f_contiguous:
        return (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)
    return ignores_strides(x)


def matmul_ref(a, b):
    return a @ b


def matmul_overwrite(a, b):
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k0 in range(0, a.shape[1], 32):
        acc = a32[:, k0:k0 + 32] @ b32[k0:k0 + 32]  # should be +=
    return acc.astype(a.dtype)


def scores_ref(q, k):
    return q @ k.T / np.sqrt(q.shape[-1])


def scores_no_scale(q, k):
    return (np.asarray(q, dtype=np.float32) @ np.asarray(k, dtype=np.float32).T).astype(q.dtype)


def softmax_plain(x):
    xf = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        e = np.exp(xf - xf.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def masked_softmax_ref(x):
    out = np.zeros_like(x)
    live = ~np.all(np.isneginf(x), axis=-1)
    xl = x[live]
    e = np.exp(xl - xl.max(axis=-1, keepdims=True))
    out[live] = e / e.sum(axis=-1, keepdims=True)
    return out
"""


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory, write_tree) -> Config:
    root = write_tree(tmp_path_factory.mktemp("diagnose"), {"gpuemu.toml": TOML, "diag_ops.py": OPS})
    return load_config(root, user_config=root / "none.toml")


def context(cfg: Config, op_name: str, module: str | None = None) -> CaseContext:
    op = cfg.op(op_name)
    return CaseContext(
        cfg.root,
        op,
        cfg.validation,
        CallableRunner(cfg.root, module or op.module, op.input_names, Adapter(), "op"),
        CallableRunner(cfg.root, op.reference, op.input_names, Adapter(), "reference"),
    )


def run_all(cfg: Config, op_name: str, specs: list[CaseSpec], module: str | None = None) -> list[CaseResult]:
    ctx = context(cfg, op_name, module)
    return [run_case(ctx, s) for s in specs]


def diagnosed(cfg: Config, op_name: str, cases: list[CaseResult], module: str | None = None) -> str:
    """The diagnosis with confirmation cases run in process, as the engine runs them in its worker."""
    ctx = context(cfg, op_name, module)
    op = ctx.op
    probes = confirm(cases, op, lambda base, changes: run_case(ctx, variant_spec(op, base, changes)))
    return diagnose_cases(cases, op, probes=probes)


def sweep(
    cfg: Config, op_name: str, dim: str, values: list[int], module: str | None = None
) -> tuple[list[CaseResult], str]:
    op = cfg.op(op_name)
    cases = run_all(cfg, op_name, [spec_with(op, i, dims={dim: v}) for i, v in enumerate(values)], module)
    return cases, diagnosed(cfg, op_name, cases, module)


def test_tail_tile_bug(cfg: Config) -> None:
    cases, text = sweep(cfg, "rows", "N", [128, 256, 384, 192, 320, 200, 129])
    assert [c.status for c in cases] == ["passed"] * 3 + ["failed"] * 4
    assert text.startswith("fails iff N % 128 != 0 (4/4 failing, 0/3 passing;")  # confirmed: 96, 192 fail, 384 not
    assert "errors only in N >= the last multiple of 128" in text and "missing tail mask" in text
    assert re.search(r"\(e\.g\. N=(\d+): indices >= (\d+)", text), text


def test_padding_read_into_a_reduction_spreads_over_the_whole_row(cfg: Config) -> None:
    cases, text = sweep(cfg, "softmax", "N", [128, 256, 384, 192, 320, 200, 129])
    assert [c.status for c in cases] == ["passed"] * 3 + ["failed"] * 4
    assert text.startswith("fails iff N % 128 != 0")
    assert "errors across the whole N axis whenever its last block is partial" in text
    assert "errors only in N >=" not in text


def test_layout_bug(cfg: Config) -> None:
    op = cfg.op("layout")
    specs = [
        spec_with(op, s, layout=lay, dims={"B": b, "N": n})
        for s, (lay, b, n) in enumerate(
            [
                ("contiguous", 4, 16),
                ("transposed", 4, 16),
                ("strided", 3, 5),
                ("contiguous", 2, 7),
                ("strided", 8, 64),
                ("transposed", 2, 3),
            ]
        )
    ]
    cases = run_all(cfg, "layout", specs)
    text = diagnosed(cfg, "layout", cases)
    assert text.startswith("fails iff layout != contiguous (4/4 failing, 0/2 passing;"), text
    assert "strides ignored" in text
    only_gaps = run_all(cfg, "layout", specs, "diag_ops:ignores_gaps")
    text = diagnosed(cfg, "layout", only_gaps, "diag_ops:ignores_gaps")
    assert text.startswith("fails iff layout == strided (2/2 failing, 0/4 passing;"), text


def test_threshold_bug(cfg: Config) -> None:
    cases, text = sweep(cfg, "matmul", "K", [1, 16, 32, 33, 64, 100])
    assert [c.status for c in cases] == ["passed"] * 3 + ["failed"] * 3
    assert text.startswith("fails iff K > 32 (3/3 failing, 0/3 passing;"), text
    assert "accumulator overwritten" in text


def test_size_one_bug(cfg: Config) -> None:
    cases, text = sweep(cfg, "rows", "N", [1, 2, 3, 7, 16, 128], module="diag_ops:scale_size_one")
    assert [c.status for c in cases] == ["failed"] + ["passed"] * 5
    assert text.startswith("fails iff N == 1 (1/1 failing, 0/5 passing;") and "edge size" in text, text


def test_missing_constant_factor(cfg: Config) -> None:
    cases, text = sweep(cfg, "rows", "N", [64, 100, 128, 300], module="diag_ops:scale_eighth")
    assert all(c.status == "failed" for c in cases)
    assert text.startswith("fails on every case (4/4")
    assert "op/ref is 0.125 everywhere" in text and "missing or wrong scale" in text


def test_missing_one_over_sqrt_d_is_named(cfg: Config) -> None:
    cases, text = sweep(cfg, "attention", "D", [16, 64, 4, 256])
    assert all(c.status == "failed" for c in cases)
    assert text.startswith("fails on every case (4/4")
    assert "op/ref is a constant per case" in text and "op/ref = sqrt(D) in every case" in text


def test_nan_in_fully_masked_rows(cfg: Config) -> None:
    op = cfg.op("masked")
    specs = [
        spec_with(op, s, distribution=d)
        for s, d in enumerate(["masked_rows", "normal", "masked_rows", "normal", "masked_rows"])
    ]
    cases = run_all(cfg, "masked", specs)
    assert [c.status for c in cases] == ["failed", "passed", "failed", "passed", "failed"]
    assert all(c.kind == "unexpected_nan" for c in cases if c.status == "failed")
    text = diagnosed(cfg, "masked", cases)
    assert text.startswith("fails iff distribution == masked_rows"), text
    assert "errors only in rows that are entirely -inf" in text and "0/0" in text


def constructed(op: str, rows: list[tuple[int, str]], **common: object) -> list[CaseResult]:
    out = []
    for i, (n, status) in enumerate(rows):
        spec = CaseSpec(op, i, "random", "float32", "contiguous", "normal", {"B": 4, "N": n}, {"x": (4, n)})
        out.append(CaseResult(op, i, spec, status, "mismatch" if status == "failed" else None, **common))
    return out


def test_random_noise_gives_no_condition_rather_than_a_guess(cfg: Config) -> None:
    cases = constructed(
        "rows", [(10, "failed"), (10, "passed"), (20, "passed"), (20, "failed"), (30, "failed"), (30, "passed")]
    )
    text = diagnose_cases(cases, cfg.op("rows"))
    assert text.startswith("no simple condition found (3/6 cases failing; not explained by shape, layout, dtype")


def test_necessary_but_not_sufficient_condition(cfg: Config) -> None:
    cases = constructed(
        "rows",
        [
            (200, "failed"),
            (300, "failed"),
            (128, "passed"),
            (256, "passed"),
            (384, "passed"),
            (200, "passed"),
            (512, "passed"),
            (1024, "passed"),
        ],
    )
    text = diagnose_cases(cases, cfg.op("rows"))
    assert text.startswith(
        "fails only if N % 16 != 0 (2/2 failing; 1/6 passing cases also satisfy it, the bug hides on some inputs"
    )


def test_everything_passing_has_no_diagnosis(cfg: Config) -> None:
    cases, text = sweep(cfg, "rows", "N", [128, 256])
    assert all(c.passed for c in cases) and text == ""


def test_errors_say_what_happened(cfg: Config) -> None:
    cases = constructed("rows", [(5, "error"), (7, "error"), (8, "passed")])
    for c in cases[:2]:
        c.kind, c.message, c.file, c.line = "op_crash", "the op crashed: SIGSEGV", "/ws/ops.py", 12
    text = diagnose_cases(cases, cfg.op("rows"))
    assert text.startswith(  # no confirmation cases could run for constructed cases: not stated as confirmed
        "errors in these cases iff N % 2 != 0 (or any block up to 8: no tested N tells them apart) (2/2 erroring"
    )
    assert "op_crash (2/2): the op crashed: SIGSEGV at /ws/ops.py:12" in text


def test_find_condition_prefers_the_simplest_predicate(cfg: Config) -> None:
    cases = constructed("rows", [(1, "failed"), (2, "passed"), (3, "passed")])
    cond = find_condition([c for c in cases if c.status == "failed"], [c for c in cases if c.passed])
    assert cond is not None and cond.text == "N == 1" and cond.kind == "equal"


def test_sqrt_d_hint_survives_a_tiny_failing_case(cfg: Config) -> None:
    op = cfg.op("attention")
    specs = [spec_with(op, 0, dims={"D": 16, "M": 1, "N": 2})]  # 2 output elements: too few ratio samples
    specs += [spec_with(op, i, dims={"D": d}) for i, d in enumerate([64, 4, 256], 1)]
    cases = run_all(cfg, "attention", specs)
    assert all(c.status == "failed" for c in cases)
    assert "op/ref = sqrt(D) in every case" in diagnose_cases(cases, op)


def case(
    i: int,
    status: str,
    n: int,
    dist: str = "normal",
    mag: float = 4.0,
    b: int = 4,
    probe: bool = False,
) -> CaseResult:
    """A constructed case of op ``rows`` (dims B, N) with its largest input magnitude; ``probe``: a
    confirmation case."""
    spec = CaseSpec("rows", i, "random", "float32", "contiguous", dist, {"B": b, "N": n}, {"x": (b, n)})
    feats: dict[str, object] = {"input_max": mag, **({"probe": True} if probe else {})}
    return CaseResult("rows", i, spec, status, "mismatch" if status == "failed" else None, features=feats)


def split(cases: list[CaseResult]) -> tuple[list[CaseResult], list[CaseResult]]:
    """Run cases and confirmation cases apart, as diagnose_cases takes them."""
    return [c for c in cases if not c.features.get("probe")], [c for c in cases if c.features.get("probe")]


#: long rows or large values: a half-precision sum that stalls or overflows
TWO_TRIGGERS = [
    case(0, "failed", 4096),
    case(1, "failed", 4096, "uniform", 1.0),
    case(2, "failed", 64, "large", 1e4),
    case(3, "failed", 128, "wide", 40.0),
    case(4, "passed", 64),
    case(5, "passed", 1024, "uniform", 1.0),
    case(6, "passed", 256),
]


def test_a_disjunction_is_stated_when_each_side_is_shown_alone(cfg: Config) -> None:
    probes = [
        case(10, "passed", 2048, probe=True),  # case 0 with N moved below the bound: passes
        case(11, "passed", 64, "normal", 4.0, probe=True),  # case 2 with ordinary values: passes
    ]
    cases, extra = split([*TWO_TRIGGERS, *probes])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails iff max |input| >= 8 or N > 2048 (4/4 failing, 0/3 passing; 2 confirmation"), text
    assert "each side alone fails" in text and "low-precision accumulator" in text


def test_confirmation_cases_show_each_side_of_a_disjunction_alone(cfg: Config) -> None:
    op = cfg.op("twotrig")
    rows = [("normal", 512), ("normal", 1024), ("large", 64), ("large", 16), ("normal", 64), ("normal", 128)]
    cases = run_all(cfg, "twotrig", [spec_with(op, i, distribution=d, dims={"N": n}) for i, (d, n) in enumerate(rows)])
    assert [c.status for c in cases] == ["failed"] * 4 + ["passed"] * 2
    text = diagnosed(cfg, "twotrig", cases)
    assert re.match(
        r"fails iff (max \|input\| >= \d+|distribution == large) or N > 256 \(4/4 failing, 0/2 passing; \d+ confirm",
        text,
    ), text
    assert "each side alone fails" in text


def test_a_disjunction_is_not_stated_when_a_side_was_not_shown_alone(cfg: Config) -> None:
    # the long row passes with N moved, but the large-value case was varied in its length, not its values:
    # nothing shows the magnitude matters on its own
    probes = [case(10, "passed", 2048, probe=True), case(11, "passed", 32, "large", 1e4, probe=True)]
    cases, extra = split([*TWO_TRIGGERS, *probes])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert " or " not in text.split(";")[0] and not text.startswith("fails iff"), text
    # and where varying the values does not make it pass, the two sides do not cover the failures at all
    probes = [case(10, "passed", 2048, probe=True), case(11, "failed", 64, "normal", 4.0, probe=True)]
    cases, extra = split([*TWO_TRIGGERS, *probes])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert " or " not in text.split(";")[0] and not text.startswith("fails iff"), text


#: a partial last block breaks it, one-element rows hide it, and so do some other inputs
MERGE = [
    case(0, "failed", 33),
    case(1, "failed", 97),
    case(2, "failed", 65),
    case(3, "passed", 64),
    case(4, "passed", 128),
    case(5, "passed", 256),
    case(6, "passed", 2),
    case(7, "passed", 1, "uniform", 1.0),
    case(8, "passed", 1, "large", 1e4),
    case(9, "passed", 99),
]


def test_a_size_exception_narrows_a_necessary_condition_when_a_case_shows_it(cfg: Config) -> None:
    cases, extra = split([*MERGE, case(10, "passed", 1, probe=True)])  # case 0 with N = 1: passes
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails only if N % 2 != 0 and N > 1 (3/3 failing; 1/8 passing cases also satisfy it"), text
    assert "N = 1 hides it" not in text  # the exception is not the bug


def test_a_size_exception_is_not_added_without_a_case_that_changes_only_the_size(cfg: Config) -> None:
    # N = 1 passes only with other values: the values may hide it as well as the size
    cases, extra = split([*MERGE, case(10, "passed", 4, probe=True)])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails only if N % 2 != 0 (3/3 failing;"), text
    # a case that moves N across a bound and onto a multiple at once shows neither: 381 fails, 384 passes
    rows = [case(0, "failed", 381), case(1, "failed", 33), case(2, "passed", 999), case(3, "passed", 64)]
    rows += [case(4, "passed", 5, "uniform", 1.0), case(5, "passed", 384, probe=True)]
    cases, extra = split(rows)
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert "N < 384" not in text and text.startswith("fails only if N % 2 != 0"), text


def test_a_magnitude_bound_needs_a_gap_in_the_magnitudes_seen(cfg: Config) -> None:
    rows = [case(0, "failed", 64, "positive", 4096.0), case(1, "failed", 64, "positive", 5000.0)]
    rows += [case(2, "passed", 64, "normal", 4.0), case(3, "passed", 64, "normal", 1.0)]
    probe = case(9, "passed", 64, "normal", 4.0, probe=True)
    wide = [*rows, case(4, "passed", 64, "positive", 1500.0), probe]
    cases, extra = split(wide)
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert "max |input| >= 2048" in text and text.startswith("fails iff"), text
    # 3632 passing next to 4096 failing: samples of the same values, which a bound between them splits by chance
    near = [*rows, case(4, "passed", 64, "positive", 3632.0), probe]
    cases, extra = split(near)
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert "max |input|" not in text, text


def test_a_block_condition_narrows_a_value_condition_when_a_case_shows_it(cfg: Config) -> None:
    # padding that is not the identity: only rows of large negative values show it, and only with a partial block
    rows = [
        case(0, "failed", 33, "large", 1e4),
        case(1, "failed", 100, "large", 1e4),
        case(2, "failed", 7, "large", 1e4),
    ]
    rows += [
        case(3, "passed", 64, "large", 1e4),
        case(4, "passed", 128, "large", 1e4),
        case(5, "passed", 45, "large", 1e4),
    ]
    rows += [case(6, "passed", 33), case(7, "passed", 5), case(8, "passed", 17), case(9, "passed", 9)]
    cases, extra = split([*rows, case(10, "passed", 64, "large", 1e4, probe=True)])  # case 0 with N = 64: passes
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails only if distribution == large and N % 64 != 0 (3/3 failing; 1/8 passing"), text
    # without a case that changes only N, the run's multiples of 64 may pass for other reasons
    cases, extra = split([*rows, case(10, "passed", 33, probe=True)])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails only if distribution == large (3/3 failing;"), text


#: a missing 1/sqrt(D) inside a softmax: a single key hides it, and so do scores far from O(1)
SCALE = [
    case(0, "failed", 5),
    case(1, "failed", 16, "uniform"),
    case(2, "failed", 300, "wide"),
    case(3, "failed", 24, "integers"),
    case(4, "failed", 12, "positive"),
    case(5, "failed", 7, "ties"),
    case(6, "failed", 3, "tail_max"),
    case(7, "passed", 5, "large", 1e4),
    case(8, "passed", 17, "large", 1e4),
    case(9, "passed", 40, "large", 1e4),
    case(10, "passed", 64, "large", 1e4),
    case(11, "passed", 9, "small", 1e-3),
    case(12, "passed", 40),
    case(13, "passed", 1),
]


def test_where_few_cases_fail_a_condition_on_where_it_shows_beats_values_that_hide_it(cfg: Config) -> None:
    cases, extra = split([*SCALE, case(20, "passed", 1, probe=True), case(21, "failed", 2, probe=True)])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    # "distribution != large" meets fewer passing cases, but says only where the bug hides
    assert text.startswith("fails only if N > 1 (7/7 failing; 6/8 passing cases also satisfy it"), text
    assert "N = 1 hides it" in text and "state carried" not in text
    # a one-element case that fails refutes it
    cases, extra = split([*SCALE, case(20, "failed", 1, probe=True), case(21, "failed", 2, probe=True)])
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert "N > 1" not in text, text


def test_a_rounding_bug_is_named_by_the_ties_it_gets_wrong(cfg: Config) -> None:
    """Half-up rounding fails only on exact ties whose nearest even lies toward zero: the `ties` values, and
    long rows of ordinary values now and then. No size or distribution says that; what the inputs held does."""
    op = cfg.op("cast")
    specs = [spec_with(op, i, dims={"B": 64, "N": n}) for i, n in enumerate([4096, 4096, 2048, 4096])]
    specs += [spec_with(op, 10 + i, dims={"B": b, "N": n}) for i, (b, n) in enumerate([(1, 7), (2, 33), (8, 64)])]
    specs += [spec_with(op, 20 + i, distribution="ties", dims={"B": 4, "N": n}) for i, n in enumerate([16, 64, 5])]
    cases = run_all(cfg, "cast", specs)
    held = [bool(c.features["input_ties_down"]) for c in cases]
    assert [c.status == "failed" for c in cases] == held, [(c.status, c.features) for c in cases]
    assert any(held) and not all(held)
    text = diagnosed(cfg, "cast", cases)
    assert "iff the input holds bfloat16 ties that nearest-even rounds toward zero" in text, text
    assert "rounded away from zero instead of to nearest even" in text
    assert "N >" not in text.split(";")[0], text


def test_a_max_started_at_zero_is_named_by_the_rows_wholly_below_it(cfg: Config) -> None:
    """A logsumexp whose running max starts at 0 is exact on ordinary rows (any shift is), and underflows to
    -inf on a row whose values all lie far below 0: large values, short rows, negative by chance."""
    op = cfg.op("lse")
    specs = [spec_with(op, i, distribution="large", dims={"B": 1 + i % 3, "N": 1 + i % 2}) for i in range(12)]
    specs += [spec_with(op, 100 + i, dims={"N": n}) for i, n in enumerate([1, 2, 8, 64])]
    cases = run_all(cfg, "lse", specs)
    low = [c.features["row_max_min"] < -100 for c in cases]
    assert [c.status == "failed" for c in cases] == low, [(c.status, c.features["row_max_min"]) for c in cases]
    assert any(low) and not all(low)
    text = diagnosed(cfg, "lse", cases)
    assert re.search(r"iff an input row lies wholly below -\d+ ", text), text
    assert "a running max started at 0" in text


@pytest.mark.parametrize(
    ("values", "dtype", "down", "up"),
    [
        ([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 0.5 + 2**-9], "bfloat16", 3, 1),
        ([1 + 2**-9, 1 + 2**-8 + 2**-20, 2 - 2**-9, 1.0], "bfloat16", 0, 0),  # near ties, exact values
        ([1 + 2**-11, 1 + 3 * 2**-11, 65520.0, float("nan"), float("inf")], "float16", 1, 1),  # 65520: overflows
        ([2**-25, 3 * 2**-25, 2**-26], "float16", 1, 1),  # the subnormal quantum is 2**-24
    ],
)
def test_ties_are_counted_by_the_way_nearest_even_rounds_them(values: list[float], dtype: str, down: int, up: int):
    import numpy as np

    from gpuemu_ls.engine.oracle.features import count_ties

    assert count_ties(np.array(values, dtype=np.float32), dtype) == (down, up)
    assert count_ties(np.array(values, dtype=np.float64), dtype) == (down, up)  # every value exact in float64


def test_tie_counts_match_the_definition_on_random_and_tied_values() -> None:
    """The low-bit prefilter drops no tie: the same counts as the definition applied to every value."""
    import ml_dtypes
    import numpy as np

    from gpuemu_ls.engine import dtypes as dt
    from gpuemu_ls.engine.oracle.features import count_ties

    rng = np.random.default_rng(7)
    x = rng.standard_normal(200_000).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 120, 200_000)
    for dtype, target in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)):
        lo = rng.standard_normal(2000).astype(target).astype(np.float64)
        hi = np.nextafter(lo.astype(target), np.array(np.inf, dtype=target)).astype(np.float64)
        vals = np.concatenate([x, ((lo + hi) / 2).astype(np.float32)])
        with np.errstate(over="ignore", invalid="ignore"):
            r = dt.round_to(vals, dtype).astype(np.float64)
            other = r + 2 * (vals.astype(np.float64) - r)
            tie = (vals != r) & np.isfinite(other) & (dt.round_to(other, dtype).astype(np.float64) == other)
        tie &= np.isfinite(r)
        down = int((tie & (np.abs(r) < np.abs(vals))).sum())
        assert count_ties(vals, dtype) == (down, int(tie.sum()) - down)
        assert down > 500 and int(tie.sum()) - down > 500


#: a block of next_power_of_2(N) whose padding leaks: every N but a power of two fails (one row hides it)
PADDED_POW2 = [
    case(0, "failed", 3),
    case(1, "failed", 17),
    case(2, "failed", 96),
    case(3, "failed", 100),
    case(4, "passed", 4),
    case(5, "passed", 16),
    case(6, "passed", 64),
    case(7, "passed", 128),
    case(8, "passed", 1),
    case(9, "passed", 9, "subnormal", 1e-40),  # values the leak is lost in
    case(10, "passed", 256, probe=True),
    case(11, "failed", 192, probe=True),
]


def test_a_padded_power_of_two_block_is_named_when_cases_tell_it_from_every_block(cfg: Config) -> None:
    """96, 100 and 192 failing refute N % 2, 4, ..., 64 != 0; 4 and 16 passing refute N % 128 and N % 256
    (each a power of two below the block); 64, 128 and 256 passing refute N > t: only the padding is left."""
    cases, extra = split(PADDED_POW2)
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert text.startswith("fails only if N is not a power of two (4/4 failing; 1/7 passing"), text
    assert "next power of two" in text and "2 confirmation case(s) agree" in text


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        # every failing N odd, no even one failing: "N % 2 != 0" fits as well, and it is the block reading
        ([case(0, "failed", 3), case(1, "failed", 17), case(2, "failed", 65), case(3, "passed", 4),
          case(4, "passed", 64), case(5, "passed", 1)], "N % 2 != 0"),
        # a block of 64: 32 failing is a power of two, so the padding reading never fits
        ([case(0, "failed", 32), case(1, "failed", 96), case(2, "failed", 100), case(3, "passed", 64),
          case(4, "passed", 128)], "N % 64 != 0"),
    ],
)  # fmt: skip
def test_the_power_of_two_reading_waits_for_evidence_against_the_block_readings(cfg: Config, rows, why) -> None:
    cases, extra = split(rows)
    text = diagnose_cases(cases, cfg.op("rows"), probes=extra)
    assert "power of two" not in text and why in text, text


@pytest.mark.parametrize("block", [64, 128, 256])
def test_a_passing_case_that_meets_a_condition_refutes_it(cfg: Config, block: int) -> None:
    """A tail that reads bias[:w] fails iff N % block != 0 and N > block. N = 13 * block passes though it
    is not a power of two: "N is not a power of two" must not be stated (issue 29 item 3), and passing
    sizes below the block do not make "N % block != 0" the weaker reading."""
    module = f"diag_ops:bias_tail_{block}"
    sizes = [2, 3, 9, 100, 64, 1024, 4 * block, 13 * block, 3 * block + 8, 3 * block + 1, 4093, block // 2, block]
    op = cfg.op("bias")
    specs = [spec_with(op, i, dims={"N": n}, distribution="normal") for i, n in enumerate(sizes)]
    # constant rows hide it (bias[:w] == bias[start:start + w] when every bias value is the same)
    hidden = [3 * block + 5, 5 * block + 3]
    specs += [spec_with(op, 50 + i, dims={"N": n}, distribution="constant_rows") for i, n in enumerate(hidden)]
    cases = run_all(cfg, "bias", specs, module)
    text = diagnosed(cfg, "bias", cases, module)
    fails = [c.spec.dims["N"] for c in cases if c.status == "failed"]
    assert sorted(fails) == sorted(n for n in sizes if n % block and n > block), text
    assert "power of two" not in text, text
    assert re.match(rf"fails (iff|only if) N % {block} != 0 and N > {block - 1}", text) or re.match(
        rf"fails (iff|only if) N % {block} != 0 and N > {block}", text
    ), text


@pytest.mark.parametrize(
    ("op_name", "module", "dims", "expect"),
    [
        ("bias", "diag_ops:bias_tail_128", {"N": 3789}, r"fails iff N % 128 != 0 and N > 12[78] "),
        ("rows", None, {"N": 200}, r"fails iff N % 128 != 0 "),
        ("matmul", None, {"K": 100}, r"fails iff K > 32 "),
        ("layout", None, {"B": 4, "N": 16}, r"fails iff layout != contiguous "),
    ],
)
def test_one_failing_case_is_enough_to_find_the_condition(cfg, op_name, module, dims, expect) -> None:
    """--fail-fast stops at the first failure: no passing case to contrast with. Confirmation cases must
    still tell the conditions apart (the op's default dims first, the likeliest to pass), never "fails on
    every case" from two failing cases, nor a condition no confirmation case could have refuted."""
    op = cfg.op(op_name)
    layout = "transposed" if op_name == "layout" else "contiguous"
    cases = run_all(cfg, op_name, [spec_with(op, 5, dims=dims, layout=layout)], module)
    assert [c.status for c in cases] == ["failed"]
    text = diagnosed(cfg, op_name, cases, module)
    assert re.match(expect, text), text


def test_a_condition_is_tested_where_it_says_the_op_passes(cfg: Config) -> None:
    """K > 32 overwritten accumulator; the only strided case drawn passes because its values are subnormal
    (the error is below tolerance). "fails only if layout != strided" fits those cases; a confirmation case
    made strided (and ordinary) fails, and the line says what survives."""
    op = cfg.op("matmul_any")
    specs = [
        spec_with(op, 1, dims={"K": 16}, layout="transposed", distribution="normal"),
        spec_with(op, 2, dims={"K": 96}, layout="strided", distribution="subnormal"),
        spec_with(op, 3, dims={"K": 122}, layout="transposed", distribution="normal"),
    ]
    cases = run_all(cfg, "matmul_any", specs)
    assert [c.status for c in cases] == ["passed", "passed", "failed"]
    text = diagnosed(cfg, "matmul_any", cases)
    head = text.split(";")[0]
    stated = re.match(r"fails (iff|only if) (distribution in \{normal, uniform\} and )?K > 32", head)
    assert "layout" not in head and stated, text
