"""Framework adapters with real torch (CPU), jax (CPU) and tensorflow (CPU): zero copy, strides, bf16, devices."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from kit.frameworks import needs_jax, needs_tf, needs_torch

from gpuemu_ls.engine.cases.generate import make_layout
from gpuemu_ls.engine.run import frameworks
from gpuemu_ls.engine.run.frameworks import Adapter, AutoAdapter, framework_of, get_adapter, to_numpy_any

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(autouse=True)
def _fresh_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frameworks, "_CACHE", {})
    monkeypatch.delenv(frameworks.DEVICE_ENV, raising=False)


F32 = np.dtype(np.float32)


def layouts(dtype: np.dtype = F32) -> dict[str, np.ndarray]:
    base = (np.arange(24, dtype=np.float64).reshape(4, 6) / 8 - 1).astype(dtype)
    return {name: make_layout(base, name) for name in ("contiguous", "transposed", "strided")}


def test_numpy_adapter_is_the_identity() -> None:
    a = get_adapter("numpy")
    arr = layouts()["strided"]
    t, back = a.place(arr)
    assert t is arr and back is None and a.to_numpy(t) is arr and a.device == "cpu"


def test_unknown_and_missing_frameworks_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unknown framework"):
        get_adapter("mxnet")
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` now raises ImportError
    with pytest.raises(ImportError, match=r"gpuemu-ls\[tensorflow\]"):
        get_adapter("tensorflow")


def test_framework_of_reads_the_type_without_importing() -> None:
    assert framework_of(np.zeros(2)) == "numpy" and framework_of(3.0) == "numpy"
    assert to_numpy_any([1.0, 2.0]).tolist() == [1.0, 2.0]


@needs_torch
def test_torch_inputs_alias_the_engine_buffers_with_their_strides() -> None:
    import torch

    a = get_adapter("pytorch")
    assert a.name == "pytorch" and a.device == "cpu" and get_adapter("pytorch") is a  # cached
    for name, arr in layouts().items():
        t, back = a.place(arr)
        assert isinstance(t, torch.Tensor) and back is None, name
        assert t.data_ptr() == arr.ctypes.data, name  # zero copy
        assert tuple(s * arr.itemsize for s in t.stride()) == arr.strides, name
        assert t.is_contiguous() == (name == "contiguous")
        t.add_(1)  # a write through the tensor is a write into the engine's buffer
        assert arr[0, 0] == t[0, 0].item()


@needs_torch
def test_torch_bfloat16_travels_as_bf16_bits_both_ways_without_copies() -> None:
    import torch

    a = get_adapter("pytorch")
    arr = layouts(BF16)["transposed"]
    t, _ = a.place(arr)
    assert t.dtype == torch.bfloat16 and t.data_ptr() == arr.ctypes.data
    assert t.float().numpy().tolist() == arr.astype(np.float32).tolist()
    out = (t * 2).contiguous()
    back = a.to_numpy(out)
    assert back.dtype == BF16 and back.ctypes.data == out.data_ptr()
    assert back.view(np.uint16).tolist() == out.view(torch.int16).numpy().view(np.uint16).tolist()


@needs_torch
def test_torch_outputs_come_back_through_dlpack_without_a_copy() -> None:
    import torch

    a = get_adapter("pytorch")
    for t in (
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.arange(12, dtype=torch.float16).reshape(3, 4).t(),  # non-contiguous stays a view
        torch.ones(5, dtype=torch.int64),
        torch.ones(3, requires_grad=True) * 2,
    ):
        out = a.to_numpy(t)
        assert out.ctypes.data == t.data_ptr() and out.shape == tuple(t.shape)
        assert out.strides == tuple(s * t.element_size() for s in t.stride())
    neg = torch.arange(4.0)._neg_view()
    assert a.to_numpy(neg).tolist() == [-0.0, -1.0, -2.0, -3.0]


@needs_torch
def test_torch_device_copy_keeps_strides_and_the_poison_between_them() -> None:
    """The path a CUDA device takes, exercised with the CPU as the 'device': span copy + as_strided."""
    import torch

    a = get_adapter("pytorch")
    arr = layouts()["strided"]
    host = a._cpu_tensor(arr)
    dev, back = a.to_device(arr, host)
    assert dev.data_ptr() != host.data_ptr()  # a real copy
    assert dev.stride() == host.stride() and dev.shape == host.shape
    assert torch.equal(dev, host)
    span = torch.as_strided(dev, (arr.size * 2 - 1,), (1,))
    assert torch.isnan(span[1::2]).all()  # the gaps came along
    span[1] = 7.0  # the kernel writes into a gap on the device...
    assert back is not None
    back()
    assert arr.base is not None and arr.base.reshape(-1)[1] == 7.0  # ...and the engine sees it on the host
    dense, back2 = a.to_device(layouts()["contiguous"], a._cpu_tensor(layouts()["contiguous"]))
    assert dense.is_contiguous() and back2 is not None


@needs_torch
def test_gpuemu_device_forces_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(frameworks.DEVICE_ENV, "cpu")
    assert get_adapter("pytorch").device == "cpu"
    assert get_adapter("pytorch", "cpu").torch_device.type == "cpu"


@needs_torch
def test_auto_adapter_takes_outputs_of_any_framework() -> None:
    import torch

    auto = AutoAdapter(get_adapter("pytorch"))
    assert auto.to_numpy(torch.ones(2)).tolist() == [1.0, 1.0]
    assert auto.to_numpy(np.zeros(2)).tolist() == [0.0, 0.0]
    assert AutoAdapter(Adapter()).to_numpy(torch.ones(1, dtype=torch.bfloat16)).dtype == BF16
    assert framework_of(torch.ones(1)) == "pytorch"


@needs_jax
def test_jax_inputs_are_jax_arrays_on_the_default_device_with_bf16_kept() -> None:
    import jax

    a = get_adapter("jax")
    assert a.device == "cpu:0"
    for name, arr in layouts().items():
        t, back = a.place(arr)
        assert isinstance(t, jax.Array) and back is None
        assert np.asarray(t).tolist() == arr.tolist(), name  # strided layouts arrive contiguous, same values
    b, _ = a.place(layouts(BF16)["strided"])
    assert b.dtype == BF16
    assert framework_of(b) == "jax"


@needs_jax
def test_jax_outputs_come_back_without_a_copy() -> None:
    import jax.numpy as jnp

    a = get_adapter("jax")
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * 2
    out = a.to_numpy(x)
    assert out.ctypes.data == x.unsafe_buffer_pointer() and out.tolist() == np.asarray(x).tolist()
    xb = x.astype(jnp.bfloat16)
    outb = a.to_numpy(xb)
    assert outb.dtype == BF16 and outb.ctypes.data == xb.unsafe_buffer_pointer()
    assert a.synchronize({"r": x})["r"] is x


@needs_tf
def test_tensorflow_inputs_and_outputs_with_bf16() -> None:
    import tensorflow as tf

    a = get_adapter("tensorflow")
    assert a.device == "/CPU:0"
    for name, arr in layouts().items():
        t, back = a.place(arr)
        assert isinstance(t, tf.Tensor) and back is None and "CPU" in t.device
        assert t.numpy().tolist() == arr.tolist(), name
    tb, _ = a.place(layouts(BF16)["contiguous"])
    assert tb.dtype == tf.bfloat16
    y = tb * 2
    out = a.to_numpy(y)
    assert out.dtype == BF16 and out.tolist() == (layouts(BF16)["contiguous"].astype(np.float32) * 2).tolist()
    z = tf.constant(np.arange(6, dtype=np.float32))
    first, second = a.to_numpy(z), a.to_numpy(z)
    assert first.ctypes.data == second.ctypes.data  # both views of the tensor's own buffer (DLPack)
    assert a.to_numpy(tf.Variable([1.0, 2.0])).tolist() == [1.0, 2.0]
    assert framework_of(z) == "tensorflow"


@pytest.mark.parametrize(
    ("version", "requires", "gpu", "noted"),
    [
        ("2.13.0+cpu", [], False, False),  # the CPU build
        ("2.13.0+cu126", [], False, True),  # a CUDA wheel from the PyTorch index
        ("2.13.0", ["nvidia-cuda-runtime-cu12==12.6.77"], False, True),  # PyPI's default Linux wheel
        ("2.13.0", ["nvidia-cuda-runtime-cu12==12.6.77"], True, False),  # a GPU to use it on
        ("2.13.0", ["filelock"], False, False),  # macOS/Windows wheels: no CUDA
    ],
)
def test_a_cuda_build_of_torch_without_a_gpu_is_noted(version: str, requires: list, gpu: bool, noted: bool) -> None:
    from gpuemu_ls.engine.run.frameworks import TORCH_CPU_INDEX, torch_build_note

    note = torch_build_note(version, requires, gpu)
    assert bool(note) == noted, note
    assert not note or (version in note and TORCH_CPU_INDEX in note)
