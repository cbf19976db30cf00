"""float64 references (numpy, in process): what the kernels should compute, exactly."""

import numpy as np


def softmax(x):
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


def matmul(a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        return a @ b
