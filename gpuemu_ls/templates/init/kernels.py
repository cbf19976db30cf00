"""A row softmax written the way a GPU kernel computes it: tiles of BLOCK columns, an online max/sum."""

import numpy as np

BLOCK = 256


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; accumulates in float32 and returns x's dtype."""
    rows, n = x.shape
    xf = np.asarray(x, dtype=np.float32)
    running_max = np.full(rows, -np.inf, dtype=np.float32)
    running_sum = np.zeros(rows, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, n, BLOCK):
            tile = xf[:, start : start + BLOCK]  # the last tile may be partial: only real columns are read
            new_max = np.maximum(running_max, tile.max(axis=1))
            shift = np.where(np.isneginf(new_max), 0.0, new_max)  # a fully masked row stays all -inf
            running_sum = running_sum * np.exp(running_max - shift) + np.exp(tile - shift[:, None]).sum(axis=1)
            running_max = new_max
        shift = np.where(np.isneginf(running_max), 0.0, running_max)
        out = np.exp(xf - shift[:, None]) / running_sum[:, None]
    return out.astype(x.dtype)
