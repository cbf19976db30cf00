"""Family 7 - row mean and row variance (population variance, ddof = 0, as torch.var(unbiased=False)).

row_mean: one program per row (rows vectorised here) sums the row in float32 over tiles of
BLOCK = 64 (masked lanes read 0) and divides by N; the [B] result is cast at the store.

row_var: a split reduction, like the statistics pass of a split-row norm: two programs per row take
the halves [0, cdiv(N, 2)) and [cdiv(N, 2), N); each makes two passes over tiles of BLOCK = 128
(masked loads) for its (count, mean, M2), and the halves are merged with Chan et al.'s formula,
var = (M2_a + M2_b + delta * (delta * n_a * n_b / N)) / N. An empty half (count 0) has mean 0 and M2 0,
which the merge then ignores.

Buggy twins (one line each):

row_mean_bug_padded_len    divides by the padded length n_tiles * BLOCK instead of N: every row
                           mean is scaled by N / (n_tiles * 64). Shows only if N % 64 != 0; it hides
                           when the mean is near 0 (long rows of zero-mean values in
                           float16/bfloat16, whose absolute tolerance is 1e-2).
row_var_bug_empty_split    a half's mean is sum / count with no guard: the second half of a row of
                           N == 1 is empty, 0 / 0 = NaN, and the merge spreads it. Shows only if N == 1.

Reference: `mean_reference`, `var_reference` below (float64).
"""

import numpy as np

MEAN_BLOCK = 64
VAR_BLOCK = 128


def _load_tile(x, start, stop_limit, block):
    """Masked load of columns [start, start + block) clipped to stop_limit, float32 (padding 0), and the mask."""
    stop = max(start, min(start + block, stop_limit))
    tile = np.zeros((x.shape[0], block), dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile, np.arange(block) < stop - start


def _row_mean_kernel(x, padded_len):
    rows, n = x.shape
    n_tiles = -(-n // MEAN_BLOCK)
    with np.errstate(all="ignore"):
        total = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, MEAN_BLOCK):
            tile, _ = _load_tile(x, start, n, MEAN_BLOCK)
            total += tile.sum(axis=1)
        # BUG: the padded length counts the masked lanes.
        count = np.float32(n_tiles * MEAN_BLOCK if padded_len else n)
        return (total / count).astype(x.dtype)


def _half_stats(x, lo, hi, guard_empty):
    """One program: (count, mean, M2) of columns [lo, hi) of every row, float32, two passes."""
    count = hi - lo
    total = np.zeros(x.shape[0], dtype=np.float32)
    for start in range(lo, hi, VAR_BLOCK):
        tile, _ = _load_tile(x, start, hi, VAR_BLOCK)
        total += tile.sum(axis=1)
    # BUG (guard_empty=False): 0 / 0 for an empty half.
    mean = total / np.float32(max(count, 1) if guard_empty else count)
    m2 = np.zeros(x.shape[0], dtype=np.float32)
    for start in range(lo, hi, VAR_BLOCK):
        tile, mask = _load_tile(x, start, hi, VAR_BLOCK)
        d = np.where(mask, tile - mean[:, None], np.float32(0))
        m2 += (d * d).sum(axis=1)
    return np.float32(count), mean, m2


def _row_var_kernel(x, guard_empty):
    n = x.shape[1]
    half = -(-n // 2)
    with np.errstate(all="ignore"):
        n_a, mean_a, m2_a = _half_stats(x, 0, half, guard_empty)
        n_b, mean_b, m2_b = _half_stats(x, half, n, guard_empty)
        total = n_a + n_b
        delta = mean_b - mean_a
        # delta * (delta * w), not delta^2 * w: with an empty half (w = 0) and a mean beyond
        # sqrt(float32 max), delta^2 = inf and inf * 0 = NaN
        m2 = m2_a + m2_b + delta * (delta * (n_a * n_b / total))
        return (m2 / total).astype(x.dtype)


def row_mean(x):
    return _row_mean_kernel(x, padded_len=False)


def row_mean_bug_padded_len(x):
    return _row_mean_kernel(x, padded_len=True)


def row_var(x):
    return _row_var_kernel(x, guard_empty=True)


def row_var_bug_empty_split(x):
    return _row_var_kernel(x, guard_empty=False)


def mean_reference(x):
    return x.mean(axis=-1)


def var_reference(x):
    with np.errstate(all="ignore"):
        return ((x - x.mean(axis=-1, keepdims=True)) ** 2).mean(axis=-1)
