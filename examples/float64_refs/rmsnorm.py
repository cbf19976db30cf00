"""rmsnorm with weight, y = x / sqrt(mean(x^2) + eps) * weight over the last axis (LLaMA's).

x is [B, N], weight [N]. A CUDA kernel for short rows: one thread per row (rows vectorised here)
walks its row serially, `acc += x[j] * x[j]`, the squares formed in float32, a tile of BLOCK = 128
columns loaded at a time (the partial last tile padded with 0, which adds nothing). The serial walk
is emulated with np.add.accumulate in the accumulator's dtype, which rounds exactly as the loop does.
rstd = 1 / sqrt(acc / N + eps) in float32; y is cast to the input dtype at the store.

Buggy twin (one line):

rmsnorm_bug_half_acc   the accumulator has the input's dtype (`scalar_t acc` for `float acc`):
                       float16 overflows once the running sum passes 65504 (squares of the `large`
                       and `positive` values), and a float16/bfloat16 running sum swallows the small
                       squares once it is large (bfloat16 from N ~ 100-250 for unit values).
                       float32 inputs are unaffected: shows only if dtype != float32.

Reference: refs/rmsnorm_ref.py, a script that decodes every input to float64 whatever the request's
dtype, and computes in float64.
"""

import numpy as np

BLOCK = 128


def _load_tile(x, start):
    stop = min(start + BLOCK, x.shape[1])
    tile = np.zeros((x.shape[0], BLOCK), dtype=np.float32)  # masked load, other=0
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def _rmsnorm_kernel(x, weight, eps, acc_dtype):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        acc = np.zeros(rows, dtype=acc_dtype)
        for start in range(0, n, BLOCK):
            tile = _load_tile(x, start)
            chain = np.concatenate([acc[:, None], (tile * tile).astype(acc_dtype)], axis=1)
            acc = np.add.accumulate(chain, axis=1, dtype=acc_dtype)[:, -1]  # acc += x[j] * x[j], in order
        rstd = np.float32(1) / np.sqrt(acc.astype(np.float32) / np.float32(n) + np.float32(eps))
        w = weight.astype(np.float32)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            out[:, start:stop] = (_load_tile(x, start) * rstd[:, None])[:, : stop - start] * w[start:stop]
    return out


def rmsnorm(x, weight, eps=1e-6):
    return _rmsnorm_kernel(x, weight, eps, acc_dtype=np.float32)


def rmsnorm_bug_half_acc(x, weight, eps=1e-6):
    return _rmsnorm_kernel(x, weight, eps, acc_dtype=x.dtype)  # BUG: `scalar_t acc`
