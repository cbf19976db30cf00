"""Backward validation against a numpy reference without gradients (issue 26 item 1): with ``grad`` and no
``reference_grad``, each gradient is judged along random directions against central finite differences of
the float64 reference (Richardson-extrapolated, the difference's own error in the bound). A correct backward
passes in float32, float16 and bfloat16; backward bugs fail (a ones upstream, a missing Jacobian term, a
gradient wrong in one element only); cases with non-finite inputs are not judged, never passed; no element
is named (a failure says which directions and by how much)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kit.cli import gpuemu, jdoc
from kit.ops import SOFTMAX_FUNCTION, op_toml, project_toml
from kit.workspace import write_ws

pytest.importorskip("torch")

OPS = (
    """
import numpy as np
import torch
"""
    + SOFTMAX_FUNCTION
    + """


def softmax(x):
    return Softmax.apply(x)


def softmax_ones(x):
    return Softmax.apply(x, "ones")


def softmax_jacobian(x):
    return Softmax.apply(x, "jacobian")


def softmax_corner(x):
    return Softmax.apply(x, "corner")


def softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
"""
)

DTYPES = ["float32", "float16", "bfloat16"]
DIMS = {"B": (1, 8, 4), "N": (1, 100, 32)}
BUGS = ("softmax_ones", "softmax_jacobian", "softmax_corner")


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    toml = project_toml(project={"name": "fd", "framework": "pytorch"}, validation={"dtypes": DTYPES, "iterations": 16})
    for name in ("softmax", *BUGS):
        toml += op_toml(name, module=f"ops:{name}", reference="ops:softmax_ref", grad=["x"], dims=DIMS)
    root = write_ws(tmp_path_factory.mktemp("fd"), toml, {"ops.py": OPS})
    return jdoc(gpuemu("test", "--format", "json", "--no-progress", cwd=root))


def _op(doc: dict, name: str) -> dict:
    return next(o for o in doc["ops"] if o["name"] == name)


def test_a_correct_backward_passes_against_finite_differences(doc: dict) -> None:
    op = _op(doc, "softmax")
    assert op["status"] in ("passed", "edge"), op["failures"][:2]
    assert op["failed"] == 0 and op["errors"] == 0


@pytest.mark.parametrize("name", BUGS)
def test_each_backward_bug_fails_along_some_direction(doc: dict, name: str) -> None:
    op = _op(doc, name)
    bugs = [f for f in op["failures"] if f["status"] == "failed"]
    assert op["status"] == "failed" and bugs, op["message"]
    assert {f["output"] for f in bugs} == {"grad_x"}
    assert all("directional derivatives off" in f["message"] for f in bugs), bugs[0]["message"]
    if name != "softmax_corner":  # one element: visible where it weighs enough, not in every dtype
        assert len({f["dtype"] for f in bugs}) >= 2, bugs  # judged in low precision too


def test_cases_with_non_finite_inputs_are_not_judged_not_passed(tmp_path) -> None:
    toml = project_toml(project={"name": "fd", "framework": "pytorch"}, validation={"dtypes": ["float32"]})
    toml += op_toml(
        "softmax_ones", module="ops:softmax_ones", reference="ops:softmax_ref", grad=["x"], dims=DIMS,
        distributions=["special"],
    )  # fmt: skip
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    doc = jdoc(gpuemu("test", "--format", "json", "--no-progress", "--quick", cwd=root))
    op = doc["ops"][0]
    # the forward is judged as usual; the gradient, with NaN/inf inputs, is counted out of range (not judged)
    assert op["stats"]["out_of_range"] > 0, op
    assert all("directional" not in f["message"] for f in op["failures"]), op["failures"][:2]


def test_a_reproduction_says_what_it_judges(tmp_path) -> None:
    toml = project_toml(project={"name": "fd", "framework": "pytorch"}, validation={"dtypes": ["float32"]})
    toml += op_toml("softmax_ones", module="ops:softmax_ones", reference="ops:softmax_ref", grad=["x"], dims=DIMS)
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    doc = jdoc(gpuemu("test", "--format", "json", "--no-progress", "--quick", cwd=root))
    seed = next(f for f in doc["ops"][0]["failures"] if f["status"] == "failed")["seed"]
    again = gpuemu("reproduce", "--op", "softmax_ones", "--seed", str(seed), cwd=root)
    assert again.returncode == 1 and "directional derivatives off" in again.stdout, again.stdout[-2000:]
    script = root / ".gpuemu" / "repro" / f"softmax_ones_{seed}.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    # the standalone script judges the forward and says the gradients are judged in gpuemu: exit 2, not a pass
    assert proc.returncode == 2 and "NOT JUDGED here: grad_x" in proc.stdout, proc.stdout[-2000:] + proc.stderr
