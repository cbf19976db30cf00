"""The kernels of the bf16 interpreter self-test (:func:`triton_interp.self_test`): module level, as Triton needs
its kernels' names (``tl``, ``libdevice``) in their globals. Imported only where kernels are interpreted."""

import triton
import triton.language as tl
from triton.language.extra import libdevice

#: Elements per test vector (and the side of the dot's matrices: tl.dot needs 16 at least).
N = 16


@triton.jit
def elementwise(x_ptr, y_ptr, o_ptr, f_ptr, i_ptr, r_ptr, s_ptr, m_ptr, n: tl.constexpr):
    offs = tl.arange(0, n)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(o_ptr + offs, x * 3.0 + y)
    tl.store(f_ptr + offs, tl.fma(x, y, x))
    tl.store(i_ptr + offs, (x * 4.0).to(tl.int32))
    tl.store(r_ptr + offs, libdevice.rsqrt((tl.abs(x) + 1.0).to(tl.float32)))  # libdevice takes fp32/fp64
    tl.store(s_ptr, tl.sum(x, axis=0))
    tl.store(m_ptr, tl.max(-tl.abs(x), axis=0))


@triton.jit
def dot(a_ptr, b_ptr, c_ptr, n: tl.constexpr):
    r = tl.arange(0, n)
    a = tl.load(a_ptr + r[:, None] * n + r[None, :])
    b = tl.load(b_ptr + r[:, None] * n + r[None, :])
    tl.store(c_ptr + r[:, None] * n + r[None, :], tl.dot(a, b))
