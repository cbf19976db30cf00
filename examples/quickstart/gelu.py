"""GELU, tanh approximation (GPT-2 / BERT / `torch.nn.functional.gelu(x, approximate="tanh")`).

    gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

An elementwise kernel: a 1-D grid over the flattened tensor, BLOCK = 1024 elements per program,
masked loads/stores for the last partial block, float32 math, stored in the input dtype.

The reference is the same tanh formula in float64, because that is what this kernel promises.
The exact erf GELU, 0.5 * x * (1 + erf(x / sqrt(2))), differs from the tanh form by up to ~5e-4,
fifty times the float32 tolerance: comparing this kernel with it would need atol ~1e-3 and that
tolerance would hide real float32 bugs. Pick the reference that means what the kernel means.
"""

import numpy as np

BLOCK = 1024
SQRT_2_OVER_PI = 0.7978845608028654
COEF = 0.044715


def gelu_tanh_kernel(x):
    flat_in = x.reshape(-1)  # logical order; copies only if x is not contiguous
    flat_out = np.empty(flat_in.shape, dtype=x.dtype)
    n = flat_in.size
    c0, c1 = np.float32(SQRT_2_OVER_PI), np.float32(COEF)
    with np.errstate(all="ignore"):
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            v = np.zeros(BLOCK, dtype=np.float32)
            v[: stop - start] = flat_in[start:stop]  # masked load, other=0
            inner = c0 * (v + c1 * v * v * v)
            y = np.float32(0.5) * v * (np.float32(1.0) + np.tanh(inner))
            flat_out[start:stop] = y[: stop - start]  # masked store
    return flat_out.reshape(x.shape)


def reference(x):
    with np.errstate(all="ignore"):  # -inf gives -inf * 0 = NaN, as in the kernel
        return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + COEF * x**3)))
