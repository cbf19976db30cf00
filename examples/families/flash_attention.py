"""Family 2b - flash attention, out = softmax(q k^T / sqrt(D)) v, non-causal and causal.

q, k, v are [B, H, S, D]. The FlashAttention-2 forward of the Triton tutorial: the grid is
(S / BLOCK_M) query blocks x (B * H) heads (heads vectorised here); each program streams key/value
blocks of BLOCK_N = 64 once, keeping for each query row a running max m, a running sum l of
exp(s - m) and an output accumulator acc, all float32. When a block raises the max from m to m_new
the old l and acc are relative to the old max and are rescaled by alpha = exp2(m - m_new). The
scale is folded into the exp2 constant, qk_scale = (1 / sqrt(D)) * log2(e). With `causal = true`
the key loop stops after the diagonal block and keys after the query are masked
(`offs_m[:, None] >= offs_n[None, :]`). The output acc / l is cast to the input dtype at the store.

Buggy twins (one line each):

flash_attention_bug_no_rescale           (non-causal) forgets alpha: `l += rowsum(p)`,
                                         `acc += p @ v`. Shows only if S > BLOCK_N = 64 (with one key
                                         block nothing is carried), for every row whose max grows
                                         after the first block - nearly every random input.
flash_attention_causal_bug_mask_off_by_one  (causal) masks with `offs_m[:, None] > offs_n[None, :]`:
                                         the diagonal key is dropped. Row 0 has no key left (its
                                         max stays -inf: exp2(-inf - -inf) = NaN) and every other
                                         row misses its own key: always.

Reference: `reference` in attention.py (float64, max-subtracted softmax).
"""

import math

import numpy as np

BLOCK_M = 32
BLOCK_N = 64
LOG2E = 1.4426950408889634


def _load_rows(t, start, block):
    """Masked load of rows [start, start + block) of a [BH, S, D] tensor, float32, zero padded."""
    stop = min(start + block, t.shape[1])
    tile = np.zeros((t.shape[0], block, t.shape[2]), dtype=np.float32)
    tile[:, : stop - start] = t[:, start:stop]
    return tile


def _flash_kernel(q, k, v, causal, rescale=True, strict_mask=False):
    b, h, s, d = q.shape
    qh, kh, vh = (t.reshape(b * h, s, d) for t in (q, k, v))
    out = np.empty((b * h, s, d), dtype=q.dtype)
    qk_scale = np.float32((1.0 / math.sqrt(d)) * LOG2E)
    with np.errstate(all="ignore"):
        for start_m in range(0, s, BLOCK_M):
            offs_m = start_m + np.arange(BLOCK_M)
            q_t = _load_rows(qh, start_m, BLOCK_M)
            m_i = np.full((b * h, BLOCK_M), -np.inf, dtype=np.float32)
            l_i = np.zeros((b * h, BLOCK_M), dtype=np.float32)
            acc = np.zeros((b * h, BLOCK_M, d), dtype=np.float32)
            hi = min(start_m + BLOCK_M, s) if causal else s  # causal: no key block past the diagonal
            for start_n in range(0, hi, BLOCK_N):
                offs_n = start_n + np.arange(BLOCK_N)
                k_t = _load_rows(kh, start_n, BLOCK_N)
                v_t = _load_rows(vh, start_n, BLOCK_N)
                keep = np.broadcast_to(offs_n[None, :] < s, (BLOCK_M, BLOCK_N))
                if causal:
                    if strict_mask:
                        keep = keep & (offs_m[:, None] > offs_n[None, :])  # BUG: the diagonal is masked
                    else:
                        keep = keep & (offs_m[:, None] >= offs_n[None, :])
                scores = (q_t @ k_t.transpose(0, 2, 1)) * qk_scale
                scores = np.where(keep[None], scores, np.float32(-np.inf))
                m_new = np.maximum(m_i, scores.max(axis=2))
                p = np.exp2(scores - m_new[:, :, None])
                if rescale:
                    alpha = np.exp2(m_i - m_new)
                    l_i = l_i * alpha + p.sum(axis=2)
                    acc = acc * alpha[:, :, None] + p @ v_t
                else:
                    l_i = l_i + p.sum(axis=2)  # BUG: old l and acc are relative to the old max
                    acc = acc + p @ v_t
                m_i = m_new
            stop_m = min(start_m + BLOCK_M, s)
            out[:, start_m:stop_m] = (acc / l_i[:, :, None])[:, : stop_m - start_m]
    return out.reshape(b, h, s, d)


def flash_attention(q, k, v, causal=False):
    return _flash_kernel(q, k, v, causal)


def flash_attention_bug_no_rescale(q, k, v, causal=False):
    return _flash_kernel(q, k, v, causal, rescale=False)


def flash_attention_causal_bug_mask_off_by_one(q, k, v, causal=True):
    return _flash_kernel(q, k, v, causal, strict_mask=True)
