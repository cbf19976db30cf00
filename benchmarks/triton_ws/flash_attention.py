"""FlashAttention forward, out = softmax(q k^T / sqrt(D)) v over [B, H, S, D]: one program per block of
BLOCK_M = 16 query rows and head, streaming key/value blocks of BLOCK_N = 16 with an online softmax (a
running max m, a running sum l and an accumulator acc, float32; exp2, with the scale 1/sqrt(D) * log2(e) applied to q).

flash_attention                  when a key block raises the max, l and acc are rescaled by
                                 alpha = exp2(m_old - m_new) before the block is added.
flash_attention_bug_no_rescale   acc is not rescaled (l is): the earlier blocks keep weights relative to
                                 an old max. Shows only if S > 16 (one key block carries nothing over).
"""

import math

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK_M = BLOCK_N = 16
LOG2E = 1.4426950408889634


@triton.jit
def _kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, S, H, qk_scale,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NO_RESCALE: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = (
        tl.load(
            q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
            mask=offs_m[:, None] < S,
            other=0.0,
        ).to(tl.float32)
        * qk_scale
    )  # scaled before the dot: q.k may pass the float32 max where q.k/sqrt(D) does not
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, S, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < S
        k = tl.load(k_ptr + b * skb + h * skh + offs_n[:, None] * sks + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + b * svb + h * svh + offs_n[:, None] * svs + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
        qk = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee")
        qk = tl.where(offs_n[None, :] < S, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if NO_RESCALE:
            acc = acc + tl.dot(p, v.to(tl.float32), input_precision="ieee")  # BUG: acc keeps the old max
        else:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    o_ptrs = o_ptr + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :] * sod
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, no_rescale: bool) -> torch.Tensor:
    B, H, S, D = q.shape
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    if B and H and S:
        grid = (triton.cdiv(S, BLOCK_M), B * H)
        _kernel[grid](
            q, k, v, o, S, H, (1.0 / math.sqrt(D)) * LOG2E, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NO_RESCALE=no_rescale,
        )  # fmt: skip
    return o


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _attention(q, k, v, no_rescale=False)


def flash_attention_bug_no_rescale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _attention(q, k, v, no_rescale=True)
