"""Bug class 4 - missing softmax scale.

FlashAttention-style forward pass out = softmax(q k^T / sqrt(D)) v, non-causal, q, k, v of shape
[B, H, S, D]. The grid is (S / BLOCK_M) query blocks x (B * H) heads (heads vectorised here); each
program streams key/value blocks of BLOCK_N with an online softmax in float32. As in the Triton
tutorial the scale is folded into the exp2 constant: qk_scale = sm_scale * log2(e), p = exp2(s -
m) with s = q k^T * qk_scale. Keys past S are masked to -inf; padded query rows are never stored.

attention_missing_scale     sets qk_scale = log2(e): the 1/sqrt(D) factor is lost when folding
                            the constants, which is softmax at temperature 1 instead of sqrt(D).
attention_missing_scale_ok  qk_scale = (1 / sqrt(D)) * log2(e). This is the only difference.

Shows nearly always (any S > 1): only a loose tolerance would hide it.
Reference: refs/attention_ref.py (float64).
"""

import math

import numpy as np

BLOCK_M = 64
BLOCK_N = 64
LOG2E = 1.4426950408889634


def _load_rows(t, start, block):
    """Masked load of rows [start, start + block) of a [BH, S, D] tensor, float32, zero padded."""
    stop = min(start + block, t.shape[1])
    tile = np.zeros((t.shape[0], block, t.shape[2]), dtype=np.float32)
    tile[:, : stop - start] = t[:, start:stop]
    return tile


def _attention_kernel(q, k, v, apply_sm_scale):
    b, h, s, d = q.shape
    qh, kh, vh = (t.reshape(b * h, s, d) for t in (q, k, v))  # logical view per head
    out = np.empty((b * h, s, d), dtype=q.dtype)
    sm_scale = 1.0 / math.sqrt(d)
    # FIX: qk_scale = sm_scale * log2(e).  BUG: sm_scale is dropped while folding log2(e) in.
    qk_scale = np.float32(sm_scale * LOG2E) if apply_sm_scale else np.float32(LOG2E)
    with np.errstate(all="ignore"):
        for start_m in range(0, s, BLOCK_M):
            q_t = _load_rows(qh, start_m, BLOCK_M)
            m_i = np.full((b * h, BLOCK_M), -np.inf, dtype=np.float32)
            l_i = np.zeros((b * h, BLOCK_M), dtype=np.float32)
            acc = np.zeros((b * h, BLOCK_M, d), dtype=np.float32)
            for start_n in range(0, s, BLOCK_N):
                k_t = _load_rows(kh, start_n, BLOCK_N)
                v_t = _load_rows(vh, start_n, BLOCK_N)
                key_ok = (start_n + np.arange(BLOCK_N)) < s
                scores = (q_t @ k_t.transpose(0, 2, 1)) * qk_scale
                scores = np.where(key_ok[None, None, :], scores, np.float32(-np.inf))
                m_new = np.maximum(m_i, scores.max(axis=2))
                alpha = np.exp2(m_i - m_new)
                p = np.exp2(scores - m_new[:, :, None])
                l_i = l_i * alpha + p.sum(axis=2)
                acc = acc * alpha[:, :, None] + p @ v_t
                m_i = m_new
            stop_m = min(start_m + BLOCK_M, s)
            out[:, start_m:stop_m] = (acc / l_i[:, :, None])[:, : stop_m - start_m]
    return out.reshape(b, h, s, d)


def attention_missing_scale(q, k, v):
    return _attention_kernel(q, k, v, apply_sm_scale=False)


def attention_missing_scale_ok(q, k, v):
    return _attention_kernel(q, k, v, apply_sm_scale=True)
