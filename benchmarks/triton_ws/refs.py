"""float64 references (numpy, in process): what the kernels should compute, exactly."""

import math

import numpy as np


def softmax(x):
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


def matmul(a, b):
    with np.errstate(invalid="ignore", over="ignore"):
        return a @ b


def layernorm(x, weight, bias, eps=1e-5):
    with np.errstate(all="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * weight + bias


def rmsnorm(x, weight, eps=1e-6):
    with np.errstate(all="ignore"):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def attention(q, k, v):
    with np.errstate(all="ignore"):
        scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v


def cumsum(x):
    return np.cumsum(x, axis=-1)
