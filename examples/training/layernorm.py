"""LayerNorm as a training library writes it: a Triton forward that saves mean and rstd, a Triton backward
that computes dx per row and dW, dB as per-program partial sums over blocks of rows, and the autograd
Function that ties them together. gpuemu.toml points at the Functions themselves (``LayerNorm.apply``).

LayerNorm                       the correct kernel: statistics in float32, padding lanes masked out of the
                                variance, dW and dB accumulated in float32.
LayerNormPartialBlockVariance   the partial-block variance: ``x - mean`` is not masked, so each padding lane
                                of the block (BLOCK = next power of two of N) adds ``mean**2`` to the
                                variance. Right whenever N is a power of two (every shape a library's own
                                tests used), wrong otherwise.
LayerNormLowPrecisionDW         dW and dB accumulated across rows in the input dtype: right in float32,
                                wrong in bfloat16 (8 bits of mantissa lose the small terms of a long sum),
                                and in float16 on long enough sums.

Without a GPU the kernels run on Triton's CPU interpreter (``TRITON_INTERPRET=1``), where gpuemu-ls makes
bfloat16 arithmetic round as a GPU does.
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

ROWS_PER_PROGRAM = 256  # the backward's dW/dB partial sums: one program per block of rows


@triton.jit
def _layer_norm_fwd(
    Y, X, W, B, Mean, Rstd, x_row, x_col, y_row, w_col, b_col, n_cols, eps,
    BLOCK: tl.constexpr, PARTIAL_VARIANCE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * x_row + cols * x_col, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    if PARTIAL_VARIANCE:  # noqa: SIM108 (one branch per variant reads better in a kernel)
        xc = x - mean  # BUG: padding lanes become -mean and their squares join the variance
    else:
        xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols * w_col, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols * b_col, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(Y + row * y_row + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def _layer_norm_bwd(
    DX, DW, DB, DY, X, W, Mean, Rstd, x_row, x_col, dy_row, dy_col, dx_row, w_col, n_rows, n_cols, rows_per_program,
    BLOCK: tl.constexpr, ACC_DTYPE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols * w_col, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=ACC_DTYPE)
    db = tl.zeros((BLOCK,), dtype=ACC_DTYPE)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        x = tl.load(X + row * x_row + cols * x_col, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * dy_row + cols * dy_col, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(DX + row * dx_row + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw += (dy * xhat).to(ACC_DTYPE)
        db += dy.to(ACC_DTYPE)
    tl.store(DW + pid * n_cols + cols, dw.to(DW.dtype.element_ty), mask=mask)
    tl.store(DB + pid * n_cols + cols, db.to(DB.dtype.element_ty), mask=mask)


def layer_norm_forward(x, w, b, eps, partial_variance=False):
    shape = x.shape
    n = shape[-1]
    x2 = x.reshape(-1, n)
    rows = x2.shape[0]
    y = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows and n:
        _layer_norm_fwd[(rows,)](
            y, x2, w, b, mean, rstd, x2.stride(0), x2.stride(1), y.stride(0), w.stride(0), b.stride(0), n, eps,
            BLOCK=triton.next_power_of_2(n), PARTIAL_VARIANCE=partial_variance,
        )  # fmt: skip
    return y.reshape(shape), x2, mean, rstd


def layer_norm_backward(dy, x2, w, b, mean, rstd, low_precision_dw=False):
    rows, n = x2.shape
    dy2 = dy.reshape(rows, n)
    dx = torch.empty((rows, n), dtype=x2.dtype, device=x2.device)
    programs = triton.cdiv(rows, ROWS_PER_PROGRAM) if rows else 0
    acc = x2.dtype if low_precision_dw else torch.float32
    dw_part = torch.zeros((programs, n), dtype=acc, device=x2.device)
    db_part = torch.zeros((programs, n), dtype=acc, device=x2.device)
    if rows and n:
        acc_tl = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[acc]
        _layer_norm_bwd[(programs,)](
            dx, dw_part, db_part, dy2, x2, w, mean, rstd, x2.stride(0), x2.stride(1), dy2.stride(0),
            dy2.stride(1), dx.stride(0), w.stride(0), rows, n, ROWS_PER_PROGRAM, BLOCK=triton.next_power_of_2(n),
            ACC_DTYPE=acc_tl,
        )  # fmt: skip
    dw = dw_part.to(torch.float32).sum(0).to(w.dtype)
    db = db_part.to(torch.float32).sum(0).to(b.dtype)
    return dx, dw, db


class LayerNorm(torch.autograd.Function):
    PARTIAL_VARIANCE = False
    LOW_PRECISION_DW = False

    @classmethod
    def forward(cls, ctx, x, w, b, eps=1e-5):
        y, x2, mean, rstd = layer_norm_forward(x, w, b, eps, cls.PARTIAL_VARIANCE)
        ctx.save_for_backward(x2, w, b, mean, rstd)
        ctx.x_shape = x.shape
        return y

    @classmethod
    def backward(cls, ctx, dy):
        x2, w, b, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(dy, x2, w, b, mean, rstd, cls.LOW_PRECISION_DW)
        return dx.reshape(ctx.x_shape), dw, db, None


class LayerNormPartialBlockVariance(LayerNorm):
    PARTIAL_VARIANCE = True


class LayerNormLowPrecisionDW(LayerNorm):
    LOW_PRECISION_DW = True
