"""Writing file trees and workspaces, copying examples, reading a workspace's gpuemu.toml back."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

WriteWorkspace = Callable[..., Path]


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under ``root`` exactly as given; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_ws(root: Path, toml: str, files: dict[str, str] | None = None) -> Path:
    """A workspace at ``root``: gpuemu.toml holding ``toml`` and ``files``; returns ``root``."""
    return write_files(root, {"gpuemu.toml": toml, **(files or {})})


def copy_example(name: str, dest: Path) -> Path:
    """A copy of examples/NAME (without any store or cache) at ``dest``; examples/ is never written."""
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__", "gpuemu-baselines"))
    return dest


def copy_workspace(src: Path, dest: Path) -> Path:
    """A copy of a test workspace including its store (the copy evolves on its own)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def load_op(root: Path, toml: str, name: str, files: dict[str, str] | None = None, **load: Any) -> Any:
    """Write the workspace (``write_ws``), load its config (``load_config(root, **load)``) and return op ``name``."""
    from gpuemu_ls.engine.config.load import load_config

    return load_config(write_ws(root, toml, files), **load).op(name)


def load_toml(ws: Path) -> dict[str, Any]:
    """The workspace's gpuemu.toml, parsed."""
    return tomllib.loads((ws / "gpuemu.toml").read_text(encoding="utf-8"))


# --- fixtures (registered by tests/conftest.py) ---------------------------------------------------
@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No user defaults file and no store override leak in from the machine running the tests."""
    monkeypatch.setenv("GPUEMU_USER_CONFIG", str(tmp_path_factory.getbasetemp() / "no-user-config.toml"))
    monkeypatch.delenv("GPUEMU_STORE", raising=False)


@pytest.fixture(scope="session")
def write_tree() -> Callable[[Path, dict[str, str]], Path]:
    """write_files as a fixture, for module-scoped workspaces."""
    return write_files


@pytest.fixture
def workspace(tmp_path: Path) -> WriteWorkspace:
    """workspace(toml, files={rel: text}, name="ws") -> root: a folder in tmp_path with gpuemu.toml and files."""

    def make(toml: str, files: dict[str, str] | None = None, name: str = "ws") -> Path:
        return write_ws(tmp_path / name, toml, files)

    return make


__all__ = [
    "EXAMPLES",
    "REPO",
    "WriteWorkspace",
    "copy_example",
    "copy_workspace",
    "isolated_env",
    "load_op",
    "load_toml",
    "workspace",
    "write_files",
    "write_tree",
    "write_ws",
]
