"""Hand-written pytest tests of the Triton kernels through the gpuemu-ls pytest plugin.

    pytest -p gpuemu_ls.pytest_plugin --gpuemu        # or just `pytest --gpuemu` once gpuemu-ls is installed

collects one item per op and dtype from gpuemu.toml (the two buggy ops fail, by design) and runs
these tests, which call the kernels the way client-side code does: ``gpuemu_check(run_op)`` fuzzes
the op named by the marker through ``run_op(inputs) -> output`` in this process and raises
``ValidationError`` (with each failure's seed, dtype, shapes and replay command) if a case fails.
"""

import importlib.util

import pytest

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
    pytest.skip("the Triton examples need torch and triton", allow_module_level=True)

# the kernel modules set TRITON_INTERPRET=1 when there is no GPU: import them before anything imports triton
from matmul import matmul, matmul_acc_overwrite
from softmax import softmax, softmax_tail_leak

from gpuemu_ls import ValidationError


@pytest.mark.gpuemu_op("softmax", iterations=8)
def test_softmax_kernel(gpuemu_check):
    result = gpuemu_check(lambda inputs: softmax(inputs["x"]))
    assert result.total == 8


@pytest.mark.gpuemu_op("matmul", iterations=8)
def test_matmul_kernel(gpuemu_check):
    gpuemu_check(lambda inputs: matmul(inputs["a"], inputs["b"]))


@pytest.mark.gpuemu_op("softmax_tail_leak", iterations=8, dtypes=["float32"])
def test_tail_leak_is_caught(gpuemu_check):
    with pytest.raises(ValidationError, match="replay: gpuemu"):
        gpuemu_check(lambda inputs: softmax_tail_leak(inputs["x"]))


@pytest.mark.gpuemu_op("matmul_acc_overwrite", iterations=24)
def test_acc_overwrite_is_caught(gpuemu_check):
    with pytest.raises(ValidationError) as info:
        gpuemu_check(lambda inputs: matmul_acc_overwrite(inputs["a"], inputs["b"]))
    assert "K > 16" in info.value.result.diagnosis
