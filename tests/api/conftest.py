"""Fixtures for the Python API, framework adapter, pytest plugin and Triton example tests.

``clean_env`` and ``gpuemu_cli`` (the real CLI as a subprocess) come from tests/kit via tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apihelp import CLIENT_TOML
from kit.ops import NUMPY_OPS, SOFTMAX_REF
from kit.workspace import write_ws


@pytest.fixture
def client_ws(tmp_path: Path) -> Path:
    """A workspace with client-side ops (softmax, add) and a module op (softmax_mod), numpy references."""
    return write_ws(tmp_path / "ws", CLIENT_TOML, {"refs.py": SOFTMAX_REF, "ops.py": NUMPY_OPS})
