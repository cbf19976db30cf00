"""Which optional frameworks are installed, and skip marks for tests that need one.

Frameworks are detected without importing them (importing triton here would fix its interpreter
mode for the whole test process); tests that need one are skipped with the install command.
"""

from __future__ import annotations

import importlib.util

import pytest


def have(module: str) -> bool:
    """Whether ``module`` is importable, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


HAS_TORCH = have("torch")
HAS_JAX = have("jax") and have("jaxlib")
HAS_TF = have("tensorflow")
HAS_TRITON = have("triton")

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch: pip install torch==2.13.0 (CPU wheel)")
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="needs jax: pip install jax jaxlib (CPU)")
needs_tf = pytest.mark.skipif(not HAS_TF, reason="needs tensorflow: pip install tensorflow-cpu")
needs_triton = pytest.mark.skipif(
    not (HAS_TORCH and HAS_TRITON), reason="needs torch and triton: pip install torch==2.13.0 triton"
)


def plugin_args() -> list[str]:
    """``-p gpuemu_ls.pytest_plugin`` unless an installed pytest11 entry point already loads it under
    another name (pytest refuses to register one module under two names)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="pytest11"):
        if ep.value == "gpuemu_ls.pytest_plugin" and ep.name != "gpuemu_ls.pytest_plugin":
            return []
    return ["-p", "gpuemu_ls.pytest_plugin"]
