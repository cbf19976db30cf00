"""Backward validation (issue 26 item 1): ``grad = ["x", "w"]`` runs a PyTorch op forward and backward with an
upstream gradient drawn per case (never only ones), and judges each input's gradient (``grad_x``, ``grad_w``)
as an output of its own against the float64 reference's autograd (``reference_framework = "pytorch"``) or a
numpy ``reference_grad``.

Each bug class has a twin here: a backward that assumes the upstream gradient is ones (what a test with
``grad_output = ones_like`` never sees), a weight gradient that reduces over the wrong rows, a softmax
backward that forgets the Jacobian's second term. The correct kernels pass in float32, float16 and bfloat16,
thorough and quick; the standalone reproduction agrees; wiring mistakes are config errors or clear errors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import SOFTMAX_FUNCTION, op_toml, project_toml
from kit.workspace import write_ws

pytest.importorskip("torch")

OPS = (
    """
import numpy as np
import torch


class RMSNorm(torch.autograd.Function):
    # a fused kernel's shape: float32 math inside, the input dtype outside, a hand-written backward

    @staticmethod
    def forward(ctx, x, w, bug=None):
        xf, wf = x.float(), w.float()
        rstd = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, rstd)
        ctx.bug = bug
        return (xf * rstd * wf).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        xf, wf = x.float(), w.float()
        gf = torch.ones_like(g, dtype=torch.float32) if ctx.bug == "ones" else g.float()
        n = x.shape[-1]
        xhat = xf * rstd
        rows = (gf * xhat).reshape(-1, n)
        gw = rows[:1].sum(0) if ctx.bug == "first_row" else rows.sum(0)
        gxh = gf * wf
        gx = rstd * (gxh - xhat * (gxh * xhat).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw.to(w.dtype), None


def rmsnorm(x, w):
    return RMSNorm.apply(x, w)


def rmsnorm_ones(x, w):
    return RMSNorm.apply(x, w, "ones")


def rmsnorm_first_row(x, w):
    return RMSNorm.apply(x, w, "first_row")


def rmsnorm_detached(x, w):
    with torch.no_grad():
        return RMSNorm.apply(x, w)


def rmsnorm_writes(x, w):
    x.mul_(1.0)
    return RMSNorm.apply(x, w)


def rmsnorm_ref(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def rmsnorm_np(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


def rmsnorm_np_grad(x, w, g):
    n = x.shape[-1]
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    xhat = x * rstd
    gxh = g * w
    return {"x": rstd * (gxh - xhat * (gxh * xhat).mean(-1, keepdims=True)), "w": (g * xhat).reshape(-1, n).sum(0)}


"""
    + SOFTMAX_FUNCTION
    + """

def softmax(x):
    return Softmax.apply(x)


def softmax_bug(x):
    return Softmax.apply(x, "jacobian")


def softmax_ref(x):
    return torch.softmax(x, -1)
"""
)

NORM_INPUTS = {"x": ["B", "N"], "w": ["N"]}
DIMS = {"B": (1, 16, 4), "N": (1, 160, 64)}
TORCH_REF = {"reference": "ops:rmsnorm_ref", "reference_framework": "pytorch"}
DTYPES = ["float32", "float16", "bfloat16"]
FINITE = ["normal", "uniform", "wide", "small", "integers", "positive", "mixed_magnitude", "tail_max", "peaked"]


def _workspace(tmp_path: Path, iterations: int = 16) -> Path:
    toml = project_toml(
        project={"name": "grads", "framework": "pytorch"},
        validation={"dtypes": DTYPES, "iterations": iterations},
    )
    for name, fn in (("rmsnorm", "rmsnorm"), ("rmsnorm_ones", "rmsnorm_ones"), ("rmsnorm_w", "rmsnorm_first_row")):
        toml += op_toml(name, module=f"ops:{fn}", inputs=NORM_INPUTS, dims=DIMS, grad=["x", "w"], **TORCH_REF)
    toml += op_toml(
        "rmsnorm_np",
        module="ops:rmsnorm",
        reference="ops:rmsnorm_np",
        reference_grad="ops:rmsnorm_np_grad",
        grad=["x", "w"],
        inputs=NORM_INPUTS,
        dims=DIMS,
    )
    for name, fn in (("softmax", "softmax"), ("softmax_bug", "softmax_bug")):
        toml += op_toml(
            name,
            module=f"ops:{fn}",
            reference="ops:softmax_ref",
            reference_framework="pytorch",
            grad=["x"],
            distributions=FINITE,
            dims=DIMS,
        )
    return write_ws(tmp_path, toml, {"ops.py": OPS})


@pytest.fixture(scope="module")
def thorough(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = _workspace(tmp_path_factory.mktemp("grads"))
    proc = gpuemu("test", "--format", "json", cwd=root)
    return root, jdoc(proc)


def _ops(doc: dict) -> dict[str, dict]:
    return {o["name"]: o for o in doc["ops"]}


def _bugs(op: dict) -> list[dict]:
    return [f for f in op["failures"] if f["status"] == "failed"]


def test_correct_backward_passes_in_every_dtype(thorough: tuple[Path, dict]) -> None:
    _, doc = thorough
    ops = _ops(doc)
    for name in ("rmsnorm", "rmsnorm_np", "softmax"):
        assert ops[name]["status"] in ("passed", "edge"), (name, ops[name]["failures"][:2])
        assert not _bugs(ops[name]), name
    # the twin that ignores the upstream fails in every dtype: bf16 and fp16 gradients are judged too
    assert {f["dtype"] for f in _bugs(ops["rmsnorm_ones"])} == set(DTYPES)


@pytest.mark.parametrize(
    ("name", "output"),
    [("rmsnorm_ones", None), ("rmsnorm_w", "grad_w"), ("softmax_bug", "grad_x")],
)
def test_each_backward_bug_fails_on_its_gradient(thorough: tuple[Path, dict], name: str, output: str | None) -> None:
    _, doc = thorough
    op = _ops(doc)[name]
    assert op["status"] == "failed", op
    bugs = _bugs(op)
    assert bugs
    worst = {f.get("output") for f in bugs}
    assert worst <= {"grad_x", "grad_w"}, worst  # the forward is right: only gradients fail
    if output is not None:
        assert output in worst, worst
    # the forward output is judged and passes in every failing case
    assert all("result" not in (f.get("worst") or {}).get("output", "") for f in bugs)


def test_the_upstream_gradient_varies_and_is_recorded(thorough: tuple[Path, dict]) -> None:
    """The upstream is drawn per case from several distributions (zeros and per-row constants among them),
    never only ones, and each failure says which one it was."""
    _, doc = thorough
    kinds = {f["upstream"]["result"] for f in _bugs(_ops(doc)["rmsnorm_ones"])}
    assert len(kinds) >= 3, kinds
    assert "ones" not in kinds


def test_a_case_replays_with_the_same_upstream(thorough: tuple[Path, dict]) -> None:
    root, doc = thorough
    bug = _bugs(_ops(doc)["rmsnorm_w"])[0]
    seed = str(bug["seed"])
    stored = gpuemu("reproduce", "--op", "rmsnorm_w", "--seed", seed, cwd=root)
    fresh = gpuemu("reproduce", "--op", "rmsnorm_w", "--seed", seed, "--regenerate", cwd=root)
    assert stored.returncode == 1 and fresh.returncode == 1, out(stored) + out(fresh)
    assert f"upstream gradients: result={bug['upstream']['result']}" in stored.stdout, out(stored)
    worst = [ln for ln in fresh.stdout.splitlines() if ln.startswith("FAILED")]
    assert worst and worst == [ln for ln in stored.stdout.splitlines() if ln.startswith("FAILED")], out(fresh)

    # the standalone reproduction runs the backward too: fails on the bug, passes once it is fixed
    script = root / ".gpuemu" / "repro" / f"rmsnorm_w_{seed}.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1 and "grad_w" in run.stdout, run.stdout + run.stderr
    fixed_src = (root / "ops.py").read_text().replace('if ctx.bug == "first_row"', "if False")
    (root / "ops.py").write_text(fixed_src)
    try:
        fixed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    finally:
        (root / "ops.py").write_text(OPS)


def test_quick_mode_catches_the_backward_bugs(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    proc = gpuemu("test", "--quick", "--format", "json", cwd=root)
    ops = _ops(jdoc(proc))
    for name in ("rmsnorm", "rmsnorm_np", "softmax"):
        assert not _bugs(ops[name]), (name, ops[name]["failures"][:1])
    for name in ("rmsnorm_ones", "rmsnorm_w", "softmax_bug"):
        assert ops[name]["status"] == "failed", (name, ops[name])
    assert proc.returncode == 1


@pytest.mark.parametrize(
    ("fn", "says"),
    [
        ("rmsnorm_detached", "outputs carry no gradient"),
        ("rmsnorm_writes", "writes in place into an input it is differentiated by"),
    ],
)
def test_an_op_autograd_cannot_differentiate_is_a_clear_error(tmp_path: Path, fn: str, says: str) -> None:
    toml = project_toml(project={"name": "g", "framework": "pytorch"}, validation={"iterations": 4})
    toml += op_toml("o", module=f"ops:{fn}", inputs=NORM_INPUTS, dims=DIMS, grad=["x", "w"], **TORCH_REF)
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=root)
    op = jdoc(proc)["ops"][0]
    assert op["status"] == "error" and says in op["failures"][0]["message"], op["failures"][0]
    assert proc.returncode != 0


@pytest.mark.parametrize(
    ("project", "keys", "says"),
    [
        ("pytorch", {"grad": ["y"], **TORCH_REF}, "names 'y', which is not an input of the op"),
        ("pytorch", {"grad": [], **TORCH_REF}, "is empty"),
        ("numpy", {"grad": ["x"], **TORCH_REF}, 'needs framework = "pytorch"'),
        ("pytorch", {"grad": ["x"], "reference": "refs/rmsnorm.py"}, "needs a reference gpuemu calls in-process"),
        ("pytorch", {"grad": ["x"], "inplace": ["x"], **TORCH_REF}, "cannot also be differentiated"),
        ("pytorch", {"reference_grad": "ops:rmsnorm_np_grad", **TORCH_REF}, "reference_grad is set but grad is not"),
        ("pytorch", {"reference_framework": "tensorflow", "reference": "ops:rmsnorm_np"}, "unknown framework"),
    ],
)
def test_backward_wiring_mistakes_are_config_errors(tmp_path: Path, project: str, keys: dict, says: str) -> None:
    toml = project_toml(project={"name": "g", "framework": project})
    toml += op_toml("o", module="ops:rmsnorm", inputs=NORM_INPUTS, dims=DIMS, **keys)
    root = write_ws(tmp_path, toml, {"ops.py": OPS, "refs/rmsnorm.py": "import sys\n"})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode != 0 and says in proc.stdout + proc.stderr, out(proc)


def test_the_diagnosis_names_the_gradient_it_is_about(thorough: tuple[Path, dict]) -> None:
    _, doc = thorough
    ops = _ops(doc)
    assert ops["rmsnorm_w"]["diagnosis"].startswith("grad of w: "), ops["rmsnorm_w"]["diagnosis"]
    assert ops["softmax_bug"]["diagnosis"].startswith("grad of x: "), ops["softmax_bug"]["diagnosis"]
