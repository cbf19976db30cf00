"""Float64 reference for c = a @ b (script protocol).

stdin : {"inputs": {"a": [M, K], "b": [K, N]} as float64, "kwargs": {}}
stdout: {"outputs": {"result": [M, N] float64}}

Plain Python + numpy only; prints nothing but the answer on stdout.
"""

import base64
import json
import sys

import numpy as np


def decode(t):
    raw = base64.b64decode(t["data"])
    if t["dtype"] == "bfloat16":  # raw bf16 bits are the top half of a float32
        arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=np.dtype(t["dtype"]).newbyteorder("<"))
    # compute in the precision given: float64 normally; float32 when gpuemu evaluates the reference in a
    # kernel's working precision to tell an inherent overflow from a bug (docs/verdicts.md)
    return arr.reshape(t["shape"]).astype(np.float32 if arr.dtype.itemsize <= 4 else np.float64)


def encode(a):
    name = "float32" if a.dtype == np.float32 else "float64"
    a = np.ascontiguousarray(a, dtype="<f4" if name == "float32" else "<f8")
    return {"shape": list(a.shape), "dtype": name, "data": base64.b64encode(a.tobytes()).decode("ascii")}


def main():
    request = json.loads(sys.stdin.read())
    a = decode(request["inputs"]["a"])
    b = decode(request["inputs"]["b"])
    json.dump({"outputs": {"result": encode(a @ b)}}, sys.stdout)


if __name__ == "__main__":
    main()
