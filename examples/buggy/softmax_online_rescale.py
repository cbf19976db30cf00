"""Bug class 3 - online-softmax rescale forgotten.

A streaming ("online normaliser", Milakov & Gimelshein 2018) row softmax like the inner loop of
FlashAttention: one program per row (vectorised over rows here) walks the row in blocks of
BLOCK = 64 columns, keeping a running max m and a running sum `den` of exp(x - m). When a block raises
the max from m to m_new, the sum gathered so far is relative to the old max and must be rescaled
by alpha = exp(m - m_new) before the new block's terms are added. A second pass writes
exp(x - m) / den.

softmax_online_rescale     forgets alpha: `den = den + sum(exp(x_blk - m_new))`.
softmax_online_rescale_ok  `den = den * alpha + sum(exp(x_blk - m_new))`. This is the only difference.

Shows only when N > 64 (one block: den starts at 0, so the missing rescale does nothing) and the max
grows after the first block - i.e. nearly every random row longer than 64.
Reference: `reference` below (float64 softmax; a fully -inf row gives NaN, like torch.softmax).
"""

import numpy as np

BLOCK = 64


def _load_block(x, start, other=-np.inf):
    n = x.shape[1]
    stop = min(start + BLOCK, n)
    blk = np.full((x.shape[0], BLOCK), other, dtype=np.float32)
    blk[:, : stop - start] = x[:, start:stop]
    return blk


def _online_softmax_kernel(x, rescale):
    rows, n = x.shape
    out = np.empty((rows, n), dtype=x.dtype)
    with np.errstate(all="ignore"):
        m = np.full(rows, -np.inf, dtype=np.float32)  # running max
        den = np.zeros(rows, dtype=np.float32)  # running sum of exp(x - m)
        for start in range(0, n, BLOCK):
            blk = _load_block(x, start)
            m_new = np.maximum(m, blk.max(axis=1))
            # a row that is -inf so far would give exp(-inf - -inf) = NaN: shift by 0 instead
            m_use = np.where(m_new == -np.inf, np.float32(0), m_new)
            p_sum = np.exp(blk - m_use[:, None]).sum(axis=1)
            if rescale:
                alpha = np.exp(m - m_use)
                den = den * alpha + p_sum  # FIX
            else:
                den = den + p_sum  # BUG: old partial sum is relative to the old max
            m = m_new
        m_use = np.where(m == -np.inf, np.float32(0), m)
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            blk = _load_block(x, start)
            y = np.exp(blk - m_use[:, None]) / den[:, None]
            out[:, start:stop] = y[:, : stop - start]
    return out


def softmax_online_rescale(x):
    return _online_softmax_kernel(x, rescale=False)


def softmax_online_rescale_ok(x):
    return _online_softmax_kernel(x, rescale=True)


def reference(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
