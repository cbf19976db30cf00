"""Fixtures every suite gets: an isolated environment and tiny workspaces in tmp_path (from tests/kit)."""

from __future__ import annotations

import compileall
from pathlib import Path

import pytest
from kit.cli import clean_env, gpuemu_cli
from kit.workspace import WriteWorkspace, isolated_env, workspace, write_files, write_tree

import gpuemu_ls


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile gpuemu_ls once, before any test: hundreds of tests start the real CLI, gate or server as a new
    interpreter, and where ``PYTHONDONTWRITEBYTECODE`` is set (this machine, CI images) each start compiled the
    whole package from source again (~0.4 s of a 0.5-0.9 s start; a third of tests/cli/test_exit_codes.py's
    time). Cached bytecode is still read with that variable set; only the controller compiles (xdist)."""
    if not hasattr(session.config, "workerinput"):
        compileall.compile_dir(str(Path(gpuemu_ls.__file__).parent), quiet=1)


__all__ = ["WriteWorkspace", "clean_env", "gpuemu_cli", "isolated_env", "workspace", "write_files", "write_tree"]
