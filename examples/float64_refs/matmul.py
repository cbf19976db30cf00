"""matmul, C = A @ B with A [M, K], B [K, N]: a CUDA kernel with one thread per output element.

Each thread walks K serially, `acc += a[i, k] * b[k, j]`, the product formed in float32 and the
accumulator a float32 register, and casts once at the store. The K loop reads A and B a tile of
BLOCK_K = 64 at a time (the partial last tile padded with 0, which adds nothing). The serial walk is
emulated with np.add.accumulate in the accumulator's dtype, which rounds exactly as the loop does.

Buggy twin (one line):

matmul_bug_half_acc   the accumulator has the input's dtype (`scalar_t acc` for `float acc`): a
                      float16/bfloat16 running sum rounds every partial sum to 11 or 8 bits, so
                      once it is large the later products are swallowed (bfloat16 misses badly from
                      K ~ 64 for unit values). float32 inputs are unaffected: shows only if
                      dtype != float32.

Reference: refs/matmul_ref.py, a script that decodes every input to float64 whatever the request's
dtype, and computes A @ B in float64.
"""

import numpy as np

BLOCK_K = 64


def _load_k_tile(t, k0, axis):
    """Masked load of K-slice [k0, k0 + BLOCK_K) of A (axis 1) or B (axis 0), float32, zero padded."""
    k = t.shape[axis]
    stop = min(k0 + BLOCK_K, k)
    shape = (t.shape[0], BLOCK_K) if axis == 1 else (BLOCK_K, t.shape[1])
    tile = np.zeros(shape, dtype=np.float32)
    if axis == 1:
        tile[:, : stop - k0] = t[:, k0:stop]
    else:
        tile[: stop - k0] = t[k0:stop]
    return tile


def _matmul_kernel(a, b, acc_dtype):
    m, k = a.shape
    n = b.shape[1]
    with np.errstate(all="ignore"):
        acc = np.zeros((m, n), dtype=acc_dtype)
        for k0 in range(0, k, BLOCK_K):
            a_t = _load_k_tile(a, k0, axis=1)  # [M, BLOCK_K]
            b_t = _load_k_tile(b, k0, axis=0)  # [BLOCK_K, N]
            products = a_t[:, :, None] * b_t[None, :, :]  # [M, BLOCK_K, N], float32
            chain = np.concatenate([acc[:, None, :], products.astype(acc_dtype)], axis=1)
            acc = np.add.accumulate(chain, axis=1, dtype=acc_dtype)[:, -1, :]  # acc += a * b, in order
        return acc.astype(a.dtype)


def matmul(a, b):
    return _matmul_kernel(a, b, acc_dtype=np.float32)


def matmul_bug_half_acc(a, b):
    return _matmul_kernel(a, b, acc_dtype=a.dtype)  # BUG: `scalar_t acc`
