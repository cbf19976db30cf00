"""flash attention with an additive mask, out = softmax(q k^T / sqrt(D) + bias) v, online softmax.

q, k, v are [B, H, S, D], bias an additive [S, S] mask (finite values or -inf), as in attention.py;
a fully masked query row gives 0. The kernel is the FlashAttention-2 forward: the grid is
(S / BLOCK_M) query blocks x (B * H) heads (heads vectorised here); each program streams key/value
blocks of BLOCK_N = 16 once, keeping per query row a running max m, a running sum l of exp(s - m)
and an accumulator acc, all float32. When a block raises the max from m to m_new, l and acc are
rescaled by alpha = exp2((m - m_new) * log2(e)). The shift is m_new, except where m_new is still
-inf (every key seen so far is masked): there it is 0, so that the block's p = exp(-inf - 0) = 0
instead of exp(-inf - -inf) = NaN (FlashAttention's "Check_inf"). The store divides by l, by 1
where l = 0 (a fully masked row: 0). One cast to the input dtype at the store.

Buggy twin (one line):

flash_attention_bug_block_all_masked   the shift is m_new unguarded. A key block that is wholly -inf
                                       while the running max is still -inf gives p = NaN, and the
                                       NaN stays in l and acc for the rest of the row: a fully
                                       masked row is NaN (the reference says 0), and so is a row
                                       whose first key block is masked even though a later block
                                       has finite scores (the reference is finite there). Shows
                                       when the bias has such a row: `masked_rows` (every thorough
                                       and quick run), and `partial_inf`'s one row that keeps a
                                       single finite key when that key lies past the first block.

Reference: `reference` below, numpy in float64 (`x.astype(np.float64)` first).
"""

import math

import numpy as np

BLOCK_M = 16
BLOCK_N = 16
LOG2E = 1.4426950408889634


def _load_rows(t, start, block):
    """Masked load of rows [start, start + block) of a [BH, S, D] tensor, float32, zero padded."""
    stop = min(start + block, t.shape[1])
    tile = np.zeros((t.shape[0], block, t.shape[2]), dtype=np.float32)
    tile[:, : stop - start] = t[:, start:stop]
    return tile


def _load_bias(bias, start_m, start_n):
    """Masked 2-D load of the bias tile, float32; lanes past S read -inf (padded keys are masked)."""
    s = bias.shape[0]
    stop_m, stop_n = min(start_m + BLOCK_M, s), min(start_n + BLOCK_N, s)
    tile = np.full((BLOCK_M, BLOCK_N), -np.inf, dtype=np.float32)
    tile[: stop_m - start_m, : stop_n - start_n] = bias[start_m:stop_m, start_n:stop_n]
    return tile


def _flash_kernel(q, k, v, bias, check_inf):
    b, h, s, d = q.shape
    qh, kh, vh = (t.reshape(b * h, s, d) for t in (q, k, v))
    out = np.empty((b * h, s, d), dtype=q.dtype)
    sm_scale = np.float32(1.0 / math.sqrt(d))
    with np.errstate(all="ignore"):
        for start_m in range(0, s, BLOCK_M):
            q_t = _load_rows(qh, start_m, BLOCK_M)
            m_i = np.full((b * h, BLOCK_M), -np.inf, dtype=np.float32)
            l_i = np.zeros((b * h, BLOCK_M), dtype=np.float32)
            acc = np.zeros((b * h, BLOCK_M, d), dtype=np.float32)
            for start_n in range(0, s, BLOCK_N):
                k_t = _load_rows(kh, start_n, BLOCK_N)
                v_t = _load_rows(vh, start_n, BLOCK_N)
                scores = (q_t @ k_t.transpose(0, 2, 1)) * sm_scale + _load_bias(bias, start_m, start_n)
                m_new = np.maximum(m_i, scores.max(axis=2))
                # where every key so far is masked the shift is 0 (BUG when unguarded: exp2(-inf - -inf) = NaN)
                shift = np.where(m_new == -np.inf, np.float32(0), m_new) if check_inf else m_new
                p = np.exp2((scores - shift[:, :, None]) * np.float32(LOG2E))
                alpha = np.exp2((m_i - shift) * np.float32(LOG2E))
                l_i = l_i * alpha + p.sum(axis=2)
                acc = acc * alpha[:, :, None] + p @ v_t
                m_i = m_new
            o = acc / np.where(l_i == 0, np.float32(1), l_i)[:, :, None]  # a fully masked row: 0
            stop_m = min(start_m + BLOCK_M, s)
            out[:, start_m:stop_m] = o[:, : stop_m - start_m]
    return out.reshape(b, h, s, d)


def flash_attention(q, k, v, bias):
    return _flash_kernel(q, k, v, bias, check_inf=True)


def flash_attention_bug_block_all_masked(q, k, v, bias):
    return _flash_kernel(q, k, v, bias, check_inf=False)


def reference(q, k, v, bias):
    """The way a numpy user writes it: everything to float64 first, a max-subtracted softmax."""
    q, k, v, bias = (np.asarray(t, dtype=np.float64) for t in (q, k, v, bias))
    with np.errstate(all="ignore"):
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]) + bias
        m = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - np.where(m == -np.inf, 0.0, m))  # a fully masked row: e = 0, not NaN
        total = e.sum(axis=-1, keepdims=True)
        return (e @ v) / np.where(total == 0, 1.0, total)  # and its output 0
