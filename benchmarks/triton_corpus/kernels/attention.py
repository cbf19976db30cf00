"""Attention forward, out = softmax(q k^T / sqrt(D)) v over [B, H, S, D], for short sequences: one program per
block of 16 query rows and (batch, head) holds every key at once (BLOCK_S = next_power_of_2(S), at least 16),
float32 scores, keys past S masked to -inf, ``tl.dot(..., input_precision="ieee")``.

attention_bug_pad_keys   the padding keys are not masked: they load as 0, score 0, and add exp(0 - max) to each
                         row's sum. Shows iff S is not a power of two (or S < 16).
"""

import math

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK_M = 16


@triton.jit
def _kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, S, H, scale,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, NO_KEY_MASK: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
                mask=offs_m[:, None] < S, other=0.0).to(tl.float32)  # fmt: skip
    k = tl.load(k_ptr + b * skb + h * skh + offs_s[:, None] * sks + offs_d[None, :] * skd,
                mask=offs_s[:, None] < S, other=0.0).to(tl.float32)  # fmt: skip
    v = tl.load(v_ptr + b * svb + h * svh + offs_s[:, None] * svs + offs_d[None, :] * svd,
                mask=offs_s[:, None] < S, other=0.0).to(tl.float32)  # fmt: skip
    scores = tl.dot(q * scale, tl.trans(k), input_precision="ieee")
    if not NO_KEY_MASK:  # BUG (the twin): padding keys keep score 0
        scores = tl.where(offs_s[None, :] < S, scores, -float("inf"))
    p = tl.exp(scores - tl.max(scores, axis=1)[:, None])
    out = tl.dot(p, v, input_precision="ieee") / tl.sum(p, axis=1)[:, None]
    o = o_ptr + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :] * sod
    tl.store(o, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S)


def _attention(q, k, v, no_key_mask):
    B, H, S, D = q.shape
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    if B and H and S:
        grid = (triton.cdiv(S, BLOCK_M), B * H)
        _kernel[grid](
            q, k, v, o, S, H, 1.0 / math.sqrt(D), *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            D=D, BLOCK_M=BLOCK_M, BLOCK_S=max(16, triton.next_power_of_2(S)), NO_KEY_MASK=no_key_mask,
        )  # fmt: skip
    return o


def attention(q, k, v):
    return _attention(q, k, v, no_key_mask=False)


def attention_bug_pad_keys(q, k, v):
    return _attention(q, k, v, no_key_mask=True)
