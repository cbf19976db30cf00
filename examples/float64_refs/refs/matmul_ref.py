"""Float64 reference for matmul, C = A @ B (script protocol).

stdin : {"inputs": {"a": [M, K], "b": [K, N]}, "kwargs": {}}
stdout: {"outputs": {"result": [M, N] float64}}

Written the way most script references are: every input is decoded by its "dtype" field and
converted to float64 at once, whatever that dtype is, and the product is computed in float64.
"""

import base64
import json
import sys

import numpy as np


def decode(t):
    raw = base64.b64decode(t["data"])
    if t["dtype"] == "bfloat16":  # bf16 bits are the top half of a float32
        arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=np.dtype(t["dtype"]).newbyteorder("<"))
    return arr.reshape(t["shape"]).astype(np.float64)


def encode(a):
    a = np.ascontiguousarray(a, dtype="<f8")
    return {"shape": list(a.shape), "dtype": "float64", "data": base64.b64encode(a.tobytes()).decode("ascii")}


def main():
    inputs = json.load(sys.stdin)["inputs"]
    with np.errstate(all="ignore"):
        c = decode(inputs["a"]) @ decode(inputs["b"])
    json.dump({"outputs": {"result": encode(c)}}, sys.stdout)


if __name__ == "__main__":
    main()
