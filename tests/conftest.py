"""Fixtures every suite gets: an isolated environment and tiny workspaces in tmp_path (from tests/kit)."""

from __future__ import annotations

from kit.cli import clean_env, gpuemu_cli
from kit.workspace import WriteWorkspace, isolated_env, workspace, write_files, write_tree

__all__ = ["WriteWorkspace", "clean_env", "gpuemu_cli", "isolated_env", "workspace", "write_files", "write_tree"]
