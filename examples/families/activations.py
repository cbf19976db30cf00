"""Family 10 - activations: GELU (tanh approximation), SiLU and SwiGLU.

Elementwise kernels: a 1-D grid over the flattened tensor (taken in logical order, so strides are
honoured), BLOCK = 1024 elements per program, masked loads/stores for the partial last block,
float32 math, the result cast to the input dtype at the store.

gelu    0.5 * x * (1 + tanh(k_beta * (x + 0.044715 * x^3))), k_beta = sqrt(2 / pi), written as in
        PyTorch's CUDA kernel: kBeta = M_SQRT2 * M_2_SQRTPI * 0.5. The reference is the same tanh
        formula in float64 (the erf GELU differs from it by up to ~5e-4, far beyond float32's
        tolerance: pick the reference that means what the kernel means).
silu    x * sigmoid(x), sigmoid(x) = 1 / (1 + exp(-x)) (exp(-x) = inf for x < -88.7 gives 1/inf = 0).
swiglu  inputs x (the value) and gate: silu(gate) * x, as in LLaMA's MLP (silu(x W1) * (x W3)).

Buggy twins (one line each):

gelu_bug_beta_constant  kBeta = M_SQRT1_2 * M_2_SQRTPI * 0.5 (M_SQRT1_2 picked for M_SQRT2): half of
                        sqrt(2 / pi). Wrong for every x away from 0 and from saturation: always.
                        (The textbook typo 0.0447 for 0.044715 changes gelu by at most ~9e-6, less
                        than float32's tolerance: it is not a bug any tolerance can catch.)
swiglu_bug_swapped      silu(x) * gate: the value and the gate swapped. Always.

Reference: `gelu_reference`, `silu_reference`, `swiglu_reference` below (float64).
"""

import math

import numpy as np

BLOCK = 1024
M_SQRT2 = math.sqrt(2.0)
M_SQRT1_2 = math.sqrt(0.5)
M_2_SQRTPI = 2.0 / math.sqrt(math.pi)
K_BETA = M_SQRT2 * M_2_SQRTPI * 0.5  # sqrt(2 / pi)
K_KAPPA = 0.044715


def _elementwise(fn, *xs):
    """Run fn on float32 blocks of the flattened inputs (logical order); store in the first input's dtype."""
    flats = [t.reshape(-1) for t in xs]  # logical order; copies only if a view is not contiguous
    out = np.empty(flats[0].shape, dtype=xs[0].dtype)
    n = flats[0].size
    with np.errstate(all="ignore"):
        for start in range(0, n, BLOCK):
            stop = min(start + BLOCK, n)
            blocks = []
            for f in flats:
                v = np.zeros(BLOCK, dtype=np.float32)  # masked load, other=0
                v[: stop - start] = f[start:stop]
                blocks.append(v)
            out[start:stop] = fn(*blocks)[: stop - start]  # masked store
    return out.reshape(xs[0].shape)


def _gelu(beta):
    b, k = np.float32(beta), np.float32(K_KAPPA)

    def f(v):
        return np.float32(0.5) * v * (np.float32(1) + np.tanh(b * (v + k * v * v * v)))

    return f


def _silu(v):
    return v * (np.float32(1) / (np.float32(1) + np.exp(-v)))


def gelu(x):
    return _elementwise(_gelu(K_BETA), x)


def gelu_bug_beta_constant(x):
    return _elementwise(_gelu(M_SQRT1_2 * M_2_SQRTPI * 0.5), x)  # BUG: M_SQRT1_2 for M_SQRT2


def silu(x):
    return _elementwise(_silu, x)


def swiglu(x, gate):
    return _elementwise(lambda v, g: _silu(g) * v, x, gate)


def swiglu_bug_swapped(x, gate):
    return _elementwise(lambda v, g: _silu(v) * g, x, gate)  # BUG: value and gate swapped


def gelu_reference(x):
    with np.errstate(all="ignore"):
        return 0.5 * x * (1.0 + np.tanh(K_BETA * (x + K_KAPPA * x**3)))


def silu_reference(x):
    with np.errstate(all="ignore"):
        return x / (1.0 + np.exp(-x))


def swiglu_reference(x, gate):
    with np.errstate(all="ignore"):
        return gate / (1.0 + np.exp(-gate)) * x
