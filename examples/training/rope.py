"""Rotary position embedding as training libraries write it: q and k of shape (batch, heads, seq, head_dim)
are rotated by the (seq, head_dim / 2) cos and sin tables, one Triton program per (batch, position) for
all heads; the backward is the same rotation by -sin. gpuemu.toml points at the Functions (``RoPE.apply``)
and differentiates q and k.

RoPE                    the correct kernel: every offset comes from the tensors' own strides (batch, head,
                        position, element), so any layout works.
RoPEAssumedBatchStride  the kernel transposes to (batch, seq, heads, head_dim), calls ``.contiguous()`` and
                        walks rows as ``program * stride(1)``, assuming the batch stride is seq * stride(1).
                        ``.contiguous()`` is a no-op when seq is 1 (a size-1 dim's stride is free), so at
                        seq_len 1 with batch > 1 (decoding) every batch after the first reads the wrong
                        heads. A bug that shipped in a popular library, and outlived its fix.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        raise ImportError("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: set it in the env")
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl


@triton.jit
def _rope_one(X, XO, b, s, cos, sin, heads, dims, n_heads, half, x_b, x_h, x_s, x_d, o_b, o_h, o_s):
    mask = (heads < n_heads) & (dims < half)
    src = X + b * x_b + s * x_s + heads * x_h
    x1 = tl.load(src + dims * x_d, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + (dims + half) * x_d, mask=mask, other=0.0).to(tl.float32)
    dst = XO + b * o_b + s * o_s + heads * o_h
    tl.store(dst + dims, (x1 * cos - x2 * sin).to(XO.dtype.element_ty), mask=mask)
    tl.store(dst + dims + half, (x2 * cos + x1 * sin).to(XO.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    Q, K, QO, KO, Cos, Sin, seq_len, heads_q, heads_k, half,
    q_b, q_h, q_s, q_d, k_b, k_h, k_s, k_d, qo_b, qo_h, qo_s, ko_b, ko_h, ko_s, c_s, c_d, s_s, s_d,
    SIGN: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    b = pid // seq_len
    s = pid % seq_len
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    cos = tl.load(Cos + s * c_s + dims * c_d, mask=dims < half, other=0.0).to(tl.float32)
    sin = SIGN * tl.load(Sin + s * s_s + dims * s_d, mask=dims < half, other=0.0).to(tl.float32)
    _rope_one(Q, QO, b, s, cos, sin, heads, dims, heads_q, half, q_b, q_h, q_s, q_d, qo_b, qo_h, qo_s)
    _rope_one(K, KO, b, s, cos, sin, heads, dims, heads_k, half, k_b, k_h, k_s, k_d, ko_b, ko_h, ko_s)


def _rotate(q, k, cos, sin, sign, assume_batch_stride=False):
    batch, heads_q, seq, dim = q.shape
    heads_k = k.shape[1]
    half = dim // 2
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if q.numel() == 0 or k.numel() == 0:
        return qo, ko
    if assume_batch_stride:
        # BUG: rows are walked as pid * stride(1) of the (batch, seq, heads, dim) view, i.e. the batch
        # stride is assumed to be seq * stride(1); .contiguous() keeps a size-1 seq dim's stride as it is
        q = q.transpose(1, 2).contiguous()
        k = k.transpose(1, 2).contiguous()
        qs = (q.stride(1) * seq, q.stride(2), q.stride(1), q.stride(3))
        ks = (k.stride(1) * seq, k.stride(2), k.stride(1), k.stride(3))
    else:
        qs, ks = q.stride(), k.stride()
    _rope_kernel[(batch * seq,)](
        q, k, qo, ko, cos, sin, seq, heads_q, heads_k, half, *qs, *ks,
        qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
        cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        SIGN=sign, BLOCK_H=triton.next_power_of_2(max(heads_q, heads_k)), BLOCK_D=triton.next_power_of_2(half),
    )  # fmt: skip
    return qo, ko


class RoPE(torch.autograd.Function):
    ASSUME_BATCH_STRIDE = False

    @classmethod
    def forward(cls, ctx, q, k, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate(q, k, cos, sin, 1.0, cls.ASSUME_BATCH_STRIDE)

    @classmethod
    def backward(cls, ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        dq, dk = _rotate(dq, dk, cos, sin, -1.0, cls.ASSUME_BATCH_STRIDE)
        return dq, dk, None, None


class RoPEAssumedBatchStride(RoPE):
    ASSUME_BATCH_STRIDE = True
