"""gpuemu-ls: validate GPU kernels against float64 references on a CPU.

The engine (:mod:`gpuemu_ls.engine`) is the product; the CLI, the CI gate, the Python API and the
language server are thin faces over it. ``from gpuemu_ls import Client`` loads the Python API
(:mod:`gpuemu_ls.api`) on first use, so ``import gpuemu_ls`` stays cheap.
"""

from __future__ import annotations

import os as _os
import sys as _sys


def _drop_current_folder() -> None:
    """``python -m gpuemu_ls`` (or ``-m gpuemu_ls.server``) puts the current folder first on sys.path, and the
    current folder is usually a workspace: its ``json.py`` or ``typing.py`` would replace the standard
    library's in gpuemu's own process. Only for that command line, before anything else is imported here;
    workers and ops get the workspace on sys.path explicitly, where they need it."""
    argv = getattr(_sys, "orig_argv", [])
    target = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    here = _os.path.abspath(_os.getcwd())
    if target.split(".")[0] == "gpuemu_ls" and not _sys.flags.safe_path and _sys.path[:1] in ([here], [""]):
        del _sys.path[0]


_drop_current_folder()

from typing import Any  # noqa: E402  (after the current folder is off sys.path)

from ._version import __version__  # noqa: E402

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
