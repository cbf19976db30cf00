"""float64 references (numpy, in process): what the kernels should compute, exactly."""

import math

import numpy as np

GELU_K = math.sqrt(2.0 / math.pi)


def add(x, y):
    return x + y


def axpy(x, y, alpha=0.5):
    with np.errstate(all="ignore"):
        return alpha * x + y


def add_relu(x, y):
    return np.maximum(x + y, 0.0)


def relu(x):
    return np.maximum(x, 0.0)


def gelu(x):
    with np.errstate(all="ignore"):
        return 0.5 * x * (1.0 + np.tanh(GELU_K * (x + 0.044715 * x**3)))


def silu(x):
    with np.errstate(all="ignore"):
        return x / (1.0 + np.exp(-x))


def sigmoid(x):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def leaky_relu(x, negative_slope=0.01):
    return np.where(x >= 0.0, x, x * negative_slope)


def clamp(x, lo=-1.0, hi=1.0):
    return np.minimum(np.maximum(x, lo), hi)


def row_sum(x):
    with np.errstate(all="ignore"):
        return x.sum(axis=-1)


def row_max(x):
    return x.max(axis=-1)


def row_mean(x):
    with np.errstate(all="ignore"):
        return x.mean(axis=-1)


def softmax(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x):
    with np.errstate(all="ignore"):
        z = x - x.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def layernorm(x, weight, bias, eps=1e-5):
    with np.errstate(all="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * weight + bias


def rmsnorm(x, weight, eps=1e-6):
    with np.errstate(all="ignore"):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def cross_entropy(logits, target):
    with np.errstate(all="ignore"):
        m = logits.max(axis=-1)
        s = np.exp(logits - m[:, None]).sum(axis=-1)
        x_t = logits[np.arange(logits.shape[0]), target.astype(np.int64)]
        return np.log(s) - (x_t - m)


def cumsum(x):
    with np.errstate(all="ignore"):
        return np.cumsum(x, axis=-1)


def matmul(a, b):
    with np.errstate(all="ignore"):
        return a @ b


def attention(q, k, v):
    with np.errstate(all="ignore"):
        scores = (q @ np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v


def transpose(x):
    return np.ascontiguousarray(x.T)


def embedding(weight, idx):
    return weight[idx.astype(np.int64)]
