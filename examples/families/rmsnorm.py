"""Family 4 - RMSNorm with weight, y = x / sqrt(mean(x^2) + eps) * weight (LLaMA's).

A CUDA-style kernel for short-to-medium rows: one thread per row (rows vectorised here) walks its
row serially accumulating x^2, a tile of BLOCK = 256 columns at a time; the serial walk is emulated
with np.add.accumulate in the accumulator's dtype, which rounds exactly like `acc += x[j] * x[j]`
in a loop. The partial last tile is padded with 0 (adds nothing). The squares are formed in float32;
rstd = 1 / sqrt(acc / N + eps) in float32; y is cast to the input dtype at the store.

Buggy twin (one line):

rmsnorm_bug_half_acc   the accumulator has the input's dtype (`scalar_t acc` instead of
                       `float acc`, i.e. half or bfloat16 for 16-bit inputs): once the running sum
                       is large its spacing swallows the small squares (float16 past 2^10 rounds
                       away squares below 0.5; bfloat16 past 2^8 those below 1), and large values
                       overflow float16's 65504. float32 inputs are unaffected. Shows only if
                       dtype != float32, and then for long rows (bfloat16 from N ~ 100-250,
                       float16 from N ~ 1300 for normal values; uniform ones, whose squares average
                       1/3, stay close enough in float16 up to N = 2048) or large values (float16's
                       `large` squares overflow 65504). Short rows of unit values pass.

Reference: `reference` below (float64, the formula as written).
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


def _rmsnorm_kernel(x, weight, eps, half_acc):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    # BUG: an accumulator of the input's dtype.
    acc_dtype = x.dtype if half_acc else np.float32
    with np.errstate(all="ignore"):
        acc = np.zeros(rows, dtype=acc_dtype)
        for start in range(0, n, BLOCK):
            tile = _load_tile(x, start)
            acc = _serial_add(acc, tile * tile, acc_dtype)
        rstd = np.float32(1) / np.sqrt(acc.astype(np.float32) / np.float32(n) + np.float32(eps))
        w = weight.astype(np.float32)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            y = _load_tile(x, start) * rstd[:, None]
            out[:, start:stop] = y[:, : stop - start] * w[start:stop]
    return out


def rmsnorm(x, weight, eps=1e-6):
    return _rmsnorm_kernel(x, weight, eps, half_acc=False)


def rmsnorm_bug_half_acc(x, weight, eps=1e-6):
    return _rmsnorm_kernel(x, weight, eps, half_acc=True)


def reference(x, weight, eps=1e-6):
    with np.errstate(all="ignore"):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight
