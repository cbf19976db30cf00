"""Fixtures for the Python API, framework adapter, pytest plugin and Triton example tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apihelp import CLIENT_TOML, NUMPY_OPS, SOFTMAX_REF


@pytest.fixture
def client_ws(tmp_path: Path) -> Path:
    """A workspace with client-side ops (softmax, add) and a module op (softmax_mod), numpy references."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "gpuemu.toml").write_text(CLIENT_TOML, encoding="utf-8")
    (root / "refs.py").write_text(SOFTMAX_REF, encoding="utf-8")
    (root / "ops.py").write_text(NUMPY_OPS, encoding="utf-8")
    return root


@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment for child processes: no pytest/xdist variables of this run leak into them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTEST_XDIST"))}
    env.pop("TRITON_INTERPRET", None)
    return env


@pytest.fixture
def gpuemu_cli(clean_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """gpuemu_cli(root, *args) runs the real CLI (``python -m gpuemu_ls -C root ...``)."""

    def run(root: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> Any:
        return subprocess.run(
            [sys.executable, "-m", "gpuemu_ls", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**clean_env, **(env or {})},
            cwd=str(root),
        )

    return run
