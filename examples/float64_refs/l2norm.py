"""l2norm, y = x / max(sqrt(sum(x^2)), eps) over the last axis (torch.nn.functional.normalize).

x is [B, N]. One program per row (rows vectorised here) walks the row in tiles of BLOCK = 128 lanes:
each tile is loaded (masked lanes read 0), widened to float32, squared, and added into a float32
vector accumulator of BLOCK lanes; tl.sum folds the lanes at the end. The norm is clamped below by
eps = 1e-12 (an all-zero row gives 0, not 0 / 0), and y = x / norm is cast to the input dtype at
the store.

Buggy twin (one line):

l2norm_bug_fp16_square   the square is formed in the input's dtype before the widening,
                         `(x * x).to(tl.float32)` for `x.to(tl.float32) * x.to(tl.float32)`. In
                         float16 it overflows from |x| > 256 (x^2 > 65504: the norm is inf, y is 0)
                         and flushes squares below 2^-24 to 0 (subnormal values: the norm is eps).
                         bfloat16 has float32's range and float32 is unchanged: shows only if
                         dtype == float16, and then on large, positive, mixed_magnitude, boundary or
                         subnormal values.

Reference: `reference` below, numpy in float64 (`x.astype(np.float64)` first).
"""

import numpy as np

BLOCK = 128
EPS = 1e-12


def _l2norm_kernel(x, square_in_input_dtype):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        acc = np.zeros((rows, BLOCK), dtype=np.float32)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            tile = np.zeros((rows, BLOCK), dtype=x.dtype)  # masked load, other=0
            tile[:, : stop - start] = x[:, start:stop]
            if square_in_input_dtype:
                acc += (tile * tile).astype(np.float32)  # BUG: x * x in float16 overflows past |x| > 256
            else:
                acc += tile.astype(np.float32) * tile.astype(np.float32)
        norm = np.maximum(np.sqrt(acc.sum(axis=1)), np.float32(EPS))
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            out[:, start:stop] = x[:, start:stop].astype(np.float32) / norm[:, None]
    return out


def l2norm(x):
    return _l2norm_kernel(x, square_in_input_dtype=False)


def l2norm_bug_fp16_square(x):
    return _l2norm_kernel(x, square_in_input_dtype=True)


def reference(x):
    """The way a numpy user writes it: to float64 first, then the formula."""
    x = x.astype(np.float64)
    return x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), EPS)
