"""layernorm_welford, one pass: y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis.

x is [B, N], weight and bias [N], var biased (divided by N). One program per row (rows vectorised
here) walks the row once in tiles of BLOCK = 64 lanes. Each tile's statistics (its count n_t of real
lanes, mean_t, M2_t) are computed from its real lanes in float32 and folded into the running state
(n, mean, M2) with Chan et al.'s formula:

    n' = n + n_t;  delta = mean_t - mean;  mean' = mean + delta * n_t / n'
    M2' = M2 + M2_t + delta * (delta * n * n_t / n');      var = M2 / n at the end

(delta * (delta * w), not delta^2 * w: the first merge, w = 0, of a tile whose mean is beyond
sqrt(float32 max) must add 0, not inf * 0 = NaN.) A second pass normalises and stores (the one cast
to the input dtype).

No buggy twin here (layernorm.py's twin is the accumulator bug); this op shows a Welford kernel
judged against a reference that converts to float64 first.

Reference: `reference` below, numpy in float64 (`x.astype(np.float64)` first).
"""

import numpy as np

BLOCK = 64


def _load_tile(x, start):
    """Masked load of columns [start, start + BLOCK), float32, padding 0; and the lane mask."""
    stop = min(start + BLOCK, x.shape[1])
    tile = np.zeros((x.shape[0], BLOCK), dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile, np.arange(BLOCK) < stop - start


def layernorm_welford(x, weight, bias, eps=1e-5):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        cnt = np.zeros(rows, dtype=np.float32)
        mean = np.zeros(rows, dtype=np.float32)
        m2 = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            tile, mask = _load_tile(x, start)
            n_t = np.float32(mask.sum())
            mean_t = tile.sum(axis=1) / n_t
            d = np.where(mask, tile - mean_t[:, None], np.float32(0))
            m2_t = (d * d).sum(axis=1)
            new_cnt = cnt + n_t
            delta = mean_t - mean
            mean = mean + delta * (n_t / new_cnt)
            m2 = m2 + m2_t + delta * (delta * (cnt * n_t / new_cnt))
            cnt = new_cnt
        rstd = np.float32(1) / np.sqrt(m2 / cnt + np.float32(eps))
        w, b = weight.astype(np.float32), bias.astype(np.float32)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            xt = x[:, start:stop].astype(np.float32)
            out[:, start:stop] = (xt - mean[:, None]) * rstd[:, None] * w[start:stop] + b[start:stop]
    return out


def reference(x, weight, bias, eps=1e-5):
    """The way a numpy user writes it: everything to float64 first, then mean and variance."""
    x = x.astype(np.float64)
    weight = weight.astype(np.float64)
    bias = bias.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias
