"""LayerNorm over the last axis with weight and bias, in the style of the PyTorch/Apex CUDA kernel.

One block per row (rows vectorised here) with BLOCK = 128 lanes. Each lane keeps a Welford state
(count, mean, M2) and folds in one element per column tile (masked lanes of the partial last tile
leave their state alone); the lanes are then combined by a tree of Chan merges, guarded for empty
lanes (count 0) exactly like Apex's cuChanOnlineSum. Float32 throughout, stored in the input dtype:
y = (x - mean) / sqrt(var + eps) * weight + bias. Welford keeps constant rows exact (var = 0).
Reference: `reference` below.
"""

import numpy as np

BLOCK = 128


def _welford_lanes(x):
    rows, n = x.shape
    count = np.zeros((rows, BLOCK), dtype=np.float32)
    mean = np.zeros((rows, BLOCK), dtype=np.float32)
    m2 = np.zeros((rows, BLOCK), dtype=np.float32)
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        tile = np.zeros((rows, BLOCK), dtype=np.float32)
        tile[:, : stop - start] = x[:, start:stop]
        valid = np.arange(BLOCK) < stop - start
        new_count = count + valid
        delta = tile - mean
        new_mean = mean + delta / new_count
        mean = np.where(valid, new_mean, mean)
        m2 = np.where(valid, m2 + delta * (tile - mean), m2)
        count = new_count
    return count, mean, m2


def _chan_tree(count, mean, m2):
    width = count.shape[1]
    while width > 1:
        h = width // 2
        n_a, n_b = count[:, :h], count[:, h:width]
        mean_a, mean_b = mean[:, :h], mean[:, h:width]
        total = n_a + n_b
        delta = mean_b - mean_a
        nonempty = total > 0
        mean = np.where(nonempty, mean_a + delta * (n_b / total), np.float32(0))
        m2 = np.where(nonempty, m2[:, :h] + m2[:, h:width] + delta * delta * (n_a * n_b / total), np.float32(0))
        count = total
        width = h
    return count[:, 0], mean[:, 0], m2[:, 0]


def layernorm_kernel(x, weight, bias, eps=1e-5):
    rows, n = x.shape
    with np.errstate(all="ignore"):
        count, mean, m2 = _chan_tree(*_welford_lanes(x))
        rstd = np.float32(1.0) / np.sqrt(m2 / count + np.float32(eps))
        w = weight.astype(np.float32)
        b = bias.astype(np.float32)
        out = np.empty((rows, n), dtype=x.dtype)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            xt = x[:, start:stop].astype(np.float32)
            out[:, start:stop] = (xt - mean[:, None]) * rstd[:, None] * w[start:stop] + b[start:stop]
    return out


def reference(x, weight, bias, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias
