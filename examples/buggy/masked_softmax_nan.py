"""Bug class 8 - NaN on fully masked rows.

A masked ("safe") softmax as used for attention scores with padding masks: masked positions hold
-inf, and a row whose positions are all masked must come out as zeros (the convention of
PyTorch's safe softmax in scaled_dot_product_attention and of xformers), not NaN. The kernel is
the fused one-row-per-program softmax (BLOCK = next_power_of_2(N), padding -inf, float32).

masked_softmax_nan     plain max-subtracted softmax: for an all -inf row, max = -inf and
                       exp(-inf - (-inf)) = exp(NaN) poisons the row with NaN.
masked_softmax_nan_ok  writes zeros for rows whose max is -inf. This is the only difference.

Shows only for inputs with fully masked rows (the `masked_rows` distribution); rows with some
-inf (`partial_inf`) are fine in both. Reference: refs/masked_softmax_ref.py (float64).
"""

import numpy as np


def _next_power_of_2(n):
    return 1 << max(0, (n - 1).bit_length())


def _masked_softmax_kernel(x, guard_masked_rows):
    rows, n = x.shape
    block = _next_power_of_2(n)
    row = np.full((rows, block), -np.inf, dtype=np.float32)  # masked load, other=-inf
    row[:, :n] = x
    with np.errstate(all="ignore"):
        row_max = row.max(axis=1, keepdims=True)
        numerator = np.exp(row - row_max)
        y = numerator / numerator.sum(axis=1, keepdims=True)
        if guard_masked_rows:
            y = np.where(row_max == -np.inf, np.float32(0.0), y)  # FIX: fully masked row -> 0
        # BUG (guard missing): an all -inf row stays NaN
    out = np.empty((rows, n), dtype=x.dtype)
    out[:] = y[:, :n]
    return out


def masked_softmax_nan(x):
    return _masked_softmax_kernel(x, guard_masked_rows=False)


def masked_softmax_nan_ok(x):
    return _masked_softmax_kernel(x, guard_masked_rows=True)
