"""attention with an additive mask, out = softmax(q k^T / sqrt(D) + bias) v, a PyTorch op.

q, k, v are [B, H, S, D]; bias is an additive [S, S] mask shared by every batch and head: finite
values (a relative-position bias) or -inf (a masked key). A query row whose bias is -inf everywhere
attends to nothing and its output is 0 (the contract FlashAttention and xformers keep; torch's
softmax alone would give NaN there).

The kernel is a two-pass tiled kernel written with torch tensor ops (what a Triton program does per
tile): the grid is (S / BLOCK_M) query blocks x (B * H) heads (heads vectorised here). Pass 1 walks
the key blocks of BLOCK_N = 16 and takes the row max of the masked scores; pass 2 walks them again
and accumulates p = exp(s - max), the row sum l and p @ v, all in float32. A row whose max is -inf
(fully masked) shifts by 0 so that exp(-inf - 0) = 0 rather than exp(-inf - -inf) = NaN, and its
output acc / l is defined as 0 (l = 0 there). Keys and queries past S are padding: masked loads
with 0 for q, k, v and -inf for the bias. One cast to the input dtype at the store.

Buggy twin (one line):

attention_bug_masked_row_nan   the store divides by l unguarded, acc / l: a fully masked query row
                               (bias -inf on the whole row) gives 0 / 0 = NaN where the reference
                               is 0. Shows whenever the bias has such a row (the `masked_rows`
                               distribution, in every thorough and quick run).

Reference: `reference` below, torch in float64 (`.double()`): torch.softmax, then fully masked rows
set to 0.
"""

import math

import torch

# Tiles this small cost more in thread hand-offs than they gain from a second intra-op thread, and the
# workers already run side by side: one thread per worker.
torch.set_num_threads(1)

BLOCK_M = 16
BLOCK_N = 16
NEG_INF = float("-inf")


def _load_rows(t, start, block):
    """Masked load of rows [start, start + block) of a [BH, S, D] tensor, float32, zero padded."""
    stop = min(start + block, t.shape[1])
    tile = torch.zeros((t.shape[0], block, t.shape[2]), dtype=torch.float32)
    tile[:, : stop - start] = t[:, start:stop]
    return tile


def _load_bias(bias, start_m, start_n):
    """Masked 2-D load of the bias tile, float32; lanes past S read -inf (padded keys are masked)."""
    s = bias.shape[0]
    stop_m, stop_n = min(start_m + BLOCK_M, s), min(start_n + BLOCK_N, s)
    tile = torch.full((BLOCK_M, BLOCK_N), NEG_INF, dtype=torch.float32)
    tile[: stop_m - start_m, : stop_n - start_n] = bias[start_m:stop_m, start_n:stop_n]
    return tile


def _scores(q_t, k_t, bias, scale, start_m, start_n):
    """Scaled scores of one (query block, key block) pair plus the bias tile, float32."""
    return (q_t @ k_t.transpose(1, 2)) * scale + _load_bias(bias, start_m, start_n)


def _attention_kernel(q, k, v, bias, guard_empty_rows):
    b, h, s, d = q.shape
    qh, kh, vh = (t.reshape(b * h, s, d) for t in (q, k, v))  # logical view per head
    out = torch.empty((b * h, s, d), dtype=q.dtype)
    scale = 1.0 / math.sqrt(d)
    for start_m in range(0, s, BLOCK_M):
        q_t = _load_rows(qh, start_m, BLOCK_M)
        # pass 1: the row max of the masked scores
        m_i = torch.full((b * h, BLOCK_M), NEG_INF, dtype=torch.float32)
        for start_n in range(0, s, BLOCK_N):
            s_t = _scores(q_t, _load_rows(kh, start_n, BLOCK_N), bias, scale, start_m, start_n)
            m_i = torch.maximum(m_i, s_t.amax(dim=2))
        m_safe = torch.where(m_i == NEG_INF, torch.zeros_like(m_i), m_i)  # a fully masked row shifts by 0
        # pass 2: exp, row sum and p @ v, all float32
        l_i = torch.zeros((b * h, BLOCK_M), dtype=torch.float32)
        acc = torch.zeros((b * h, BLOCK_M, d), dtype=torch.float32)
        for start_n in range(0, s, BLOCK_N):
            s_t = _scores(q_t, _load_rows(kh, start_n, BLOCK_N), bias, scale, start_m, start_n)
            p = torch.exp(s_t - m_safe[:, :, None])
            l_i += p.sum(dim=2)
            acc += p @ _load_rows(vh, start_n, BLOCK_N)
        if guard_empty_rows:
            o = acc / torch.where(l_i == 0, torch.ones_like(l_i), l_i)[:, :, None]  # fully masked: 0 / 1 = 0
        else:
            o = acc / l_i[:, :, None]  # BUG: a fully masked row is 0 / 0 = NaN
        stop_m = min(start_m + BLOCK_M, s)
        out[:, start_m:stop_m] = o[:, : stop_m - start_m]
    return out.reshape(b, h, s, d)


def attention(q, k, v, bias):
    return _attention_kernel(q, k, v, bias, guard_empty_rows=True)


def attention_bug_masked_row_nan(q, k, v, bias):
    return _attention_kernel(q, k, v, bias, guard_empty_rows=False)


def reference(q, k, v, bias):
    """The way a PyTorch user writes it: everything to float64, torch.softmax, fully masked rows to 0."""
    q, k, v, bias = (torch.from_numpy(t).double() for t in (q, k, v, bias))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    p = torch.softmax(scores, dim=-1)
    p = p.masked_fill(torch.isneginf(scores).all(dim=-1, keepdim=True), 0.0)  # nothing to attend to: 0
    return (p @ v).numpy()
