"""gpuemu-ls: validate GPU kernels against float64 references on a CPU.

The engine (:mod:`gpuemu_ls.engine`) is the product; the CLI, the CI gate, the Python API and the
language server are thin faces over it. ``from gpuemu_ls import Client`` loads the Python API
(:mod:`gpuemu_ls.api`) on first use, so ``import gpuemu_ls`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__

_API = (
    "Client",
    "ValidationError",
    "ValidationResult",
    "FuzzResult",
    "Failure",
    "TestCase",
    "validate_op",
)


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'gpuemu_ls' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


__all__ = ["__version__", *_API]
