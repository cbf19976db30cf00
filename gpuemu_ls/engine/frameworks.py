"""What an in-process op receives: numpy arrays, or the tensors of its framework.

An adapter converts the engine's numpy inputs to the framework's tensors (keeping strides where the
framework has them, bfloat16 as real bf16) and the op's outputs back to numpy. Frameworks are
imported only when an op asks for them, so numpy-only users never pay for torch.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np


class Adapter:
    """numpy: identity (the op gets the engine's arrays, views and all)."""

    name = "numpy"

    def from_numpy(self, arr: np.ndarray) -> Any:
        return arr

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def synchronize(self, value: Any) -> Any:
        return value


class TorchAdapter(Adapter):
    """PyTorch: tensors on CUDA when available, else CPU; strides kept; bf16 bits kept."""

    name = "pytorch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def from_numpy(self, arr: np.ndarray) -> Any:
        torch = self.torch
        if arr.dtype == ml_dtypes.bfloat16:
            base = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        elif arr.dtype.kind == "u" and arr.dtype.itemsize > 1 and not hasattr(torch, "uint64"):
            base = torch.from_numpy(arr.astype(np.int64))
        else:
            base = torch.from_numpy(arr)
        return base.to(self.device) if self.device.type != "cpu" else base

    def to_numpy(self, value: Any) -> np.ndarray:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            t = value.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            if t.dtype == torch.bfloat16:
                return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            return t.numpy()
        return np.asarray(value)

    def synchronize(self, value: Any) -> Any:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
        return value


class JaxAdapter(Adapter):
    """JAX: jax arrays on the default device (JAX has no strides: layouts arrive contiguous)."""

    name = "jax"

    def __init__(self) -> None:
        import jax.numpy as jnp

        self.jnp = jnp

    def from_numpy(self, arr: np.ndarray) -> Any:
        return self.jnp.asarray(np.asarray(arr, order="C"))

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def synchronize(self, value: Any) -> Any:
        block = getattr(value, "block_until_ready", None)
        return block() if block else value


class TensorflowAdapter(Adapter):
    name = "tensorflow"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf

    def from_numpy(self, arr: np.ndarray) -> Any:
        if arr.dtype == ml_dtypes.bfloat16:
            return self.tf.cast(self.tf.constant(arr.astype(np.float32)), self.tf.bfloat16)
        return self.tf.constant(np.asarray(arr, order="C"))

    def to_numpy(self, value: Any) -> np.ndarray:
        if hasattr(value, "dtype") and getattr(value.dtype, "name", "") == "bfloat16":
            return np.asarray(self.tf.cast(value, self.tf.float32)).astype(ml_dtypes.bfloat16)
        return np.asarray(value)


def get_adapter(framework: str) -> Adapter:
    """The adapter for a framework name; ImportError says which extra to install."""
    if framework == "numpy":
        return Adapter()
    factories = {
        "pytorch": (TorchAdapter, "torch"),
        "jax": (JaxAdapter, "jax"),
        "tensorflow": (TensorflowAdapter, "tensorflow"),
    }
    factory, extra = factories[framework]
    try:
        return factory()
    except ImportError as exc:
        raise ImportError(f"framework {framework!r} needs {extra}: pip install 'gpuemu-ls[{extra}]' ({exc})") from None
