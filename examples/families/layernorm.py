"""Family 3 - LayerNorm over the last axis with weight and bias, two-pass and Welford.

    y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased (divided by N), as in torch.

layernorm: the Triton tutorial's two-pass kernel. One program per row (rows vectorised here)
walks the row in tiles of BLOCK = 128 lanes: pass 1 sums x (masked lanes read 0) and divides by
N; pass 2 sums (x - mean)^2 over the real lanes only and divides by N; pass 3 normalises, applies
weight and bias, and stores (the one cast to the output dtype). Float32 throughout.

layernorm_welford: one pass over tiles of BLOCK = 64 lanes. Each tile's statistics (count n_t
of real lanes, mean_t, M2_t) are computed from its real lanes and folded into the running state
(n, mean, M2) with Chan et al.'s formula:

    n' = n + n_t;  delta = mean_t - mean;  mean' = mean + delta * n_t / n'
    M2' = M2 + M2_t + delta * (delta * n * n_t / n');      var = M2 / n at the end

Buggy twins (one line each):

layernorm_bug_padded_len          mean and variance divided by the padded length n_tiles * BLOCK
                                  (the `/ BLOCK_SIZE` of a one-tile kernel) instead of N. Shows only if
                                  N % 128 != 0 (constant zero rows excepted).
layernorm_welford_bug_merge_counts  every tile enters the merge with count BLOCK, the masked lanes
                                  of the partial last tile counted: the last tile is over-weighted
                                  and var = M2 / n uses the padded count. Shows only if
                                  N % 64 != 0 and N > 1 (N == 1 normalises 0 to 0 whatever the
                                  variance); it hides on constant rows, and in float16/bfloat16
                                  when the last tile is nearly full.

Reference: `reference` below (float64, mean then variance of x - mean).
"""

import numpy as np

BLOCK = 128
WELFORD_BLOCK = 64


def _load_tile(x, start, block):
    """Masked load of columns [start, start + block), float32, padding 0; and the lane mask."""
    stop = min(start + block, x.shape[1])
    tile = np.zeros((x.shape[0], block), dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile, np.arange(block) < stop - start


def _normalise_store(x, weight, bias, mean, rstd, block):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    w, b = weight.astype(np.float32), bias.astype(np.float32)
    for start in range(0, n, block):
        stop = min(start + block, n)
        xt = x[:, start:stop].astype(np.float32)
        out[:, start:stop] = (xt - mean[:, None]) * rstd[:, None] * w[start:stop] + b[start:stop]
    return out


def _two_pass_kernel(x, weight, bias, eps, padded_len):
    rows, n = x.shape
    n_tiles = -(-n // BLOCK)
    # BUG: dividing by the padded length counts the masked lanes as elements.
    count = np.float32(n_tiles * BLOCK if padded_len else n)
    with np.errstate(all="ignore"):
        total = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            tile, _ = _load_tile(x, start, BLOCK)
            total += tile.sum(axis=1)
        mean = total / count
        m2 = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            tile, mask = _load_tile(x, start, BLOCK)
            d = np.where(mask, tile - mean[:, None], np.float32(0))
            m2 += (d * d).sum(axis=1)
        rstd = np.float32(1) / np.sqrt(m2 / count + np.float32(eps))
        return _normalise_store(x, weight, bias, mean, rstd, BLOCK)


def _welford_kernel(x, weight, bias, eps, count_padding):
    rows, n = x.shape
    with np.errstate(all="ignore"):
        cnt = np.zeros(rows, dtype=np.float32)
        mean = np.zeros(rows, dtype=np.float32)
        m2 = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, WELFORD_BLOCK):
            tile, mask = _load_tile(x, start, WELFORD_BLOCK)
            valid = np.float32(mask.sum())
            mean_t = tile.sum(axis=1) / valid
            d = np.where(mask, tile - mean_t[:, None], np.float32(0))
            m2_t = (d * d).sum(axis=1)
            # BUG: the tile's count is taken as BLOCK, the masked lanes counted.
            n_t = np.float32(WELFORD_BLOCK) if count_padding else valid
            new_cnt = cnt + n_t
            delta = mean_t - mean
            mean = mean + delta * (n_t / new_cnt)
            # delta * (delta * w), not delta^2 * w: the first merge (cnt = 0) of a tile whose mean is
            # beyond sqrt(float32 max) must give 0, not inf * 0 = NaN
            m2 = m2 + m2_t + delta * (delta * (cnt * n_t / new_cnt))
            cnt = new_cnt
        rstd = np.float32(1) / np.sqrt(m2 / cnt + np.float32(eps))
        return _normalise_store(x, weight, bias, mean, rstd, WELFORD_BLOCK)


def layernorm(x, weight, bias, eps=1e-5):
    return _two_pass_kernel(x, weight, bias, eps, padded_len=False)


def layernorm_bug_padded_len(x, weight, bias, eps=1e-5):
    return _two_pass_kernel(x, weight, bias, eps, padded_len=True)


def layernorm_welford(x, weight, bias, eps=1e-5):
    return _welford_kernel(x, weight, bias, eps, count_padding=False)


def layernorm_welford_bug_merge_counts(x, weight, bias, eps=1e-5):
    return _welford_kernel(x, weight, bias, eps, count_padding=True)


def reference(x, weight, bias, eps=1e-5):
    with np.errstate(all="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * weight + bias
