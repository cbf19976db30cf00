"""Bug class 5 - contiguity assumed, strides ignored.

Per-row absmax scaling, y[r, :] = x[r, :] / max(|x[r, :]|) - the first step of row-wise FP8/int8
quantisation. Written the way a kernel sees its input: a base pointer into global memory plus
strides, read with pointer arithmetic `ptr + row * stride_row + col * stride_col` over column tiles
of BLOCK = 256 lanes (masked loads for the partial last tile). The output is a fresh packed
tensor.

rowscale_strides     never receives x.stride(): it assumes a packed row-major tensor
                     (stride_row = N, stride_col = 1), like a kernel launched with `x.data_ptr()`
                     and no `.contiguous()` on the host side.
rowscale_strides_ok  passes the real strides of x. This is the only difference.

Shows only for non-contiguous inputs (layouts `transposed` and `strided`) with more than one row
and column: a transposed view reads the rows in the wrong order, a strided view reads the gaps
(poison) between its elements. Reference: `reference` below (float64).
"""

import numpy as np

BLOCK = 256


class _RawPointer:
    """[lo, lo + nbytes) of an allocation, exposed as bytes (keeps the owner alive)."""

    def __init__(self, lo, nbytes, owner):
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (lo, True), "version": 3}
        self.owner = owner


def _global_memory(t):
    """The allocation `t` lives in, as a flat 1-D array of t's dtype, and the element offset of
    t's first element in it: what a kernel gets from `t.data_ptr()`."""
    root = t
    while isinstance(root.base, np.ndarray):
        root = root.base
    lo, hi = np.lib.array_utils.byte_bounds(root)
    ptr = t.__array_interface__["data"][0]
    lo += (ptr - lo) % t.itemsize  # align the flat view on t's element grid
    n = (hi - lo) // t.itemsize
    raw = np.asarray(_RawPointer(lo, n * t.itemsize, root))
    return raw.view(t.dtype), (ptr - lo) // t.itemsize


def _load(memory, offsets, mask, other):
    """tl.load(ptr + offsets, mask=mask, other=other), bounds-checked against the allocation."""
    in_alloc = (offsets >= 0) & (offsets < memory.size)
    ok = mask & in_alloc
    vals = memory[np.where(ok, offsets, 0)].astype(np.float32)
    return np.where(ok, vals, np.float32(other))


def _rowscale_kernel(x, use_strides):
    rows, n = x.shape
    memory, base = _global_memory(x)
    if use_strides:
        stride_row, stride_col = (s // x.itemsize for s in x.strides)  # FIX: the real strides
    else:
        stride_row, stride_col = n, 1  # BUG: assumes a packed row-major tensor
    out = np.empty((rows, n), dtype=x.dtype)
    r = np.arange(rows)[:, None]
    with np.errstate(all="ignore"):
        amax = np.zeros(rows, dtype=np.float32)
        for start in range(0, n, BLOCK):
            cols = start + np.arange(BLOCK)[None, :]
            offsets = base + r * stride_row + cols * stride_col
            tile = _load(memory, offsets, cols < n, 0.0)
            amax = np.maximum(amax, np.abs(tile).max(axis=1))
        for start in range(0, n, BLOCK):
            cols = start + np.arange(BLOCK)[None, :]
            offsets = base + r * stride_row + cols * stride_col
            tile = _load(memory, offsets, cols < n, 0.0)
            stop = min(start + BLOCK, n)
            out[:, start:stop] = (tile / amax[:, None])[:, : stop - start]
    return out


def rowscale_strides(x):
    return _rowscale_kernel(x, use_strides=False)


def rowscale_strides_ok(x):
    return _rowscale_kernel(x, use_strides=True)


def reference(x):
    with np.errstate(all="ignore"):
        return x / np.abs(x).max(axis=-1, keepdims=True)
