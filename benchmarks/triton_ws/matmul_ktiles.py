"""Tiled matmul with small K tiles: 16 x 16 output tiles, K walked in steps of BLOCK_K = 8, float32 accumulator.

matmul_ktiles                 the K loop runs to K, the last partial tile masked (``other=0``).
matmul_ktiles_bug_k_tail      the loop bound is K rounded down to a multiple of BLOCK_K: the partial last K
                              tile is never added. Shows only if K % 8 != 0 (and every K < 8 gives zeros).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl

BLOCK_M = BLOCK_N = 16
BLOCK_K = 8


@triton.jit
def _kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DROP_TAIL: tl.constexpr,
):  # fmt: skip
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if DROP_TAIL:  # noqa: SIM108
        k_end = (K // BLOCK_K) * BLOCK_K  # BUG: the last partial K tile is skipped
    else:
        k_end = K
    for k0 in range(0, k_end, BLOCK_K):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _matmul(a: torch.Tensor, b: torch.Tensor, drop_tail: bool) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros((M, N), dtype=a.dtype, device=a.device)
    if M and N and K:
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        _kernel[grid](
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, DROP_TAIL=drop_tail,
        )  # fmt: skip
    return c


def matmul_ktiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _matmul(a, b, drop_tail=False)


def matmul_ktiles_bug_k_tail(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _matmul(a, b, drop_tail=True)
