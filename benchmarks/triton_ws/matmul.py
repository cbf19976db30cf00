"""Tiled matmul as a real Triton kernel: BLOCK_M x BLOCK_N output tiles, a loop over K in BLOCK_K steps.

matmul                  the correct kernel: masks on every tail (M, N and K), real strides for
                        both operands, a float32 accumulator that *adds* each K tile
                        (``acc += tl.dot(a, b)``), one rounding to the output dtype at the end.
matmul_acc_overwrite    the accumulator is overwritten (``acc = tl.dot(a, b)``): only the last K
                        tile survives. Correct whenever K <= BLOCK_K = 16, so a small test shape
                        passes it; every K > 16 fails.

Triton's CPU interpreter (3.x) has no bfloat16 arithmetic (it holds bf16 as raw 16-bit integers),
so when interpreting, the tiles are upcast to float32 before ``tl.dot``; on a GPU they go to
``tl.dot`` as they are (it accumulates in float32 either way). ``input_precision="ieee"`` keeps
float32 products exact on GPUs that would otherwise use TF32.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    # Triton reads TRITON_INTERPRET when it decorates a function, its own library included: it must be
    # set before triton is first imported anywhere in the process.
    if "triton" in sys.modules:
        raise ImportError("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: set it in the env")
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
BLOCK_M = BLOCK_N = BLOCK_K = 16


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
    OVERWRITE_ACC: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if OVERWRITE_ACC:
            acc = tl.dot(a, b, input_precision="ieee")  # BUG: drops every earlier K tile
        else:
            acc += tl.dot(a, b, input_precision="ieee")
    c = acc.to(c_ptr.dtype.element_ty)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=mask)


def _matmul(a: torch.Tensor, b: torch.Tensor, overwrite_acc: bool) -> torch.Tensor:
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, f"inner dims differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        UPCAST=INTERPRET,
        OVERWRITE_ACC=overwrite_acc,
    )
    return c


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _matmul(a, b, overwrite_acc=False)


def matmul_acc_overwrite(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _matmul(a, b, overwrite_acc=True)
