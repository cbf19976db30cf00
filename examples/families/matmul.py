"""Family 1 - matmul and split-K matmul, C = A @ B with A [M, K], B [K, N].

matmul: the Triton tutorial kernel. A grid of (M / BLOCK_M) x (N / BLOCK_N) programs, each owning
one 64 x 64 output tile and walking K in steps of BLOCK_K = 32 with a float32 accumulator. Partial
tiles are masked loads padded with 0 (the identity of the dot product); the tile is cast to the
output dtype once, at the masked store.

matmul_splitk: the same tiles, with K cut into SPLIT_K = 4 chunks of cdiv(K, SPLIT_K) columns. A
third grid axis pid_k computes the partial product of its chunk in float32, and the partials are
summed in float32 (the reduction an atomic-add epilogue or a second kernel performs) before the
store. Chunk bounds are [pid_k * chunk, min((pid_k + 1) * chunk, K)): empty chunks add nothing.

Buggy twins (one line each):

matmul_bug_acc_overwrite          `acc = a_tile @ b_tile` instead of `acc +=`: only the last K tile
                                  survives. Shows only if K > BLOCK_K = 32.
matmul_splitk_bug_k_chunk_floor   chunk = K // SPLIT_K (floor) instead of cdiv(K, SPLIT_K): the
                                  last K % SPLIT_K columns of A (rows of B) belong to no split and
                                  are dropped. Shows only if K % 4 != 0 (K in 1..3 drops everything).

Reference: `reference` below (float64 A @ B).
"""

import numpy as np

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32
SPLIT_K = 4


def _cdiv(a, b):
    return -(-a // b)


def _load_tile(t, r0, c0, block_r, block_c, r_stop=None, c_stop=None):
    """Masked 2-D load of t[r0:r0+block_r, c0:c0+block_c] (clipped to r_stop/c_stop), float32, zero padded."""
    r1 = min(r0 + block_r, t.shape[0] if r_stop is None else r_stop)
    c1 = min(c0 + block_c, t.shape[1] if c_stop is None else c_stop)
    tile = np.zeros((block_r, block_c), dtype=np.float32)
    if r1 > r0 and c1 > c0:
        tile[: r1 - r0, : c1 - c0] = t[r0:r1, c0:c1]
    return tile


def _store_tile(c, r0, c0, acc):
    r1, c1 = min(r0 + BLOCK_M, c.shape[0]), min(c0 + BLOCK_N, c.shape[1])
    c[r0:r1, c0:c1] = acc[: r1 - r0, : c1 - c0]  # masked store, the one cast to the output dtype


def _matmul_kernel(a, b, overwrite):
    m, k = a.shape
    n = b.shape[1]
    c = np.empty((m, n), dtype=a.dtype)
    with np.errstate(all="ignore"):
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
                        acc += a_tile @ b_tile
                _store_tile(c, r0, c0, acc)
    return c


def _splitk_kernel(a, b, floor_chunk):
    m, k = a.shape
    n = b.shape[1]
    c = np.empty((m, n), dtype=a.dtype)
    # BUG: K // SPLIT_K leaves the last K % SPLIT_K columns to no split.
    chunk = k // SPLIT_K if floor_chunk else _cdiv(k, SPLIT_K)
    with np.errstate(all="ignore"):
        for pid_m in range(_cdiv(m, BLOCK_M)):
            for pid_n in range(_cdiv(n, BLOCK_N)):
                r0, c0 = pid_m * BLOCK_M, pid_n * BLOCK_N
                partials = np.zeros((SPLIT_K, BLOCK_M, BLOCK_N), dtype=np.float32)
                for pid_k in range(SPLIT_K):
                    k_lo, k_hi = pid_k * chunk, min((pid_k + 1) * chunk, k)
                    acc = np.zeros((BLOCK_M, BLOCK_N), dtype=np.float32)
                    for k0 in range(k_lo, k_hi, BLOCK_K):
                        a_tile = _load_tile(a, r0, k0, BLOCK_M, BLOCK_K, c_stop=k_hi)
                        b_tile = _load_tile(b, k0, c0, BLOCK_K, BLOCK_N, r_stop=k_hi)
                        acc += a_tile @ b_tile
                    partials[pid_k] = acc
                acc = partials[0]
                for pid_k in range(1, SPLIT_K):  # the float32 reduction of the partial products
                    acc = acc + partials[pid_k]
                _store_tile(c, r0, c0, acc)
    return c


def matmul(a, b):
    return _matmul_kernel(a, b, overwrite=False)


def matmul_bug_acc_overwrite(a, b):
    return _matmul_kernel(a, b, overwrite=True)


def matmul_splitk(a, b):
    return _splitk_kernel(a, b, floor_chunk=False)


def matmul_splitk_bug_k_chunk_floor(a, b):
    return _splitk_kernel(a, b, floor_chunk=True)


def reference(a, b):
    return a @ b
