"""What an in-process op receives: numpy arrays, or the tensors of its framework, on its device.

An adapter converts the engine's numpy inputs to the framework's tensors and the op's outputs back
to numpy. The same adapters serve the CLI and server workers (``module`` ops with ``framework =
...``) and the Python API (``run_op`` callables in the user's own process).

* **Device.** Inputs go to the framework's accelerator when there is one (CUDA for PyTorch, the
  default JAX backend, ``/GPU:0`` for TensorFlow), else to the CPU. ``GPUEMU_DEVICE`` (or the
  ``device`` argument) forces one: ``cpu``, ``cuda``, ``cuda:1``, ``gpu``.
* **Zero copy.** On the CPU, PyTorch inputs alias the engine's buffers (``torch.from_numpy``), so a
  kernel that writes into its input is caught; outputs come back through DLPack
  (``np.from_dlpack``) without a copy whenever the output lives in host memory, for all three
  frameworks. Device outputs take the one device-to-host copy that cannot be avoided.
* **Layouts.** PyTorch keeps strides: a transposed or strided case arrives as a real
  non-contiguous tensor, and on a GPU the whole strided buffer, poisoned gaps included, is copied
  and viewed with the same strides (:meth:`TorchAdapter.place`). JAX and TensorFlow have no strides:
  their inputs arrive contiguous.
* **bfloat16** travels as real bf16 end to end: ``torch.bfloat16`` (bits reinterpreted, not
  converted), JAX and TensorFlow bf16 (both use ``ml_dtypes.bfloat16``), and back. numpy's DLPack
  has no bf16, so bf16 outputs come back as 16-bit integer views reinterpreted as bf16, still
  without a copy.

Frameworks are imported only when an op asks for them, so numpy-only users never pay for torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
#: Environment variable that forces the device of every framework adapter (``cpu``, ``cuda``, ``gpu``...).
DEVICE_ENV = "GPUEMU_DEVICE"

WriteBack = Callable[[], None]


def _requested_device(device: str | None) -> str | None:
    dev = device if device is not None else os.environ.get(DEVICE_ENV)
    return dev.strip().lower() if dev and dev.strip() else None


def _dlpack_to_numpy(value: Any) -> np.ndarray | None:
    """A zero-copy numpy view of a host tensor through DLPack, or None when DLPack cannot give one."""
    try:
        return np.from_dlpack(value)
    except (TypeError, RuntimeError, BufferError, ValueError, AttributeError):
        return None


class Adapter:
    """numpy: identity (the op gets the engine's arrays, views and all)."""

    name = "numpy"
    device = "cpu"

    def from_numpy(self, arr: np.ndarray) -> Any:
        return self.place(arr)[0]

    def place(self, arr: np.ndarray) -> tuple[Any, WriteBack | None]:
        """The tensor the op receives for ``arr``, and a callable that copies the tensor's memory back
        into ``arr``'s buffer after the op (None when the tensor aliases ``arr``'s memory or cannot be
        written), so that a write into an input is seen by the engine's input-mutation check."""
        return arr, None

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def synchronize(self, value: Any) -> Any:
        return value

    def owns(self, value: Any) -> bool:
        """Whether ``value`` is a tensor of this framework."""
        return isinstance(value, np.ndarray)


class TorchAdapter(Adapter):
    """PyTorch: tensors on CUDA when available, else CPU; strides kept; bf16 bits kept; zero copy on CPU."""

    name = "pytorch"

    def __init__(self, device: str | None = None) -> None:
        import torch

        self.torch = torch
        want = _requested_device(device)
        if want in (None, "auto"):
            want = "cuda" if torch.cuda.is_available() else "cpu"
        elif want == "gpu":
            want = "cuda"
        self.torch_device = torch.device(want)
        self.device = str(self.torch_device)

    def _cpu_tensor(self, arr: np.ndarray) -> Any:
        """A CPU tensor sharing ``arr``'s memory, with its strides (a copy only where torch cannot alias)."""
        torch = self.torch
        if arr.dtype == BF16:
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        if arr.dtype.kind == "u" and arr.dtype.itemsize > 1 and not hasattr(torch, "uint64"):
            return torch.from_numpy(arr.astype(np.int64))
        if any(s < 0 for s in arr.strides) or any(s % arr.itemsize for s in arr.strides):
            return torch.from_numpy(np.array(arr, order="C"))
        return torch.from_numpy(arr)

    def place(self, arr: np.ndarray) -> tuple[Any, WriteBack | None]:
        t = self._cpu_tensor(arr)
        if self.torch_device.type == "cpu":
            return t, None
        return self.to_device(arr, t)

    def to_device(self, arr: np.ndarray, host: Any) -> tuple[Any, WriteBack | None]:
        """Copy a host tensor to the adapter's device keeping its exact strides and the memory around them.

        A strided view (every other element of a buffer twice as wide) is not dense, and ``Tensor.to``
        would compact it. Instead the whole span of memory the view reaches, gaps included, is copied
        and viewed on the device with the same strides, so a kernel that ignores strides reads the same
        poison it would read on the host. The returned write-back copies that span back to the host.
        """
        torch = self.torch
        if host.numel() == 0 or host.dim() == 0 or host.is_contiguous() or any(s <= 0 for s in host.stride()):
            dev = host.to(self.torch_device, copy=True)

            def back_dense() -> None:
                if host.shape == dev.shape:
                    host.copy_(dev.to("cpu"))

            return dev, back_dense
        span = sum((n - 1) * s for n, s in zip(host.shape, host.stride())) + 1
        flat_host = torch.as_strided(host, (span,), (1,), host.storage_offset())
        flat_dev = flat_host.to(self.torch_device, copy=True)
        dev = torch.as_strided(flat_dev, tuple(host.shape), tuple(host.stride()), 0)

        def back_span() -> None:
            flat_host.copy_(flat_dev.to("cpu"))

        return dev, back_span

    def to_numpy(self, value: Any) -> np.ndarray:
        torch = self.torch
        if not isinstance(value, torch.Tensor):
            return np.asarray(value)
        t = value.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")  # the one copy a device output needs
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if t.dtype == torch.bfloat16:
            bits = _dlpack_to_numpy(t.view(torch.int16))
            return (bits if bits is not None else t.view(torch.int16).numpy()).view(BF16)
        out = _dlpack_to_numpy(t)
        return out if out is not None else t.numpy()

    def synchronize(self, value: Any) -> Any:
        if self.torch_device.type == "cuda":
            self.torch.cuda.synchronize(self.torch_device)
        return value

    def owns(self, value: Any) -> bool:
        return isinstance(value, self.torch.Tensor)


class JaxAdapter(Adapter):
    """JAX: arrays on the default JAX device (GPU when present); no strides, so layouts arrive contiguous."""

    name = "jax"

    def __init__(self, device: str | None = None) -> None:
        import jax
        import jax.numpy as jnp

        self.jax = jax
        self.jnp = jnp
        want = _requested_device(device)
        if want in (None, "auto"):
            self.jax_device = jax.devices()[0]
        else:
            platform, _, index = want.partition(":")
            platform = {"cuda": "gpu"}.get(platform, platform)
            self.jax_device = jax.devices(platform)[int(index or 0)]
        self.device = f"{self.jax_device.platform}:{self.jax_device.id}"

    def place(self, arr: np.ndarray) -> tuple[Any, WriteBack | None]:
        # JAX arrays are immutable: nothing can be written back. On the CPU device_put may alias the
        # (contiguous) buffer; a strided view is compacted first.
        return self.jax.device_put(np.asarray(arr, order="C"), self.jax_device), None

    def to_numpy(self, value: Any) -> np.ndarray:
        if not isinstance(value, self.jax.Array):
            return np.asarray(value)
        on_host = all(d.platform == "cpu" for d in value.devices())
        if on_host and value.dtype != BF16:
            out = _dlpack_to_numpy(value)
            if out is not None:
                return out
        return np.asarray(value)  # bf16 stays ml_dtypes.bfloat16 (zero copy on the CPU)

    def synchronize(self, value: Any) -> Any:
        leaves = self.jax.tree_util.tree_leaves(value)
        for leaf in leaves:
            block = getattr(leaf, "block_until_ready", None)
            if block is not None:
                block()
        return value

    def owns(self, value: Any) -> bool:
        return isinstance(value, self.jax.Array)


class TensorflowAdapter(Adapter):
    """TensorFlow: eager tensors on ``/GPU:0`` when present, else ``/CPU:0``; contiguous; bf16 native."""

    name = "tensorflow"

    def __init__(self, device: str | None = None) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        self.tf = tf
        want = _requested_device(device)
        if want in (None, "auto"):
            want = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        platform, _, index = want.partition(":")
        platform = {"cuda": "gpu"}.get(platform, platform)
        self.device = f"/{platform.upper()}:{int(index or 0)}"

    def place(self, arr: np.ndarray) -> tuple[Any, WriteBack | None]:
        with self.tf.device(self.device):
            return self.tf.constant(np.asarray(arr, order="C")), None

    def to_numpy(self, value: Any) -> np.ndarray:
        tf = self.tf
        if isinstance(value, tf.Variable):
            value = value.read_value()
        if not isinstance(value, tf.Tensor):
            return np.asarray(value)
        on_host = "GPU" not in (value.device or "").upper()
        if on_host:
            if value.dtype == tf.bfloat16:
                bits = _dlpack_to_numpy(tf.bitcast(value, tf.uint16))
                if bits is not None:
                    return bits.view(BF16)
            else:
                out = _dlpack_to_numpy(value)
                if out is not None:
                    return out
        return np.asarray(value.numpy())

    def owns(self, value: Any) -> bool:
        return isinstance(value, (self.tf.Tensor, self.tf.Variable))


_FACTORIES: dict[str, tuple[type[Adapter], str]] = {
    "pytorch": (TorchAdapter, "torch"),
    "jax": (JaxAdapter, "jax"),
    "tensorflow": (TensorflowAdapter, "tensorflow"),
}
_CACHE: dict[tuple[str, str | None], Adapter] = {}
#: What each framework extra of pyproject.toml installs, for the hint when it is missing.
_EXTRA_PACKAGES = {"torch": "'torch>=2.3'", "jax": "'jax>=0.4.30' 'jaxlib>=0.4.30'", "tensorflow": "'tensorflow>=2.16'"}


#: Where torch's CPU build comes from (pip cannot pick it from package metadata).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_build_note(version: str | None = None, requires: list[str] | None = None, gpu: bool | None = None) -> str:
    """A note when the installed torch is a CUDA build on a machine without an NVIDIA GPU ('' otherwise), read
    from package metadata without importing torch: pip installs the CUDA build by default, gigabytes of CUDA
    libraries that run nothing here. ``version``, ``requires`` and ``gpu`` default to what this machine has."""
    import importlib.metadata as metadata

    try:
        version = version if version is not None else metadata.version("torch")
        requires = requires if requires is not None else list(metadata.distribution("torch").requires or [])
    except metadata.PackageNotFoundError:
        return ""
    gpu = gpu if gpu is not None else os.path.exists("/proc/driver/nvidia/version")
    local = version.partition("+")[2]
    cuda = local.startswith("cu") or (not local and any(r.startswith("nvidia-") for r in requires))
    if not cuda or gpu:
        return ""
    return (
        f"note: torch {version} is a CUDA build on a machine without an NVIDIA GPU; ops run on the CPU all the "
        f"same, and its CPU build is gigabytes smaller: pip install torch --index-url {TORCH_CPU_INDEX}"
    )


def get_adapter(framework: str, device: str | None = None) -> Adapter:
    """The adapter for a framework name (cached per device); ImportError says which extra to install."""
    if framework == "numpy":
        return Adapter()
    key = (framework, _requested_device(device))
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    try:
        factory, extra = _FACTORIES[framework]
    except KeyError:
        raise ValueError(f"unknown framework {framework!r}: use numpy, {', '.join(_FACTORIES)}") from None
    try:
        adapter = factory(device)
    except ImportError as exc:
        raise ImportError(
            f"framework {framework!r} needs {extra}: pip install {_EXTRA_PACKAGES[extra]} (gpuemu-ls's [{extra}] "
            f"extra; from a checkout: pip install './gpuemu-ls[{extra}]') ({exc})"
        ) from None
    _CACHE[key] = adapter
    return adapter


def framework_of(value: Any) -> str:
    """The framework a value belongs to, from its type's module, without importing any framework."""
    if isinstance(value, np.ndarray):
        return "numpy"
    module = type(value).__module__ or ""
    top = module.split(".", 1)[0]
    if top == "torch":
        return "pytorch"
    if top in ("jax", "jaxlib"):
        return "jax"
    if top in ("tensorflow", "keras"):
        return "tensorflow"
    return "numpy"


def to_numpy_any(value: Any) -> np.ndarray:
    """Any framework's tensor (or a numpy array, or a Python number) as numpy, without a copy where possible."""
    framework = framework_of(value)
    if framework == "numpy":
        return np.asarray(value)
    return get_adapter(framework).to_numpy(value)


class AutoAdapter(Adapter):
    """Takes outputs of whichever framework produced them (an op may return numpy from a torch op)."""

    name = "auto"

    def __init__(self, inputs: Adapter) -> None:
        self.inputs = inputs
        self.device = inputs.device

    def place(self, arr: np.ndarray) -> tuple[Any, WriteBack | None]:
        return self.inputs.place(arr)

    def to_numpy(self, value: Any) -> np.ndarray:
        if self.inputs.name != "numpy" and self.inputs.owns(value):
            return self.inputs.to_numpy(value)
        return to_numpy_any(value)

    def synchronize(self, value: Any) -> Any:
        return self.inputs.synchronize(value)

    def owns(self, value: Any) -> bool:
        return True


__all__ = [
    "DEVICE_ENV",
    "Adapter",
    "AutoAdapter",
    "JaxAdapter",
    "TensorflowAdapter",
    "TorchAdapter",
    "framework_of",
    "get_adapter",
    "to_numpy_any",
    "torch_build_note",
]
