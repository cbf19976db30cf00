"""The neighbourhood of a failing output's worst element (what an editor's diff shows), and the words for
where the failing elements lie (a row, a tail, a column)."""

from __future__ import annotations

import numpy as np

from gpuemu_ls.diagnostics.hover import layout_text
from gpuemu_ls.engine.oracle.compare import compare_output
from gpuemu_ls.engine.oracle.features import neighbourhood, output_features


def _judged(op: np.ndarray, ref: np.ndarray):
    return compare_output("out", op, ref, "float32", 1e-5, 1e-5, keep_mask=True)


def test_a_tail_bug_shows_as_the_last_columns_around_the_worst_element() -> None:
    ref = np.arange(12 * 40, dtype=np.float64).reshape(12, 40) / 100
    op = ref.astype(np.float32).copy()
    op[:, 37:] += 1.0  # the last 3 columns of every row: a missing tail mask
    op[6, 38] += 2.0  # the worst element
    cmp = _judged(op, ref)
    win = neighbourhood(cmp, op, ref)
    assert win is not None and cmp.worst_index == (6, 38)
    assert win["lead"] == [] and win["rows"] == [4, 9] and win["cols"] == [33, 40]  # as centred as fits
    assert win["bad"] == [[0, 0, 0, 0, 1, 1, 1]] * 5
    assert win["op"][2][5] == float(op[6, 38]) and win["ref"][2][5] == ref[6, 38]
    assert layout_text(output_features(cmp, {}, None)) == "every row; the last 3 of 40 columns: a tail"  # type: ignore[arg-type]


def test_leading_axes_are_fixed_and_a_1d_output_is_one_row_with_nan_as_text() -> None:
    ref = np.zeros((2, 3, 4), dtype=np.float64)
    op = ref.astype(np.float32).copy()
    op[1, :, 2] = 5.0  # one column of the second matrix
    cmp = _judged(op, ref)
    win = neighbourhood(cmp, op, ref)
    assert win is not None and win["lead"] == [1] and win["rows"] == [0, 3] and win["cols"] == [0, 4]
    assert win["bad"] == [[0, 0, 1, 0]] * 3
    assert layout_text(output_features(cmp, {}, None)).endswith(": a column")  # type: ignore[arg-type]

    ref1 = np.ones(20, dtype=np.float64)
    op1 = ref1.astype(np.float32).copy()
    op1[15] = np.nan
    cmp1 = _judged(op1, ref1)
    win1 = neighbourhood(cmp1, op1, ref1)
    assert win1 is not None and win1["rows"] is None and win1["cols"] == [12, 19]
    assert win1["op"] == [[1.0, 1.0, 1.0, "nan", 1.0, 1.0, 1.0]] and win1["bad"] == [[0, 0, 0, 1, 0, 0, 0]]


def test_no_window_for_a_scalar_or_mismatched_shapes() -> None:
    ref = np.ones((3, 3))
    op = ref.astype(np.float32) + 1
    cmp = _judged(op, ref)
    assert neighbourhood(cmp, op, ref) is not None
    assert neighbourhood(cmp, op[:2], ref) is None  # a shape bug: no element lines up
    scalar = _judged(np.float32(2.0), np.float64(1.0))
    assert not scalar.passed and neighbourhood(scalar, np.float32(2.0), np.float64(1.0)) is None
