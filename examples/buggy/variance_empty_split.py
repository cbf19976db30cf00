"""Bug class 9 - empty partition (size-1 dim).

Row variance (population, ddof = 0) computed as a split reduction, like the statistics pass of a
split-row LayerNorm / BatchNorm: two programs per row take the halves [0, N // 2) and
[N // 2, N), each computes (count, mean, M2) over column tiles of BLOCK = 256 (masked loads), and
the halves are merged with the parallel-variance formula of Chan et al.:

    delta = mean_b - mean_a;  n = n_a + n_b
    mean  = mean_a + delta * n_b / n
    M2    = M2_a + M2_b + delta^2 * n_a * n_b / n;   var = M2 / N

Each half uses the shifted-data sums (shift = its first element), so constant rows give exactly 0.

variance_empty_split     mean_h = shift + sum_h / n_h: when N == 1 the first half is empty,
                         0 / 0 = NaN, and the merge spreads the NaN into the result.
variance_empty_split_ok  mean_h = shift + sum_h / max(n_h, 1) (an empty half is count 0, mean 0,
                         M2 0, which the merge then ignores). This is the only difference.

Shows only when N == 1. Reference: `reference` below (float64 np.var).
"""

import numpy as np

BLOCK = 256


def _load_tile(x, start, stop_limit):
    """Masked load of columns [start, start + BLOCK) clipped to stop_limit, float32, and the mask."""
    stop = max(start, min(start + BLOCK, stop_limit))
    tile = np.zeros((x.shape[0], BLOCK), dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    mask = np.arange(BLOCK) < stop - start
    return tile, mask


def _half_stats(x, lo, hi, guard_empty):
    """One program: (count, mean, M2) of columns [lo, hi) of every row, float32."""
    count = hi - lo
    first, first_ok = _load_tile(x, lo, hi)
    shift = np.where(first_ok[0], first[:, 0], np.float32(0.0))  # masked load, other=0
    total = np.zeros(x.shape[0], dtype=np.float32)
    for start in range(lo, hi, BLOCK):
        tile, mask = _load_tile(x, start, hi)
        total += np.where(mask, tile - shift[:, None], np.float32(0.0)).sum(axis=1)
    # FIX: divide by max(count, 1), an empty half has mean 0.  BUG: 0 / 0 when the half is empty.
    divisor = max(count, 1) if guard_empty else count
    mean = shift + total / np.float32(divisor)
    m2 = np.zeros(x.shape[0], dtype=np.float32)
    for start in range(lo, hi, BLOCK):
        tile, mask = _load_tile(x, start, hi)
        d = np.where(mask, tile - mean[:, None], np.float32(0.0))
        m2 += (d * d).sum(axis=1)
    return np.float32(count), mean, m2


def _variance_kernel(x, guard_empty):
    n = x.shape[1]
    half = n // 2
    with np.errstate(all="ignore"):
        n_a, mean_a, m2_a = _half_stats(x, 0, half, guard_empty)
        n_b, mean_b, m2_b = _half_stats(x, half, n, guard_empty)
        # Chan et al. merge of the two partial results
        count = n_a + n_b
        delta = mean_b - mean_a
        m2 = m2_a + m2_b + delta * delta * (n_a * n_b / count)
        var = m2 / count
    return var.astype(x.dtype)


def variance_empty_split(x):
    return _variance_kernel(x, guard_empty=False)


def variance_empty_split_ok(x):
    return _variance_kernel(x, guard_empty=True)


def reference(x):
    return np.var(x, axis=-1)
