"""Reference softmax in float64. Protocol: one JSON object on stdin, one on stdout."""

import base64
import json
import sys

import numpy as np

request = json.load(sys.stdin)
t = request["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype="<f8").reshape(t["shape"])
with np.errstate(invalid="ignore"):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True)
out = {"shape": list(y.shape), "dtype": "float64", "data": base64.b64encode(y.astype("<f8").tobytes()).decode()}
print(json.dumps({"outputs": {"result": out}}))
