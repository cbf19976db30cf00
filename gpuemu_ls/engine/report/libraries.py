"""The versions of what computed a run's numbers: Python, numpy and the array libraries an op may use. A verdict
can change with any of them, so the results document records them and a replay compares them before it calls a
verdict that differs a contradiction (``tools/attest/replay.py``). (A kernel entry names its own CUDA tool
version.)

The workers that run the ops are this interpreter (``sys.executable``) over the same site-packages, so what is
installed here is what the ops could import.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

#: library -> the distributions that install it (cupy ships one wheel per CUDA version)
LIBRARIES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "ml_dtypes": ("ml_dtypes",),
    "scipy": ("scipy",),
    "torch": ("torch",),
    "triton": ("triton",),
    "jax": ("jax",),
    "jaxlib": ("jaxlib",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"),
}
#: the installed versions, keyed by the modification times of sys.path's folders (an install changes them)
_memo: tuple[tuple[Any, ...], dict[str, str]] | None = None


def _installed(dists: tuple[str, ...]) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
    return None


def _imported(name: str) -> str | None:
    """The version of a module imported without its distribution's metadata (a source checkout on sys.path)."""
    version = getattr(sys.modules.get(name), "__version__", None)
    return str(version) if version else None


def _path_key() -> tuple[Any, ...]:
    key = []
    for entry in sys.path:
        try:
            key.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            key.append((entry, None))
    return tuple(key)


def library_versions() -> dict[str, str]:
    """``{"python": "3.11.9", "numpy": "2.1.3", ...}``: Python and each library of :data:`LIBRARIES` installed."""
    global _memo
    key = _path_key()
    if _memo is None or _memo[0] != key:
        found = {name: _installed(dists) or _imported(name) for name, dists in LIBRARIES.items()}
        _memo = (key, {name: v for name, v in found.items() if v})
    return {"python": platform.python_version(), **_memo[1]}


def shown(versions: Any) -> str:
    """``Python 3.11.9, numpy 2.1.3, ...`` for a page or a terminal line; "" for nothing recorded."""
    if not isinstance(versions, dict):
        return ""
    return ", ".join(f"{_label(k)} {versions[k]}" for k in _ordered(versions))


def _ordered(names: Any) -> list[str]:
    """Python first, then the libraries by name (a stored document's keys come back sorted anyway)."""
    return sorted(set(names), key=lambda k: (k != "python", k))


def _label(name: str) -> str:
    return "Python" if name == "python" else name


def differences(recorded: dict[str, Any], here: dict[str, str]) -> list[str]:
    """Each library (and Python) whose recorded version is not the one here: ``torch 2.13.0 recorded, 2.12.1
    here``; one installed on one side only counts (an op may import it when it is there)."""
    out = []
    for name in _ordered([*recorded, *here]):
        was, now = recorded.get(name), here.get(name)
        if was == now:
            continue
        label = _label(name)
        if was is None:
            out.append(f"{label} not installed when recorded, {now} here")
        elif now is None:
            out.append(f"{label} {was} recorded, not installed here")
        else:
            out.append(f"{label} {was} recorded, {now} here")
    return out


__all__ = ["LIBRARIES", "differences", "library_versions", "shown"]
