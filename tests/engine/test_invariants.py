"""Invariants fire where the op breaks them and the reference keeps them, and stay silent otherwise."""

from __future__ import annotations

import numpy as np

from gpuemu_ls.engine.oracle.invariants import check_invariants


def softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


X = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [3.0, -2.0, 0.0, 0.25]])
REF = softmax(X)


def check(names, out, ref=REF, shape=X.shape, atol=1e-5, rtol=1e-5):
    return check_invariants(tuple(names), out, ref, shape, atol, rtol)


def test_a_correct_output_breaks_nothing() -> None:
    assert check(["finite", "non_negative", "normalized", "shape_preserved"], REF.astype(np.float32)) == []


def test_finite_fires_and_names_the_first_element() -> None:
    out = REF.copy()
    out[1, 2] = np.nan
    out[2, 0] = np.inf
    (v,) = check(["finite"], out)
    assert (v.invariant, v.count, v.index) == ("finite", 2, (1, 2))


def test_finite_is_silent_where_the_reference_is_not_finite() -> None:
    x = X.copy()
    x[1] = -np.inf  # fully masked row: the reference is NaN there too
    ref = softmax(x)
    out = ref.copy()
    assert np.isnan(ref[1]).all()
    assert check(["finite"], out, ref) == []
    out[0, 0] = np.nan
    (v,) = check(["finite"], out, ref)
    assert v.count == 1 and v.index == (0, 0)


def test_non_negative() -> None:
    out = REF.copy()
    out[0, 1] = -1e-3
    (v,) = check(["non_negative"], out)
    assert v.count == 1 and v.index == (0, 1) and "-0.001" in v.message
    # silent where the reference is negative too (the op is not a softmax there)
    ref = REF.copy()
    ref[0, 1] = -2e-3
    assert check(["non_negative"], out, ref) == []


def test_normalized_rows_sum_to_one() -> None:
    out = REF * 1.01
    (v,) = check(["normalized"], out)
    assert v.count == 3 and v.index == (0,) and "rows do not sum to 1" in v.message
    # rows the reference does not normalize (NaN rows) are not blamed on the op
    x = X.copy()
    x[2] = -np.inf
    ref = softmax(x)
    out = ref.copy()
    out[2] = 0.0  # a different but unnormalized answer where the reference is NaN
    assert check(["normalized"], out, ref) == []
    # the bound grows with the row length: float32 rounding of a correct softmax is fine
    big = softmax(np.random.default_rng(0).standard_normal((4, 4096)))
    assert check(["normalized"], big.astype(np.float32), big, shape=big.shape) == []


def test_symmetric() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 5, 5))
    ref = a @ np.swapaxes(a, -1, -2)
    out = ref.copy()
    out[1, 0, 3] += 0.5
    (v,) = check(["symmetric"], out, ref, shape=ref.shape)
    assert v.count == 2 and v.index == (1, 0, 3)  # (0, 3) and (3, 0) both differ from their transpose
    # silent where the reference itself is not symmetric
    ref2 = ref.copy()
    ref2[1, 0, 3] += 0.5
    assert check(["symmetric"], out, ref2, shape=ref.shape) == []
    # only square trailing dims are checked
    assert check(["symmetric"], np.zeros((2, 3)), np.ones((2, 3)), shape=(2, 3)) == []


def test_shape_preserved() -> None:
    (v,) = check(["shape_preserved"], REF[:, :2], REF[:, :2])
    assert v.invariant == "shape_preserved" and "[3, 2]" in v.message and "[3, 4]" in v.message
    assert check(["shape_preserved"], REF, REF, shape=None) == []


def test_shape_mismatch_with_the_reference_is_left_to_the_comparison() -> None:
    assert check(["finite", "non_negative", "normalized"], np.full((2, 2), np.nan), REF) == []
