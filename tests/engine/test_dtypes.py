"""Numeric facts of the float formats: ulp spacing and overflow thresholds."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ls.engine import dtypes as dt


def sample_values(name: str) -> np.ndarray:
    """Zero, subnormals, the smallest normal, ordinary values and values near the top of the range."""
    info = dt.FLOAT_INFO[name]
    sub = info.smallest_subnormal
    vals = [
        0.0,
        sub,
        3 * sub,
        info.tiny / 2,
        info.tiny * (1 - info.eps),
        info.tiny,
        info.tiny * 3,
        1e-3,
        0.1,
        0.5,
        1.0,
        1.5,
        2.0,
        3.0,
        1000.0,
        12345.678,
        info.max_value / 3,
        info.max_value / 2,
    ]
    return np.array(vals, dtype=np.float64).astype(dt.numpy_dtype(name))


@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_ulp_equals_numpy_spacing(name: str) -> None:
    v = sample_values(name)
    info = dt.FLOAT_INFO[name]
    expected = np.spacing(v).astype(np.float64)
    got = dt.ulp(v.astype(np.float64), info)
    np.testing.assert_array_equal(got, expected)
    # the sign does not matter: spacing is a magnitude
    np.testing.assert_array_equal(dt.ulp(-v.astype(np.float64), info), expected)


def test_ulp_of_bfloat16_is_the_bf16_spacing() -> None:
    v = sample_values("bfloat16")
    info = dt.FLOAT_INFO["bfloat16"]
    nxt = np.nextafter(v, np.array(np.inf, dtype=v.dtype))  # ml_dtypes implements nextafter for bf16
    expected = nxt.astype(np.float64) - v.astype(np.float64)
    np.testing.assert_array_equal(dt.ulp(v.astype(np.float64), info), expected)
    assert dt.ulp(np.array([1.0]), info)[0] == 2.0**-7
    assert dt.ulp(np.array([0.0]), info)[0] == float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)


@pytest.mark.parametrize("name", dt.FLOAT_NAMES)
def test_ulp_beyond_the_range_is_the_spacing_at_max(name: str) -> None:
    info = dt.FLOAT_INFO[name]
    at_max = 2.0 ** (np.frexp(info.max_value)[1] - info.precision)
    got = dt.ulp(np.array([info.max_value, -info.max_value, np.inf, np.nan]), info)
    np.testing.assert_array_equal(got, [at_max] * 4)


@pytest.mark.parametrize(
    ("name", "precision", "max_value", "threshold"),
    [
        ("float16", 11, 65504.0, 65520.0),
        ("bfloat16", 8, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), (2 - 2.0**-8) * 2.0**127),
        ("float32", 24, float(np.finfo(np.float32).max), (2 - 2.0**-24) * 2.0**127),
    ],
)
def test_overflow_threshold_is_where_rounding_gives_inf(
    name: str, precision: int, max_value: float, threshold: float
) -> None:
    info = dt.FLOAT_INFO[name]
    assert (info.precision, info.max_value) == (precision, max_value)
    assert info.overflow_threshold == threshold
    # the threshold rounds to inf, the float just below it to max (cast from a wider format that holds it)
    wide = np.float64 if name == "float32" else np.float32
    at = np.array([threshold], dtype=wide)
    below = np.nextafter(at, wide(0))
    with np.errstate(over="ignore"):
        assert np.isinf(at.astype(dt.numpy_dtype(name)))[0]
        assert float(below.astype(dt.numpy_dtype(name))[0]) == max_value


def test_eps_and_unit_roundoff() -> None:
    assert dt.FLOAT_INFO["float32"].eps == float(np.finfo(np.float32).eps)
    assert dt.FLOAT_INFO["float16"].unit_roundoff == 2.0**-11
    assert dt.accumulation_info("bfloat16").name == "float32"
    assert dt.accumulation_info("float64").name == "float64"


def test_dtype_names_round_trip() -> None:
    for name in dt.ALL_NAMES:
        assert dt.dtype_name(dt.numpy_dtype(name)) == name
    with pytest.raises(KeyError, match="valid: float64"):
        dt.numpy_dtype("float8")
    with pytest.raises(KeyError, match="not supported"):
        dt.dtype_name(np.complex64)
