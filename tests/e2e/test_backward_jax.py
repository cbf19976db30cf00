"""Backward validation of JAX ops (issue 26 item 1): ``grad`` on a ``framework = "jax"`` op differentiates it
through ``jax.vjp`` with the case's upstream gradient, and judges each gradient against a numpy reference's
``reference_grad`` or a float64 PyTorch reference's autograd. A ``custom_vjp`` that drops the upstream gradient
fails on its gradients only; its correct twin passes in float32, float16 and bfloat16."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from kit.cli import gpuemu, jdoc
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

pytest.importorskip("jax")

OPS = """
import jax
import jax.numpy as jnp
import numpy as np


def _swish(a, b):
    af = a.astype(jnp.float32)
    return (af * jax.nn.sigmoid(af) * b.astype(jnp.float32)).astype(a.dtype)


@jax.custom_vjp
def swiglu_ones(a, b):
    return _swish(a, b)


def _fwd(a, b):
    return _swish(a, b), (a, b)


def _bwd(res, g):
    a, b = res
    af, bf = a.astype(jnp.float32), b.astype(jnp.float32)
    s = jax.nn.sigmoid(af)
    g = jnp.ones_like(g, dtype=jnp.float32)  # the bug: the upstream gradient taken to be ones
    da = g * bf * (s + af * s * (1 - s))
    db = g * af * s
    return da.astype(a.dtype), db.astype(b.dtype)


swiglu_ones.defvjp(_fwd, _bwd)


def swiglu(a, b):
    return _swish(a, b)  # jax differentiates it


def swiglu_np(a, b):
    return a / (1 + np.exp(-a)) * b


def swiglu_np_grad(a, b, g):
    s = 1 / (1 + np.exp(-a))
    return g * b * (s + a * s * (1 - s)), g * a * s


def swiglu_jax(a, b):
    return jax.nn.silu(a) * b


def swiglu_torch(a, b):
    import torch

    return torch.nn.functional.silu(a) * b
"""

INPUTS = {"a": ["B", "N"], "b": ["B", "N"]}
DIMS = {"B": (1, 8, 4), "N": (1, 200, 64)}
DTYPES = ["float32", "float16", "bfloat16"]
FINITE = ["normal", "uniform", "small", "positive", "mixed_magnitude", "integers"]


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    toml = project_toml(
        project={"name": "jaxgrads", "framework": "jax"}, validation={"dtypes": DTYPES, "iterations": 16}
    )
    numpy_ref = {"reference": "ops:swiglu_np", "reference_grad": "ops:swiglu_np_grad"}
    torch_ref = {"reference": "ops:swiglu_torch", "reference_framework": "pytorch"}
    jax_ref = {"reference": "ops:swiglu_jax", "reference_framework": "jax"}
    for name, fn, ref in (
        ("swiglu", "swiglu", numpy_ref),
        ("swiglu_ones", "swiglu_ones", numpy_ref),
        ("swiglu_torch_ref", "swiglu", torch_ref),
        ("swiglu_jax_ref", "swiglu", jax_ref),
        ("swiglu_ones_jax_ref", "swiglu_ones", jax_ref),
    ):
        toml += op_toml(
            name, module=f"ops:{fn}", grad=["a", "b"], inputs=INPUTS, dims=DIMS, distributions=FINITE, **ref
        )
    root = write_ws(tmp_path_factory.mktemp("jaxgrads"), toml, {"ops.py": OPS})
    return jdoc(gpuemu("test", "--format", "json", "--no-progress", cwd=root))


def test_a_correct_jax_backward_passes_in_every_dtype(doc: dict) -> None:
    ops = {o["name"]: o for o in doc["ops"]}
    for name in ("swiglu", "swiglu_torch_ref", "swiglu_jax_ref"):
        assert ops[name]["status"] in ("passed", "edge"), (name, ops[name]["failures"][:2])
        assert ops[name]["failed"] == 0 and ops[name]["errors"] == 0, name


@pytest.mark.parametrize("name", ["swiglu_ones", "swiglu_ones_jax_ref"])
def test_a_custom_vjp_that_drops_the_upstream_fails_on_its_gradients_only(doc: dict, name: str) -> None:
    op = next(o for o in doc["ops"] if o["name"] == name)
    bugs = [f for f in op["failures"] if f["status"] == "failed"]
    assert op["status"] == "failed" and bugs
    assert {f["output"] for f in bugs} <= {"grad_a", "grad_b"}
    assert {f["dtype"] for f in bugs} == set(DTYPES)
    assert all(f.get("upstream") for f in bugs)  # each failure names the upstream it drew


@pytest.mark.parametrize(
    "ref",
    [
        {"reference": "ops:swiglu_np", "reference_grad": "ops:swiglu_np_grad"},
        {"reference": "ops:swiglu_jax", "reference_framework": "jax"},
    ],
)
def test_a_jax_backward_failure_replays_standalone(tmp_path_factory: pytest.TempPathFactory, ref: dict) -> None:
    toml = project_toml(project={"name": "jaxgrads", "framework": "jax"}, validation={"dtypes": ["float32"]})
    toml += op_toml(
        "swiglu_ones",
        module="ops:swiglu_ones",
        **ref,
        grad=["a", "b"],
        outputs=["y"],  # the upstream is recorded under the output's declared name
        inputs=INPUTS,
        dims=DIMS,
        distributions=["normal"],
    )
    root = write_ws(tmp_path_factory.mktemp("jaxrepro"), toml, {"ops.py": OPS})
    doc = jdoc(gpuemu("test", "--format", "json", "--no-progress", "--quick", cwd=root))
    failure = next(f for f in doc["ops"][0]["failures"] if f["status"] == "failed")
    again = gpuemu("reproduce", "--op", "swiglu_ones", "--seed", str(failure["seed"]), cwd=root)
    assert again.returncode == 1 and "upstream gradients: y=" in again.stdout, again.stdout[-2000:]
    script = root / ".gpuemu" / "repro" / f"swiglu_ones_{failure['seed']}.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    # the same case as the engine's: the same worst error, to the printed digits
    worst = re.search(r"max abs err (\S+)", failure["message"])
    assert worst and worst.group(1) in proc.stdout, (failure["message"], proc.stdout[-2000:])


def test_a_jax_reference_computes_in_float64_for_its_call_only(tmp_path) -> None:
    """jax computes in float32 unless 64-bit types are on: the reference gets them for its call, the process not."""
    import jax.numpy as jnp
    import numpy as np
    from kit.workspace import load_op

    from gpuemu_ls.engine.run.grads import Upstream
    from gpuemu_ls.engine.run.pick import reference_runner

    toml = project_toml(project={"name": "x64", "framework": "jax"})
    toml += op_toml(
        "s", module="ops:swiglu", reference="ops:swiglu_jax", reference_framework="jax", grad=["a"], inputs=INPUTS,
        dims=DIMS,
    )  # fmt: skip
    op = load_op(tmp_path, toml, "s", {"ops.py": OPS})
    runner = reference_runner(tmp_path, op, isolated=False)
    runner.upstream = Upstream("s", 0)
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    out = runner.call({"a": x, "b": x[::-1].copy()}, {})
    assert out["result"].dtype == np.float64 and out["grad_a"].dtype == np.float64
    y = x / (1 + np.exp(-x)) * x[::-1]
    assert np.abs(out["result"] - y).max() < 1e-12  # float64 accuracy, not float32's 1e-7
    assert jnp.asarray(np.ones(2)).dtype == jnp.float32  # the process is unchanged
