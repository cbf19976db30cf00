"""Family 2a - attention, out = softmax(q k^T / sqrt(D)) v, non-causal and causal.

q, k, v are [B, H, S, D]. A two-pass tiled kernel (the "materialise nothing, recompute scores"
way, without an online softmax): the grid is (S / BLOCK_M) query blocks x (B * H) heads (heads
vectorised here). Pass 1 walks the key blocks of BLOCK_N = 32 and takes the row max of the scaled
scores; pass 2 walks them again and accumulates p = exp(s - max), the row sum of p and p @ v in
float32. The output is acc / sum, cast to the input dtype at the store. Keys past S are masked to
-inf; with `causal = true` keys after the query (j > i) are masked too, so row i sees keys 0..i.
Padded query rows (past S) are computed and never stored.

Buggy twin (one line):

attention_bug_missing_scale   the scores are q k^T, the 1/sqrt(D) factor dropped: softmax at
                              temperature 1 instead of sqrt(D). Shows only if S > 1 (with one key the
                              softmax is 1 whatever the scale).

Reference: `reference` below (float64, max-subtracted softmax).
"""

import math

import numpy as np

BLOCK_M = 32
BLOCK_N = 32


def _load_rows(t, start, block):
    """Masked load of rows [start, start + block) of a [BH, S, D] tensor, float32, zero padded."""
    stop = min(start + block, t.shape[1])
    tile = np.zeros((t.shape[0], block, t.shape[2]), dtype=np.float32)
    tile[:, : stop - start] = t[:, start:stop]
    return tile


def _scores(q_t, k_t, scale, start_m, start_n, s, causal):
    """Scaled scores of one (query block, key block) pair, masked to -inf where a key is out of range."""
    offs_m = start_m + np.arange(BLOCK_M)
    offs_n = start_n + np.arange(BLOCK_N)
    keep = np.broadcast_to(offs_n[None, :] < s, (BLOCK_M, BLOCK_N))
    if causal:
        keep = keep & (offs_m[:, None] >= offs_n[None, :])  # row i sees keys 0..i
    scores = (q_t @ k_t.transpose(0, 2, 1)) * scale
    return np.where(keep[None], scores, np.float32(-np.inf))


def _attention_kernel(q, k, v, causal, apply_scale):
    b, h, s, d = q.shape
    qh, kh, vh = (t.reshape(b * h, s, d) for t in (q, k, v))  # logical view per head
    out = np.empty((b * h, s, d), dtype=q.dtype)
    # BUG: scale = 1, the 1/sqrt(D) forgotten.
    scale = np.float32(1.0 / math.sqrt(d)) if apply_scale else np.float32(1.0)
    with np.errstate(all="ignore"):
        for start_m in range(0, s, BLOCK_M):
            q_t = _load_rows(qh, start_m, BLOCK_M)
            # pass 1: row max of the scores
            m_i = np.full((b * h, BLOCK_M), -np.inf, dtype=np.float32)
            for start_n in range(0, s, BLOCK_N):
                k_t = _load_rows(kh, start_n, BLOCK_N)
                m_i = np.maximum(m_i, _scores(q_t, k_t, scale, start_m, start_n, s, causal).max(axis=2))
            # pass 2: exp, row sum and p @ v, all float32
            l_i = np.zeros((b * h, BLOCK_M), dtype=np.float32)
            acc = np.zeros((b * h, BLOCK_M, d), dtype=np.float32)
            for start_n in range(0, s, BLOCK_N):
                k_t = _load_rows(kh, start_n, BLOCK_N)
                v_t = _load_rows(vh, start_n, BLOCK_N)
                p = np.exp(_scores(q_t, k_t, scale, start_m, start_n, s, causal) - m_i[:, :, None])
                l_i += p.sum(axis=2)
                acc += p @ v_t
            stop_m = min(start_m + BLOCK_M, s)
            out[:, start_m:stop_m] = (acc / l_i[:, :, None])[:, : stop_m - start_m]
    return out.reshape(b, h, s, d)


def attention(q, k, v, causal=False):
    return _attention_kernel(q, k, v, causal, apply_scale=True)


def attention_bug_missing_scale(q, k, v, causal=False):
    return _attention_kernel(q, k, v, causal, apply_scale=False)


def reference(q, k, v, causal=False):
    s, d = q.shape[-2], q.shape[-1]
    with np.errstate(all="ignore"):
        scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(d)
        if causal:
            scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v
