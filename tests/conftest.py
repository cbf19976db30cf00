"""Shared fixtures for the engine and CLI tests: isolated environment and tiny workspaces in tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

WriteWorkspace = Callable[..., Path]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No user defaults file and no store override leak in from the machine running the tests."""
    monkeypatch.setenv("GPUEMU_USER_CONFIG", str(tmp_path_factory.getbasetemp() / "no-user-config.toml"))
    monkeypatch.delenv("GPUEMU_STORE", raising=False)


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under ``root`` exactly as given; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def write_tree() -> Callable[[Path, dict[str, str]], Path]:
    """write_files as a fixture, for module-scoped workspaces."""
    return write_files


@pytest.fixture
def workspace(tmp_path: Path) -> WriteWorkspace:
    """workspace(toml, files={rel: text}, name="ws") -> root: a folder in tmp_path with gpuemu.toml and files."""

    def make(toml: str, files: dict[str, str] | None = None, name: str = "ws") -> Path:
        return write_files(tmp_path / name, {"gpuemu.toml": toml, **(files or {})})

    return make
