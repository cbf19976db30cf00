"""Family 9 - Gram matrix / SYRK, C = A A^T with A [N, K], C [N, N] symmetric.

Like cuBLAS/Triton SYRK kernels, only the lower triangle is computed: the grid is the tiles
(pid_m, pid_n) with pid_m >= pid_n of 32 x 32 output tiles, each walking K in steps of
BLOCK_K = 32 with a float32 accumulator (masked loads padded with 0). A diagonal tile keeps its
lower triangle and mirrors it onto its upper triangle (so C is exactly symmetric); an
off-diagonal tile is stored at (pid_m, pid_n) and, transposed, at (pid_n, pid_m). The output is
allocated zeroed (torch.zeros) and cast at the stores.

Buggy twin (one line):

gram_bug_no_mirror   the transposed store of the off-diagonal tiles is missing: the upper triangle
                     outside the diagonal tiles stays 0. Shows only if N > 32 (one tile is a diagonal
                     tile; rows of A that are all zero excepted).

Reference: `reference` below (float64 A @ A^T).
"""

import numpy as np

BLOCK = 32
BLOCK_K = 32


def _load_tile(t, r0, c0, block_r, block_c):
    r1, c1 = min(r0 + block_r, t.shape[0]), min(c0 + block_c, t.shape[1])
    tile = np.zeros((block_r, block_c), dtype=np.float32)
    tile[: r1 - r0, : c1 - c0] = t[r0:r1, c0:c1]
    return tile


def _gram_kernel(a, mirror):
    n, k = a.shape
    c = np.zeros((n, n), dtype=a.dtype)
    n_tiles = -(-n // BLOCK)
    lower = np.tril(np.ones((BLOCK, BLOCK), dtype=bool))
    with np.errstate(all="ignore"):
        for pid_m in range(n_tiles):
            for pid_n in range(pid_m + 1):  # lower-triangle tiles only
                r0, c0 = pid_m * BLOCK, pid_n * BLOCK
                acc = np.zeros((BLOCK, BLOCK), dtype=np.float32)
                for k0 in range(0, k, BLOCK_K):
                    a_rows = _load_tile(a, r0, k0, BLOCK, BLOCK_K)
                    a_cols = _load_tile(a, c0, k0, BLOCK, BLOCK_K)
                    acc += a_rows @ a_cols.T
                r1, c1 = min(r0 + BLOCK, n), min(c0 + BLOCK, n)
                if pid_m == pid_n:
                    acc = np.where(lower, acc, acc.T)  # mirror the diagonal tile's lower triangle
                    c[r0:r1, c0:c1] = acc[: r1 - r0, : c1 - c0]
                else:
                    c[r0:r1, c0:c1] = acc[: r1 - r0, : c1 - c0]
                    if mirror:  # BUG (mirror=False): the upper triangle is never written
                        c[c0:c1, r0:r1] = acc.T[: c1 - c0, : r1 - r0]
    return c


def gram(a):
    return _gram_kernel(a, mirror=True)


def gram_bug_no_mirror(a):
    return _gram_kernel(a, mirror=False)


def reference(a):
    return a @ a.T
