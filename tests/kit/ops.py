"""Common op sources and references (correct and buggy twins) and the gpuemu.toml text that declares them.

``op_toml`` writes one ``[[ops]]`` entry and ``project_toml`` a workspace header, so a test states only
what its ops have of their own; the module-level strings are op files and references several suites use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: dims given as (min, max, default) are written as ``{ min = .., max = .., default = .. }``
Range = tuple[int, int, int]


def toml_value(value: Any) -> str:
    """``value`` as a TOML value: strings, numbers, booleans, lists, (min, max, default) ranges, inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple) and len(value) == 3:
        lo, hi, default = value
        return f"{{ min = {lo}, max = {hi}, default = {default} }}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def _table(header: str, entries: Mapping[str, Any]) -> list[str]:
    return [header, *(f"{k} = {toml_value(v)}" for k, v in entries.items())]


def op_toml(
    name: str,
    *,
    module: str | None = None,
    reference: str | None = None,
    inputs: Mapping[str, list[str] | Mapping[str, Any]] | None = None,
    dims: Mapping[str, Any] | None = None,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    extra: str = "",
    **keys: Any,
) -> str:
    """One ``[[ops]]`` entry: name, module, reference, ``keys``, raw ``extra`` lines, then its tables.

    ``inputs`` maps an input to its shape (or to its whole table, e.g. ``{"shape": [..], "dtype": ..}``);
    the default is one input ``x`` of shape ``[B, N]``; ``{}`` declares none. ``dims`` values are ints,
    lists of sizes or (min, max, default) ranges. ``tables`` adds ``[ops.NAME]`` tables (kwargs, tolerances).
    """
    lines = ["", "[[ops]]", f"name = {toml_value(name)}"]
    if module is not None:
        lines.append(f"module = {toml_value(module)}")
    if reference is not None:
        lines.append(f"reference = {toml_value(reference)}")
    lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    if extra:
        lines.append(extra.strip("\n"))
    for inp, spec in ({"x": ["B", "N"]} if inputs is None else inputs).items():
        lines += _table(f"[ops.inputs.{inp}]", spec if isinstance(spec, Mapping) else {"shape": spec})
    if dims:
        lines += _table("[ops.dims]", dims)
    for table, entries in (tables or {}).items():
        lines += _table(f"[ops.{table}]", entries)
    return "\n".join(lines) + "\n"


def kernel_toml(name: str, source: str, checks: Mapping[str, Any] | None = None, **keys: Any) -> str:
    """One ``[[kernels]]`` entry: name, source, ``keys``, then ``checks`` as its ``[kernels.artifact_checks]``."""
    lines = ["", "[[kernels]]", f"name = {toml_value(name)}", f"source = {toml_value(source)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    if checks:
        lines += _table("[kernels.artifact_checks]", checks)
    return "\n".join(lines) + "\n"


def project_toml(name: str | None = None, **sections: Mapping[str, Any]) -> str:
    """A gpuemu.toml header: ``[project] name`` (when given), then one table per keyword.

    ``project_toml("t", validation={"dtypes": ["float32"]}, ci_quick={"iterations": 4})``; an underscore
    in a keyword is a dot in the table name (``ci_quick`` is ``[ci.quick]``).
    """
    parts = [] if name is None else [f"[project]\nname = {toml_value(name)}\n"]
    parts += ["\n".join(_table(f"[{key.replace('_', '.')}]", entries)) + "\n" for key, entries in sections.items()]
    return "\n".join(parts)


# --- references and ops (numpy) ----------------------------------------------------------------------
#: references: a float64-free numpy softmax over an axis, and x + alpha * y
SOFTMAX_REF = """
import numpy as np


def softmax(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=axis, keepdims=True)


def scaled_add(x, y, alpha=1.0):
    return x + alpha * y
"""

#: a correct softmax (float32 math, one rounding) and its twin that forgets to subtract the row max
NUMPY_OPS = """
import numpy as np


def softmax(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf - xf.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def softmax_no_max(x, axis=-1):
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
"""


def np_softmax(inputs: dict[str, Any], axis: int = -1) -> Any:
    """A correct softmax for run_op (numpy): float32 math, rounded once to the input dtype."""
    import numpy as np

    x = inputs["x"]
    with np.errstate(invalid="ignore", over="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf - xf.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def np_softmax_no_max(inputs: dict[str, Any], axis: int = -1) -> Any:
    """The classic bug: exp without subtracting the row max overflows on large values."""
    import numpy as np

    x = inputs["x"]
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


#: ``double`` and its float64 reference (a correct op)
DOUBLE_PY = """import numpy as np


def double(x):
    return x * 2


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


def identity_py(*params: str) -> str:
    """An ops.py whose ``op`` and ``ref`` take ``params`` and return the first (for plans and inputs only)."""
    sig = ", ".join(params)
    return f"def op({sig}):\n    return {params[0]}\n\ndef ref({sig}):\n    return {params[0]}\n"


#: a script reference (``reference = "refs/ref.py"``): the case as JSON on stdin, 2 * x as float64 on stdout
DOUBLE_REF_SCRIPT = """import base64
import json
import sys

import numpy as np

req = json.load(sys.stdin)
x = req["inputs"]["x"]
a = np.frombuffer(base64.b64decode(x["data"]), dtype=x["dtype"]).reshape(x["shape"]) * 2.0
print(json.dumps({"outputs": {"result": {"shape": list(a.shape), "dtype": "float64",
                                         "data": base64.b64encode(a.tobytes()).decode()}}}))
"""


#: A softmax as an ``autograd.Function`` (source for a workspace's ops.py, after ``import torch``): a correct
#: backward, or with ``bug`` one of "ones" (the upstream taken to be ones), "jacobian" (the Jacobian's second
#: term forgotten), "corner" (one element of the gradient doubled).
SOFTMAX_FUNCTION = """
class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bug=None):
        p = torch.softmax(x.float(), -1)
        ctx.save_for_backward(p)
        ctx.bug = bug
        return p.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        gf = g.float()
        if ctx.bug == "ones":
            gf = torch.ones_like(gf)
        if ctx.bug == "jacobian":  # forgot the second term: p * g instead of p * (g - sum(g * p))
            return (p * gf).to(g.dtype), None
        gx = p * (gf - (gf * p).sum(-1, keepdim=True))
        if ctx.bug == "corner":  # one element of the gradient wrong: the last row's last column doubled
            gx[-1, -1] *= 2
        return gx.to(g.dtype), None
"""
