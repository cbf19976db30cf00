"""GEGLU (``gelu_tanh(a) * b``) as training libraries write it: the GELU in float32 through libdevice ``tanh``,
the gate product in the input dtype, and a backward that recomputes the GELU instead of saving it.
gpuemu.toml points at the Functions (``GEGLU.apply``) and differentiates a and b.

GEGLU             the correct kernel.
GEGLUOnesUpstream the backward drops the upstream gradient (computes d c / d a, not dL/dc * d c / d a): right
                  for a test that calls ``c.sum().backward()`` or passes ``grad_output = ones_like(c)``,
                  wrong for any real loss.

Under Triton's CPU interpreter, libdevice functions return None and bfloat16 products are computed on the
raw bits; gpuemu-ls's workers give the interpreter libdevice and GPU bfloat16 rounding, so this module runs
unchanged.
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
from triton.language.extra.libdevice import tanh

SQRT_2_OVER_PI = 0.7978845608028654


@triton.jit
def _geglu_fwd(A, B, C, a_row, a_col, b_row, b_col, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * a_row + cols * a_col, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * b_row + cols * b_col, mask=mask, other=0.0)
    gelu = 0.5 * a * (1 + tanh(SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)))
    c = gelu.to(b.dtype) * b  # the gate product in the input dtype, as the library computes it
    tl.store(C + row * n_cols + cols, c, mask=mask)


@triton.jit
def _geglu_bwd(
    DC, A, B, DA, DB, dc_row, dc_col, a_row, a_col, b_row, b_col, n_cols, BLOCK: tl.constexpr,
    ONES_UPSTREAM: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if ONES_UPSTREAM:
        dc = tl.full((BLOCK,), 1.0, tl.float32)  # BUG: the upstream gradient is taken to be ones
    else:
        dc = tl.load(DC + row * dc_row + cols * dc_col, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(A + row * a_row + cols * a_col, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * b_row + cols * b_col, mask=mask, other=0.0).to(tl.float32)
    inner = SQRT_2_OVER_PI * (a + 0.044715 * a * a * a)
    t = tanh(inner)
    gelu = 0.5 * a * (1 + t)
    dgelu = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * a * a)
    tl.store(DA + row * n_cols + cols, (dc * b * dgelu).to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + row * n_cols + cols, (dc * gelu).to(DB.dtype.element_ty), mask=mask)


def _rows(t):
    return t.reshape(-1, t.shape[-1])


class GEGLU(torch.autograd.Function):
    ONES_UPSTREAM = False

    @staticmethod
    def forward(ctx, a, b):
        a2, b2 = _rows(a), _rows(b)
        rows, n = a2.shape
        c = torch.empty((rows, n), dtype=a.dtype, device=a.device)
        if rows and n:
            _geglu_fwd[(rows,)](
                a2, b2, c, a2.stride(0), a2.stride(1), b2.stride(0), b2.stride(1), n, BLOCK=triton.next_power_of_2(n)
            )
        ctx.save_for_backward(a, b)
        return c.reshape(a.shape)

    @classmethod
    def backward(cls, ctx, dc):
        a, b = ctx.saved_tensors
        a2, b2, dc2 = _rows(a), _rows(b), _rows(dc)
        rows, n = a2.shape
        da = torch.empty((rows, n), dtype=a.dtype, device=a.device)
        db = torch.empty((rows, n), dtype=b.dtype, device=b.device)
        if rows and n:
            _geglu_bwd[(rows,)](
                dc2, a2, b2, da, db, dc2.stride(0), dc2.stride(1), a2.stride(0), a2.stride(1), b2.stride(0),
                b2.stride(1), n, BLOCK=triton.next_power_of_2(n), ONES_UPSTREAM=cls.ONES_UPSTREAM,
            )  # fmt: skip
        return da.reshape(a.shape), db.reshape(b.shape)


class GEGLUOnesUpstream(GEGLU):
    ONES_UPSTREAM = True
