"""Bug class 7 - float16 accumulation.

A CUDA-style RMSNorm (LLaMA's, without the weight) for float16 tensors: one thread per row walks
its row serially accumulating sum(x^2), then y = x / sqrt(sum / N + eps). The serial walk is
emulated a tile of BLOCK = 256 columns at a time with np.add.accumulate in the accumulator's
dtype (bit-identical to `acc += x[j] * x[j]` in a loop); the partial last tile is padded with 0.

rmsnorm_fp16_acc     declares the accumulator `half acc`: once the partial sum passes 2^10 its
                     float16 spacing is 1 (2 past 2^11), so squares below 0.5 (below 1) round
                     away and long rows lose a good part of their sum of squares.
rmsnorm_fp16_acc_ok  `float acc`; the result is rounded to float16 only when y is stored. This
                     is the only difference.

Shows only for long rows: passes for N <= 1024, fails at N = 4096 (for normal or uniform values
the sum of squares passes 2^10-2^11 around N = 2000-3000). Float16 only.
Reference: `reference` below (float64).
"""

import numpy as np

BLOCK = 256


def _load_tile(x, start):
    stop = min(start + BLOCK, x.shape[1])
    tile = np.zeros((x.shape[0], BLOCK), dtype=np.float32)  # masked load, other=0
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _serial_add(acc, terms, acc_dtype):
    """acc += terms[:, 0]; acc += terms[:, 1]; ... in acc_dtype, per row."""
    chain = np.concatenate([acc[:, None], terms.astype(acc_dtype)], axis=1)
    return np.add.accumulate(chain, axis=1, dtype=acc_dtype)[:, -1]


def _rmsnorm_kernel(x, eps, acc_dtype):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        acc = np.zeros(rows, dtype=acc_dtype)
        for start in range(0, n, BLOCK):
            tile = _load_tile(x, start)
            acc = _serial_add(acc, tile * tile, acc_dtype)
        rstd = np.float32(1.0) / np.sqrt(acc.astype(np.float32) / np.float32(n) + np.float32(eps))
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            out[:, start:stop] = (_load_tile(x, start) * rstd[:, None])[:, : stop - start]
    return out


def rmsnorm_fp16_acc(x, eps=1e-5):
    return _rmsnorm_kernel(x, eps, acc_dtype=np.float16)  # BUG: half accumulator


def rmsnorm_fp16_acc_ok(x, eps=1e-5):
    return _rmsnorm_kernel(x, eps, acc_dtype=np.float32)  # FIX: float accumulator


def reference(x, eps=1e-5):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
