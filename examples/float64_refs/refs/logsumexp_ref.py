"""Float64 reference for logsumexp over the last axis (script protocol).

stdin : {"inputs": {"x": [B, N]}, "kwargs": {}}
stdout: {"outputs": {"result": [B] float64}}

Written the way most script references are: the input is decoded by its "dtype" field and converted
to float64 at once, whatever that dtype is. max-subtracted, with torch.logsumexp's rule for an
infinite max (shift by 0: a row of -inf gives -inf, a row holding +inf gives +inf).
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
    x = decode(json.load(sys.stdin)["inputs"]["x"])
    with np.errstate(all="ignore"):
        m = x.max(axis=-1)
        m = np.where(np.isinf(m), 0.0, m)
        out = m + np.log(np.exp(x - m[:, None]).sum(axis=-1))
    json.dump({"outputs": {"result": encode(out)}}, sys.stdout)


if __name__ == "__main__":
    main()
