"""Matmul and batched matmul: tiled output, a K loop with masked tiles (``other=0``), a float32 accumulator,
``tl.dot(..., input_precision="ieee")``, strides honoured, one cast at the store.

matmul                  32 x 32 output tiles, BLOCK_K = 32.
matmul_bug_acc_reset    ``acc = tl.zeros(...)`` inside the K loop: only the last K tile survives. Shows iff K > 32.
bmm                     [Bt, M, K] @ [Bt, K, N], 16 x 16 output tiles, BLOCK_K = 16, the batch on grid axis 2.
bmm_bug_k_floor         the K loop runs K // BLOCK_K times, not cdiv(K, BLOCK_K): the partial last K tile is
                        dropped. Shows iff K % 16 != 0 (every K < 16 gives zeros).
"""

import interp  # noqa: F401  (TRITON_INTERPRET before triton)
import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, RESET: tl.constexpr, K_FLOOR: tl.constexpr,
):  # fmt: skip
    pid_b = tl.program_id(2)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptr += pid_b * sab
    b_ptr += pid_b * sbb
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if K_FLOOR:  # noqa: SIM108
        k_tiles = K // BLOCK_K  # BUG: the partial last K tile is dropped
    else:
        k_tiles = tl.cdiv(K, BLOCK_K)
    for kt in range(0, k_tiles):
        kk = kt * BLOCK_K + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        if RESET:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # BUG: the accumulator restarts every K tile
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    c = c_ptr + pid_b * scb + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(a, b, c, block, reset=False, k_floor=False):
    bt, m, k = a.shape
    n = b.shape[2]
    if bt and m and n:
        grid = (triton.cdiv(m, block), triton.cdiv(n, block), bt)
        _matmul_kernel[grid](
            a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
            BLOCK_M=block, BLOCK_N=block, BLOCK_K=block, RESET=reset, K_FLOOR=k_floor,
        )  # fmt: skip
    return c


def _matmul(a, b, reset):
    c = torch.zeros((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    _launch(a.unsqueeze(0), b.unsqueeze(0), c.unsqueeze(0), 32, reset=reset)
    return c


def _bmm(a, b, k_floor):
    c = torch.zeros((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
    return _launch(a, b, c, 16, k_floor=k_floor)


def matmul(a, b):
    return _matmul(a, b, reset=False)


def matmul_bug_acc_reset(a, b):
    return _matmul(a, b, reset=True)


def bmm(a, b):
    return _bmm(a, b, k_floor=False)


def bmm_bug_k_floor(a, b):
    return _bmm(a, b, k_floor=True)
