"""The Python API with real framework ops: torch (CPU), jax (CPU) and tensorflow (CPU) run_op callables,
and `framework = "pytorch"` module ops in the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from kit.frameworks import needs_jax, needs_tf, needs_torch
from kit.store import rows

from gpuemu_ls import Client, ValidationError, validate_op

BF16 = np.dtype(ml_dtypes.bfloat16)


def use_framework(root: Path, framework: str) -> None:
    toml = (root / "gpuemu.toml").read_text()
    toml = toml.replace('name = "api-test"', f'name = "api-test"\nframework = "{framework}"')
    (root / "gpuemu.toml").write_text(toml)


# --- torch ----------------------------------------------------------------------------------------


@needs_torch
def test_torch_run_op_gets_cpu_tensors_with_the_case_dtype_and_strides(client_ws: Path) -> None:
    import torch

    use_framework(client_ws, "pytorch")
    seen = []

    def run_op(inputs, axis):
        x = inputs["x"]
        seen.append((type(x), x.device.type, x.dtype, x.is_contiguous()))
        return torch.softmax(x.float(), dim=axis).to(x.dtype)

    with Client(client_ws) as c:
        result = c.fuzz_op_client_side("softmax", run_op, iterations=24)
    assert result.ok, result.report()
    assert {s[0] for s in seen} == {torch.Tensor} and {s[1] for s in seen} == {"cpu"}
    assert {s[2] for s in seen} == {torch.float32, torch.float16, torch.bfloat16}
    assert {s[3] for s in seen} == {True, False}  # transposed and strided cases arrive as real views
    assert {x.spec.dtype for x in result.cases} == {"float32", "float16", "bfloat16"}


@needs_torch
def test_torch_buggy_op_fails_and_in_place_writes_are_caught(client_ws: Path) -> None:
    import torch

    def half_accumulation(inputs, axis):  # exp and sum in the input dtype, no max subtraction
        x = inputs["x"]
        e = torch.exp(x)
        return e / e.sum(dim=axis, keepdim=True)

    def in_place(inputs, axis):  # a right answer, but the input used as scratch space afterwards
        x = inputs["x"]
        out = torch.softmax(x.float(), dim=axis).to(x.dtype)
        x.zero_()
        return out

    with Client(client_ws, framework="pytorch") as c:
        bad = c.fuzz_op_client_side("softmax", half_accumulation, iterations=24)
        mut = c.fuzz_op_client_side("softmax", in_place, iterations=4, dtypes="float32")
    assert not bad.ok and bad.failed > 0
    assert {f.kind for f in bad.failures} <= {"mismatch", "unexpected_nan", "unexpected_inf", "missing_nan"}
    assert {x.kind for x in mut.cases} == {"input_mutation"}


@needs_torch
def test_torch_bfloat16_end_to_end_and_dtype_is_checked(client_ws: Path) -> None:
    import torch

    with Client(client_ws, framework="pytorch") as c:
        case = c.get_test_case("softmax", 5)
        assert case.dtype == "bfloat16" or c.get_test_batch("softmax", 1, dtypes="bfloat16")
        case = c.get_test_batch("softmax", 1, dtypes="bfloat16")[0]
        x = case.inputs["x"]
        assert x.dtype == torch.bfloat16
        assert x.view(torch.int16).numpy().tobytes() == np.ascontiguousarray(case.arrays["x"]).view(np.int16).tobytes()
        ok = c.submit_output(case, torch.softmax(x.float(), -1).to(torch.bfloat16))
        assert ok.passed, ok.report()
        wrong_dtype = c.submit_output(case, torch.softmax(x.float(), -1))
        assert wrong_dtype.case is not None and wrong_dtype.case.kind == "dtype_mismatch"
        assert "float32, expected bfloat16" in wrong_dtype.case.message


@needs_torch
def test_torch_validate_op_and_context_manager_with_own_tensors(client_ws: Path) -> None:
    import torch

    x = torch.randn(5, 40).t().contiguous().t()  # a transposed view
    with Client(client_ws) as c:
        r = c.validate_op("softmax", {"x": x}, torch.softmax(x, -1))
        assert r.passed and r.case is not None and r.case.spec.layout == "transposed"
        with pytest.raises(ValidationError, match="replay"), validate_op(c, "softmax", inputs={"x": x}) as check:
            check.output = torch.softmax(x * 1.1, -1)
        assert c.validate_op("softmax", x.to(torch.bfloat16), torch.softmax(x, -1).to(torch.bfloat16)).passed
    stored = rows(client_ws / ".gpuemu" / "gpuemu.db", "SELECT dtype, layout, status FROM cases ORDER BY id")
    assert [(r["dtype"], r["status"]) for r in stored] == [
        ("float32", "passed"),
        ("float32", "failed"),
        ("bfloat16", "passed"),
    ]


@needs_torch
def test_pytorch_module_op_gets_torch_tensors_in_the_cli(client_ws: Path, gpuemu_cli) -> None:
    (client_ws / "tops.py").write_text(
        "import torch\n\n\n"
        "def softmax(x, axis=-1):\n"
        "    assert isinstance(x, torch.Tensor), type(x)\n"
        "    return torch.softmax(x.float(), dim=axis).to(x.dtype)\n\n\n"
        "def softmax_bad(x, axis=-1):\n"
        "    assert isinstance(x, torch.Tensor), type(x)\n"
        "    return torch.softmax(x.float() * 1.01, dim=axis).to(x.dtype)\n"
    )
    toml = (client_ws / "gpuemu.toml").read_text()
    for name, fn in (("torch_softmax", "softmax"), ("torch_softmax_bad", "softmax_bad")):
        toml += f'\n[[ops]]\nname = "{name}"\nmodule = "tops:{fn}"\nreference = "refs:softmax"\nframework = "pytorch"\n'
    (client_ws / "gpuemu.toml").write_text(toml)
    good = gpuemu_cli(client_ws, "test", "--op", "torch_softmax", "--format", "json", "--no-progress")
    doc = json.loads(good.stdout)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr
    assert doc["ops"][0]["status"] == "passed" and doc["ops"][0]["cases"] == 12
    bad = gpuemu_cli(client_ws, "test", "--op", "torch_softmax_bad", "--format", "json", "--no-progress")
    entry = json.loads(bad.stdout)["ops"][0]
    assert bad.returncode == 1 and entry["status"] == "failed" and entry["failures"]
    # and through the API in process, the same op and module
    with Client(client_ws, store=False) as c:
        assert c.test_op("torch_softmax").ok
        assert not c.test_op("torch_softmax_bad").ok


# --- jax ------------------------------------------------------------------------------------------


@needs_jax
def test_jax_run_op_gets_jax_arrays_and_bf16(client_ws: Path) -> None:
    import jax
    import jax.numpy as jnp

    use_framework(client_ws, "jax")
    seen = set()

    def run_op(inputs, axis):
        x = inputs["x"]
        seen.add((isinstance(x, jax.Array), str(x.dtype)))
        return jax.nn.softmax(x.astype(jnp.float32), axis=axis).astype(x.dtype)

    def no_max(inputs, axis):
        e = jnp.exp(inputs["x"])
        return e / e.sum(axis=axis, keepdims=True)

    with Client(client_ws) as c:
        good = c.fuzz_op_client_side("softmax", run_op, iterations=9)  # jax compiles per shape: few cases
        bad = c.fuzz_op_client_side("softmax", no_max, iterations=3, value_distribution="large")
        case = c.get_test_batch("softmax", 1, dtypes="bfloat16")[0]
        assert isinstance(case.inputs["x"], jax.Array) and case.inputs["x"].dtype == BF16
        sub = c.submit_output(case, jax.nn.softmax(case.inputs["x"].astype(jnp.float32)).astype(jnp.bfloat16))
        own = c.validate_op("softmax", jnp.ones((2, 3)), jnp.full((2, 3), 1 / 3, dtype=jnp.float32))
    assert good.ok, good.report()
    assert seen == {(True, "float32"), (True, "float16"), (True, "bfloat16")}
    assert not bad.ok and bad.failures
    assert sub.passed and own.passed


# --- tensorflow -----------------------------------------------------------------------------------


@needs_tf
def test_tensorflow_run_op(client_ws: Path) -> None:
    import tensorflow as tf

    seen = set()

    def run_op(inputs, axis):
        x = inputs["x"]
        seen.add((isinstance(x, tf.Tensor), x.dtype.name))
        return tf.cast(tf.nn.softmax(tf.cast(x, tf.float32), axis=axis), x.dtype)

    def scaled(inputs, axis):
        return run_op(inputs, axis) * tf.cast(1.5, inputs["x"].dtype)

    with Client(client_ws, framework="tensorflow") as c:
        good = c.fuzz_op_client_side("softmax", run_op, iterations=12, value_distribution=["normal", "uniform"])
        bad = c.fuzz_op_client_side("softmax", scaled, iterations=6, value_distribution=["normal"])
    assert good.ok, good.report()
    assert seen == {(True, "float32"), (True, "float16"), (True, "bfloat16")}
    assert not bad.ok and bad.failed == bad.total == 6
