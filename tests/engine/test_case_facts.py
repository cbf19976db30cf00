"""The case's input facts and diagnosis features come from one pass over each finite input: the same values the
separate passes gave, on finite, NaN, infinite, empty, 0-d and bfloat16 inputs."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ls.engine.oracle.features import input_features
from gpuemu_ls.engine.run.case import case_facts

OP: Any = SimpleNamespace(nan_contract=False)  # all case_facts reads of the op
F32 = np.array([[1.0, -3.0, 0.5], [2.0, 0.25, -7.5]], dtype=np.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_finite_inputs_take_their_row_maxima_from_the_facts_pass(dtype: type) -> None:
    x = F32.astype(dtype)
    facts, biggest, rows = case_facts({"x": x, "i": np.arange(3)}, OP)
    assert (facts.inputs_nan, facts.inputs_finite, biggest) == (False, True, 7.5)
    assert rows["x"].tolist() == [1.0, 2.0] and "i" not in rows
    fused = input_features({"x": x}, "float32", rows)
    assert fused == input_features({"x": x}, "float32")
    assert (fused["masked_input_rows"], fused["row_max_min"]) == (0, 1.0)


def test_non_finite_and_degenerate_inputs_keep_the_full_tests() -> None:
    x = np.array([[np.nan, 1.0], [-np.inf, -np.inf], [4.0, -9.0]], dtype=np.float32)
    empty = np.zeros((0, 4), dtype=np.float32)
    scalar = np.array(-5.0, dtype=np.float32)
    facts, biggest, rows = case_facts({"x": x, "e": empty, "s": scalar}, OP)
    assert (facts.inputs_nan, facts.inputs_finite, biggest) == (True, False, 9.0)
    assert set(rows) == {"s"} and rows["s"] is None  # 0-d: finite, no rows
    feats = input_features({"x": x, "e": empty, "s": scalar}, "float32", rows)
    assert feats == {"masked_input_rows": 1, "row_max_min": 1.0}
    _, big, _ = case_facts({"y": np.array([np.inf, 2.0])}, OP)
    assert big == 2.0 and not math.isinf(big)
