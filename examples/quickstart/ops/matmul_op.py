"""Tiled matmul run as an op *script* (execution_mode = "script_based").

This stands for a kernel that lives outside the engine's process (a compiled extension, another
framework, a remote device). It speaks the script protocol:

stdin : {"inputs": {"a": [M, K], "b": [K, N]} in the case dtype, "kwargs": {}}
stdout: {"outputs": {"result": [M, N] in the same dtype}}

bfloat16 travels as raw bf16 bits and is decoded with ml_dtypes. The kernel is the Triton
tutorial's: 64 x 64 output tiles, BLOCK_K = 32, zero-padded masked loads, float32 accumulator,
one rounding to the output dtype at the store. Prints nothing but the answer on stdout.
"""

import base64
import json
import sys

import ml_dtypes
import numpy as np

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32

DTYPES = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def decode(t):
    raw = base64.b64decode(t["data"])
    return np.frombuffer(raw, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])


def encode(a):
    name = next(k for k, v in DTYPES.items() if v == a.dtype)
    a = np.ascontiguousarray(a)
    return {"shape": list(a.shape), "dtype": name, "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _cdiv(a, b):
    return -(-a // b)


def _load_tile(t, r0, c0, block_r, block_c):
    r1 = min(r0 + block_r, t.shape[0])
    c1 = min(c0 + block_c, t.shape[1])
    tile = np.zeros((block_r, block_c), dtype=np.float32)
    tile[: r1 - r0, : c1 - c0] = t[r0:r1, c0:c1]
    return tile


def matmul_kernel(a, b):
    m, k = a.shape
    _, n = b.shape
    c = np.empty((m, n), dtype=a.dtype)
    for pid_m in range(_cdiv(m, BLOCK_M)):
        for pid_n in range(_cdiv(n, BLOCK_N)):
            r0, c0 = pid_m * BLOCK_M, pid_n * BLOCK_N
            acc = np.zeros((BLOCK_M, BLOCK_N), dtype=np.float32)
            for k0 in range(0, k, BLOCK_K):
                acc += _load_tile(a, r0, k0, BLOCK_M, BLOCK_K) @ _load_tile(b, k0, c0, BLOCK_K, BLOCK_N)
            r1, c1 = min(r0 + BLOCK_M, m), min(c0 + BLOCK_N, n)
            c[r0:r1, c0:c1] = acc[: r1 - r0, : c1 - c0]
    return c


def main():
    request = json.loads(sys.stdin.read())
    a = decode(request["inputs"]["a"])
    b = decode(request["inputs"]["b"])
    json.dump({"outputs": {"result": encode(matmul_kernel(a, b))}}, sys.stdout)


if __name__ == "__main__":
    main()
