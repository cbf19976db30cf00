"""Row softmax over the last axis, written like a looped Triton kernel.

One program per row (the row axis is vectorised here). Pass 1 streams the row in column tiles of
BLOCK = 256 with the online normaliser of Milakov & Gimelshein (running max `m`, running sum
`den` rescaled by exp(m_old - m_new) whenever the max grows); pass 2 writes exp(x - m) / den.
Loads of the partial last tile are masked and padded with -inf; all math is float32 and the
result is stored in the input dtype. Reference: refs/softmax_ref.py.
"""

import numpy as np

BLOCK = 256


def _load_tile(x, start, other=-np.inf):
    stop = min(start + BLOCK, x.shape[1])
    tile = np.full((x.shape[0], BLOCK), other, dtype=np.float32)
    tile[:, : stop - start] = x[:, start:stop]
    return tile


def softmax_kernel(x):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):  # IEEE semantics, as on the GPU
        m = np.full(rows, -np.inf, dtype=np.float32)
        den = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            tile = _load_tile(x, start)
            m_new = np.maximum(m, tile.max(axis=1))
            m_use = np.where(m_new == -np.inf, np.float32(0), m_new)  # all -inf so far: no shift
            den = den * np.exp(m - m_use) + np.exp(tile - m_use[:, None]).sum(axis=1)
            m = m_new
        m_use = np.where(m == -np.inf, np.float32(0), m)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            y = np.exp(_load_tile(x, start) - m_use[:, None]) / den[:, None]
            out[:, start:stop] = y[:, : stop - start]
    return out
