"""The oracle: tolerance boundary, NaN/inf rules, statistics, chunking and sensitivity widening."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.oracle.compare import Comparison, compare_output, iter_blocks

F16_MAX = 65504.0


def cmp(op, ref, dtype="float32", atol=0.0, rtol=0.0, **kw) -> Comparison:
    """Compare ``op`` (cast to ``dtype`` unless already an array) with a float64 reference."""
    o = np.asarray(op, dtype=np.float64).astype(dt.numpy_dtype(dtype)) if not isinstance(op, np.ndarray) else op
    return compare_output("result", o, np.asarray(ref, dtype=np.float64), dtype, atol, rtol, **kw)


def test_pass_exactly_at_the_atol_boundary_fail_one_ulp_beyond() -> None:
    # allowed = atol + rtol*|ref| + ulp_f32(ref) = 2**-10 + 2**-23 at ref = 1
    at = np.float32(1 + 2.0**-10 + 2.0**-23)
    beyond = np.nextafter(at, np.float32(2))
    assert cmp(np.array([at]), [1.0], atol=2.0**-10).passed
    c = cmp(np.array([beyond]), [1.0], atol=2.0**-10)
    assert not c.passed and c.kind == "mismatch" and c.mismatches == 1
    assert c.worst_allowed == 2.0**-10 + 2.0**-23


def test_pass_exactly_at_the_rtol_boundary() -> None:
    # ref = 2: allowed = 2**-8 * 2 + ulp_f32(2) = 2**-7 + 2**-22
    at = np.float32(2 + 2.0**-7 + 2.0**-22)
    assert cmp(np.array([at, -at]), [2.0, -2.0], rtol=2.0**-8).passed
    beyond = np.nextafter(at, np.float32(3))
    assert not cmp(np.array([beyond]), [2.0], rtol=2.0**-8).passed


def test_the_output_dtype_rounding_is_always_allowed() -> None:
    ref = np.array([1 / 3, 2 / 3, 1e-3, 12345.678])
    for name in ("float32", "float16", "bfloat16"):
        rounded = ref.astype(dt.numpy_dtype(name))
        assert cmp(rounded, ref, name).passed, name  # zero tolerance: only the final rounding


def test_nan_reference_is_matched_only_by_nan() -> None:
    assert cmp([np.nan, 1.0], [np.nan, 1.0]).passed
    c = cmp([0.0, 1.0], [np.nan, 1.0], atol=1.0)
    assert not c.passed and c.kind == "missing_nan" and c.missing_nan == 1
    c = cmp([np.inf], [np.nan])
    assert not c.passed and c.kind == "missing_nan"


def test_nan_where_the_reference_is_finite() -> None:
    c = cmp([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], atol=1.0)
    assert not c.passed and c.kind == "unexpected_nan" and c.unexpected_nan == 1
    assert c.first_index == (1,) and c.worst_index == (1,)


def test_infinite_reference_needs_the_same_infinity() -> None:
    assert cmp([np.inf, -np.inf], [np.inf, -np.inf]).passed
    assert not cmp([-np.inf], [np.inf]).passed
    assert not cmp([F16_MAX], [np.inf], "float16", atol=1e9).passed


def test_op_inf_accepted_when_the_reference_rounds_to_inf_in_the_output_dtype() -> None:
    # fp16 holds at most 65504; a correct fp16 kernel returns inf for 7e4
    c = cmp(np.array([np.inf, -np.inf], dtype=np.float16), [7e4, -7e4], "float16", 1e-2, 1e-2)
    assert c.passed and c.unexpected_inf == 0
    # ... but not where ref + allowed is still below the overflow threshold (65520)
    c = cmp(np.array([np.inf], dtype=np.float16), [6e4], "float16", 1e-2, 1e-2)
    assert not c.passed and c.kind == "unexpected_inf"


def test_a_reference_beyond_the_output_range_is_out_of_range_whatever_the_op_returns() -> None:
    # 1e6 is no float16 value: inf passes, anything else is counted out of range, never failed
    for got in (F16_MAX, 0.0, -F16_MAX, np.nan):
        c = cmp(np.array([got, 1.0], dtype=np.float16), [1e6, 1.0], "float16", 1e-2, 1e-2)
        assert c.passed and c.out_of_range == 1 and c.mismatches == 0, got
        assert "out of range" in c.summary() and "out of range" in c.report()
    assert cmp(np.array([np.inf], dtype=np.float16), [1e6], "float16", 1e-2, 1e-2).out_of_range == 0
    # ... but an element inside the range is judged as always
    c = cmp(np.array([F16_MAX, 2.0], dtype=np.float16), [1e6, 1.0], "float16", 1e-2, 1e-2)
    assert not c.passed and c.mismatches == 1 and c.first_index == (1,) and c.out_of_range == 1


def test_check_nan_false_ignores_and_counts() -> None:
    c = cmp([np.nan, np.nan, 1.0], [1.0, 2.0, 1.0], check_nan=False)
    assert c.passed and c.nan_ignored == 2 and c.mismatches == 0
    c = cmp([np.nan, 5.0], [1.0, 1.0], check_nan=False)
    assert not c.passed and c.mismatches == 1 and c.nan_ignored == 1 and c.kind == "mismatch"
    c = cmp([1.0], [np.nan], check_nan=False)  # a missing NaN still fails
    assert not c.passed


def test_check_inf_false_ignores_and_counts() -> None:
    c = cmp([np.inf, -np.inf, 1.0], [1.0, 2.0, 1.0], check_inf=False)
    assert c.passed and c.inf_ignored == 2
    c = cmp([np.inf], [1.0], check_inf=True)
    assert not c.passed and c.kind == "unexpected_inf" and c.unexpected_inf == 1


def test_shape_mismatch() -> None:
    c = compare_output("y", np.zeros((2, 3), np.float32), np.zeros((3, 2)), "float32", 1e-5, 1e-5)
    assert not c.passed and c.kind == "shape_mismatch" and c.shape == (2, 3)
    assert "[2, 3]" in c.detail and "[3, 2]" in c.detail and c.summary() == f"y: {c.detail}"


def test_statistics_on_a_constructed_example() -> None:
    ref = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    op = (ref + np.array([[0.0, 0.5, 0.0], [0.0, 0.0, -2.0]])).astype(np.float32)
    c = compare_output("result", op, ref, "float32", 1e-3, 0.0)
    assert not c.passed and c.kind == "mismatch"
    assert (c.total, c.mismatches) == (6, 2)
    assert c.max_abs == 2.0 and c.max_rel == pytest.approx(2.0 / 6.0)
    assert c.max_ulp == 2.0 / 2.0**-21  # ulp_f32(6) = 2**-21
    assert c.worst_index == (1, 2) and c.first_index == (0, 1)
    assert (c.worst_op, c.worst_ref) == (4.0, 6.0)
    assert c.worst_allowed == 1e-3 + 2.0**-21
    assert c.max_ratio == pytest.approx(2.0 / (1e-3 + 2.0**-21))
    assert c.axis_counts == [[1, 1], [0, 1, 1]]
    report = c.report()
    assert "Mismatched elements: 2 / 6" in report and "Worst at [1, 2]" in report
    assert "First mismatch at [0, 1]" in report
    assert "2/6 elements off" in c.summary()


def test_passing_comparison_reports_its_closest_call() -> None:
    ref = np.array([1.0, 2.0, 4.0])
    op = np.array([1.0, 2.0 + 2.0**-20, 4.0], dtype=np.float32)
    c = compare_output("result", op, ref, "float32", 1e-5, 0.0)
    assert c.passed and c.kind is None and c.worst_index == (1,) and 0 < c.max_ratio < 1
    assert c.axis_counts is None and c.mask is None


def _example(shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(shape)
    op = ref.astype(np.float32)
    flat = op.reshape(-1)
    bad = rng.choice(flat.size, size=max(1, flat.size // 17), replace=False)
    flat[bad] += rng.standard_normal(bad.size).astype(np.float32)
    flat[bad[:2]] = np.nan
    return op, ref


@pytest.mark.parametrize("shape", [(1000,), (37, 29), (5, 7, 11), (1, 1000), (3, 1, 250)])
def test_chunking_gives_identical_results(shape: tuple[int, ...]) -> None:
    op, ref = _example(shape)
    results = [
        compare_output("r", op, ref, "float32", 1e-5, 1e-5, chunk=chunk, keep_mask=True) for chunk in (7, 100, 1 << 20)
    ]
    dicts = [json.dumps(r.to_dict(), sort_keys=True) for r in results]  # NaN-safe equality
    assert dicts[0] == dicts[1] == dicts[2]
    assert results[0].worst_index is not None and np.isnan(results[0].worst_op)
    assert all(np.array_equal(r.mask, results[0].mask) for r in results)
    assert results[0].mismatches == int(results[0].mask.sum()) > 0
    assert [sum(a) for a in results[0].axis_counts] == [results[0].mismatches] * len(shape)


def test_iter_blocks_cover_each_element_once() -> None:
    for shape, chunk in (((5, 7, 11), 7), ((1, 1000), 100), ((0, 4), 3), ((), 5), ((10,), 3)):
        seen = np.zeros(shape, dtype=int)
        for idx in iter_blocks(shape, chunk):
            seen[idx] += 1
            assert seen[idx].size <= max(chunk, shape[-1] if shape else 1)
        assert np.all(seen == 1)


def test_sensitivity_widens_ill_conditioned_elements_only() -> None:
    # element 0 is a cancellation: ref 1e-8, a correct float32 kernel gets 1e-5 (the rounding of big terms)
    ref = np.array([1e-8, 1.0, 2.0])
    op = np.array([1e-5, 1.0, 2.0], dtype=np.float32)
    sens = np.array([1e-5, 1e-9, 1e-9])
    calls = []

    def sensitivity() -> np.ndarray:
        calls.append(1)
        return sens

    plain = compare_output("r", op, ref, "float32", 1e-7, 1e-6)
    assert not plain.passed
    c = compare_output("r", op, ref, "float32", 1e-7, 1e-6, sensitivity=sensitivity, eps=1e-6)
    assert c.passed and c.used_sensitivity and c.widened == 1 and calls == [1]
    gross = np.array([1e-5, 1.5, 2.0], dtype=np.float32)  # a real error elsewhere still fails
    c = compare_output("r", gross, ref, "float32", 1e-7, 1e-6, sensitivity=sensitivity, eps=1e-6)
    assert not c.passed and c.mismatches == 1 and c.first_index == (1,)
    way_off = np.array([1.0, 1.0, 2.0], dtype=np.float32)  # far beyond the measured conditioning
    assert not compare_output("r", way_off, ref, "float32", 1e-7, 1e-6, sensitivity=sensitivity, eps=1e-6).passed


def test_sensitivity_is_only_measured_when_the_plain_bound_fails() -> None:
    calls = []
    ref = np.array([1.0, 2.0])
    c = compare_output(
        "r", ref.astype(np.float32), ref, "float32", 1e-5, 1e-5, sensitivity=lambda: calls.append(1) or np.zeros(2)
    )
    assert c.passed and calls == [] and not c.used_sensitivity


def test_unstable_reference_is_out_of_range_not_failed() -> None:
    ref = np.array([1.0, 3.0])
    op = np.array([1.0, 7.0], dtype=np.float32)
    c = compare_output("r", op, ref, "float32", 1e-6, 1e-6, sensitivity=lambda: np.array([0.0, np.inf]), eps=1e-6)
    assert c.passed and c.out_of_range == 1 and c.mismatches == 0
    assert "out of range" in c.report()


def test_inherent_intermediate_overflow_of_a_dot_product_is_out_of_range_a_small_one_is_not() -> None:
    # row 0: one float32 product is 3.5e38, past float32's range, so every float32 kernel overflows
    # although the sum (5e37) fits; row 1: small terms, an inf there is a bug
    a = np.array([[2.0e19, 1.0, -1.5e19, 0.5], [1.0, 2.0, 3.0, 4.0]])
    b = np.array([1.75e19, 0.25, 2.0e19, 2.0])
    ref = a @ b
    assert np.isfinite(ref).all() and abs(ref[0]) < 3.4e38 < 2.0e19 * 1.75e19
    op = np.array([np.inf, np.inf], dtype=np.float32)
    n, eps = 4, 2.0**-24 * 2.0  # u(float32) * sqrt(n), as the engine perturbs

    def sensitivity() -> np.ndarray:
        # what the engine's measurement gives on average: uniform relative perturbations of size eps move
        # a sum by eps times its terms' root-sum-square over sqrt(3) (2.7e38 here, inside the range)
        return eps * np.sqrt(((a * b) ** 2).sum(axis=1)) / np.sqrt(3)

    c = compare_output("r", op, ref, "float32", 1e-5, 1e-5, sensitivity=sensitivity, eps=eps, terms=np.sqrt(3 * n))
    assert not c.passed and c.kind == "unexpected_inf" and c.mismatches == 1 and c.first_index == (1,)
    assert c.out_of_range == 1  # row 0
    only_row0 = compare_output(
        "r", op[:1], ref[:1], "float32", 1e-5, 1e-5, sensitivity=lambda: sensitivity()[:1], eps=eps, terms=np.sqrt(12)
    )
    assert only_row0.passed and only_row0.out_of_range == 1 and "out of range" in only_row0.report()


def test_a_short_reduction_whose_measured_sensitivity_cancelled_is_judged_by_its_magnitude() -> None:
    # two float32 terms, -4.08e38 and 3.53e38 (sum -5.5e37): float32 overflows in either order, but two
    # random perturbations can nearly cancel, leaving a sensitivity far below the range
    a = np.array([[1.20006895, 1.03715992]])
    b = np.array([[-3.40282306e38], [3.40282306e38]])
    ref = a @ b
    op = np.array([[-np.inf]], dtype=np.float32)
    small = lambda: np.array([[1e31]])  # noqa: E731
    args = ("r", op, ref, "float32", 1e-5, 1e-5)
    plain = compare_output(*args, sensitivity=small, eps=1e-7, terms=np.sqrt(6))
    assert not plain.passed and plain.kind == "unexpected_inf"
    mag = lambda: np.abs(a) @ np.abs(b)  # noqa: E731
    judged = compare_output(*args, sensitivity=small, eps=1e-7, terms=np.sqrt(6), magnitude=mag)
    assert judged.passed and judged.out_of_range == 1
    # small magnitudes: the inf is a bug, whatever the magnitude reference says
    five = lambda: np.array([[5.0]])  # noqa: E731
    tame = compare_output("r", op, np.array([[3.0]]), "float32", 1e-5, 1e-5, sensitivity=small, magnitude=five)
    assert not tame.passed and tame.kind == "unexpected_inf"


def test_axis_counts_and_ratio_for_a_constant_factor() -> None:
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((6, 40)) + 3.0
    op = (ref * 0.125).astype(np.float32)
    c = compare_output("r", op, ref, "float32", 1e-5, 1e-5)
    assert not c.passed and c.mismatches == 240
    assert c.axis_counts == [[40] * 6, [6] * 40]
    assert c.ratio is not None and c.ratio["median"] == pytest.approx(0.125, rel=1e-6)
    assert c.ratio["p10"] == pytest.approx(0.125, rel=1e-6) and c.ratio["samples"] == 240


def test_integer_outputs_compare_exactly_by_default() -> None:
    ref = np.array([1, 2, 3], dtype=np.int64)
    assert compare_output("r", ref.copy(), ref, "int64", 0.0, 0.0).passed
    c = compare_output("r", np.array([1, 2, 4], dtype=np.int64), ref, "int64", 0.0, 0.0)
    assert not c.passed and c.mismatches == 1 and c.worst_index == (2,)


def test_zero_size_outputs_pass() -> None:
    c = compare_output("r", np.zeros((0, 3), np.float32), np.zeros((0, 3)), "float32", 1e-5, 1e-5)
    assert c.passed and c.total == 0


# --- out of range, suspect references, ulp tolerances, NaN shown as NaN (issues 12 and 18) ---------------

from gpuemu_ls.engine.oracle.compare import CaseFacts, Working  # noqa: E402

NAN_FREE = CaseFacts(inputs_nan=False, inputs_finite=True)


def _layernorm(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) + 0.5  # bias 0.5


def test_an_overflow_every_working_precision_evaluation_makes_is_out_of_range() -> None:
    # row 0: squares of 2e20 overflow float32 (a sum of squares is inf, rsqrt(inf) = 0: the op returns its
    # bias, a finite but wrong consequence); row 1: small values, where the same wrong answer is a bug
    x = np.array([[2e20, -2e20, 1e20, 3e19], [1.0, -2.0, 0.5, 0.25]])
    ref = _layernorm(x)
    with np.errstate(all="ignore"):
        work = _layernorm(x.astype(np.float32))
    assert np.isfinite(ref).all() and np.allclose(work[0], 0.5)
    op = work.astype(np.float32)
    op[1] = 0.5  # row 1 broken too
    w = Working(work.astype(np.float64), overflowed=True)
    c = compare_output("y", op, ref, "float32", 1e-5, 1e-5, working=lambda: w, facts=NAN_FREE, keep_mask=True)
    assert not c.passed and c.mismatches == 4 and c.first_index == (1, 0)
    assert c.out_of_range == 4 and c.out_of_range_rows == 1 and c.excused[0].all() and not c.excused[1].any()
    # without the overflow flag the working-precision evaluation is a rounding-sized perturbation: what it
    # moves is measured slack (row 0, where the op agrees with it), not range; row 1 is still judged
    quiet = Working(work.astype(np.float64), overflowed=False)
    c = compare_output("y", op, ref, "float32", 1e-5, 1e-5, working=lambda: quiet, facts=NAN_FREE)
    assert c.mismatches == 4 and c.out_of_range == 0 and c.widened == 4 and c.first_index == (1, 0)
    # a non-finite working evaluation needs no flag: the NaN row of an overflowed row max is one event
    nan_row = work.copy()
    nan_row[0] = np.nan
    c = compare_output(
        "y",
        np.where(np.isnan(nan_row), np.nan, ref).astype(np.float32),
        ref,
        "float32",
        1e-5,
        1e-5,
        working=lambda: Working(nan_row, overflowed=False),
        facts=NAN_FREE,
    )
    assert c.passed and c.out_of_range == 4 and c.out_of_range_rows == 1


def test_a_real_overflow_bug_is_not_excused_by_a_careful_reference() -> None:
    # softmax without max-subtraction overflows exp at 100 in float32; the working-precision evaluation of a
    # careful (max-subtracting) reference does not, so the NaN is the kernel's
    x = np.array([[100.0, 99.0, 1.0]])
    ref = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    x32 = x.astype(np.float32)
    with np.errstate(all="ignore"):
        buggy = (np.exp(x32) / np.exp(x32).sum()).astype(np.float32)
        work = np.exp(x32 - x32.max()) / np.exp(x32 - x32.max()).sum()
    assert np.isnan(buggy).any() and np.isfinite(work).all()
    c = compare_output(
        "y", buggy, ref, "float32", 1e-5, 1e-5, working=lambda: Working(work.astype(np.float64), True), facts=NAN_FREE
    )
    assert not c.passed and c.kind == "unexpected_nan" and c.out_of_range == 0


def test_an_infinite_reference_from_finite_inputs_is_out_of_range() -> None:
    c = cmp([5.0, 1.0], [np.inf, 1.0], facts=NAN_FREE)
    assert c.passed and c.out_of_range == 1
    assert not cmp([5.0], [np.inf]).passed  # inputs not known to be finite: an infinity must be matched


def test_a_reference_nan_from_nan_free_inputs_is_suspect_unless_it_is_the_contract() -> None:
    c = cmp([0.0, 1.0], [np.nan, 1.0], facts=NAN_FREE)
    assert c.passed and c.suspect_nan == 1 and c.mismatches == 0
    assert "check the reference" in c.summary() and "check the reference" in c.report()
    contract = CaseFacts(inputs_nan=False, inputs_finite=True, nan_contract=True)
    c = cmp([0.0, 1.0], [np.nan, 1.0], facts=contract)
    assert not c.passed and c.kind == "missing_nan"
    c = cmp([0.0], [np.nan], facts=CaseFacts(inputs_nan=True, inputs_finite=False))  # NaN in: NaN must come out
    assert not c.passed and c.kind == "missing_nan"


def _bf16_round(x: np.ndarray, half_up: bool) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    add = 0x8000 if half_up else 0x7FFF + ((bits >> 16) & 1)
    return ((bits + add) >> 16).astype(np.uint16).view(dt.numpy_dtype("bfloat16"))


def test_ulp_zero_is_bit_exact_after_the_output_rounding() -> None:
    # exact midpoints between bf16 neighbours: half-up rounds away from even on every other one
    rng = np.random.default_rng(3)
    base = rng.standard_normal(64).astype(dt.numpy_dtype("bfloat16")).astype(np.float64)
    ties = base + dt.ulp(base, dt.FLOAT_INFO["bfloat16"]) / 2
    assert np.array_equal(ties.astype(np.float32).astype(np.float64), ties)  # exact in float32
    rne, half_up = _bf16_round(ties, False), _bf16_round(ties, True)
    assert (rne != half_up).any()
    # today's default rule (one ulp of slack around the exact reference) cannot tell them apart
    assert compare_output("y", half_up, ties, "bfloat16", 0.0, 0.0).passed
    assert compare_output("y", rne, ties, "bfloat16", 0.0, 0.0, ulp=0).passed
    c = compare_output("y", half_up, ties, "bfloat16", 0.0, 0.0, ulp=0)
    assert not c.passed and c.mismatches == int((rne != half_up).sum()) and "ulp=0" in c.summary()
    assert compare_output("y", half_up, ties, "bfloat16", 0.0, 0.0, ulp=1).passed


def test_ulp_zero_measures_no_sensitivity() -> None:
    calls = []
    c = compare_output(
        "y",
        np.array([1.5], dtype=np.float32),
        np.array([1.0]),
        "float32",
        0.0,
        0.0,
        ulp=0,
        sensitivity=lambda: calls.append(1) or np.array([10.0]),
        eps=1e-6,
    )
    assert not c.passed and calls == []


def test_nan_failures_read_as_nan_not_as_a_small_error() -> None:
    ref = np.array([[0.25, 0.5], [0.567, 0.125]])
    op = np.array([[0.25, 0.5], [np.nan, 0.125]], dtype=np.float32)
    c = compare_output("y", op, ref, "float32", 1e-5, 1e-5)
    assert c.kind == "unexpected_nan"
    assert "NaN where the reference is 0.567 (first at [1, 0], 1 of 4 elements)" in c.summary()
    report = c.report()
    assert "Error / tolerance at worst: inf" not in report and "NaN where the reference is 0.567" in report
