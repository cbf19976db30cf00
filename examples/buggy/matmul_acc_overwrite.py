"""Bug class 2 - accumulator overwritten.

A tiled matmul in the shape of the Triton tutorial kernel: a grid of (M / BLOCK_M) x (N / BLOCK_N)
programs, each owning one output tile and walking K in steps of BLOCK_K = 32 with a float32
accumulator. Partial tiles are masked loads padded with 0 (the identity of the dot product).

matmul_acc_overwrite     writes `acc = a_tile @ b_tile`: every K step throws away the previous
                         ones, so only the last K tile survives.
matmul_acc_overwrite_ok  writes `acc += a_tile @ b_tile`. This is the only difference.

Shows only when K > BLOCK_K = 32 (with K <= 32 there is a single K step and `=` equals `+=`).
Reference: `reference` below (float64 a @ b).
"""

import numpy as np

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32


def _cdiv(a, b):
    return -(-a // b)


def _load_tile(t, r0, c0, block_r, block_c):
    """Masked 2-D load of t[r0:r0+block_r, c0:c0+block_c], upcast to float32, padded with 0."""
    r1 = min(r0 + block_r, t.shape[0])
    c1 = min(c0 + block_c, t.shape[1])
    tile = np.zeros((block_r, block_c), dtype=np.float32)
    tile[: r1 - r0, : c1 - c0] = t[r0:r1, c0:c1]
    return tile


def _matmul_kernel(a, b, overwrite):
    m, k = a.shape
    k2, n = b.shape
    assert k == k2, "inner dimensions differ"
    c = np.empty((m, n), dtype=a.dtype)
    for pid_m in range(_cdiv(m, BLOCK_M)):
        for pid_n in range(_cdiv(n, BLOCK_N)):
            r0, c0 = pid_m * BLOCK_M, pid_n * BLOCK_N
            acc = np.zeros((BLOCK_M, BLOCK_N), dtype=np.float32)
            for k0 in range(0, k, BLOCK_K):
                a_tile = _load_tile(a, r0, k0, BLOCK_M, BLOCK_K)
                b_tile = _load_tile(b, k0, c0, BLOCK_K, BLOCK_N)
                if overwrite:
                    acc = a_tile @ b_tile  # BUG: `=` instead of `+=`
                else:
                    acc += a_tile @ b_tile  # FIX
            r1, c1 = min(r0 + BLOCK_M, m), min(c0 + BLOCK_N, n)
            c[r0:r1, c0:c1] = acc[: r1 - r0, : c1 - c0]  # masked store, cast to the output dtype
    return c


def matmul_acc_overwrite(a, b):
    return _matmul_kernel(a, b, overwrite=True)


def matmul_acc_overwrite_ok(a, b):
    return _matmul_kernel(a, b, overwrite=False)


def reference(a, b):
    return a @ b
