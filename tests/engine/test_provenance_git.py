"""The git state a report records (engine/report/provenance.py): what running gpuemu writes into a workspace
(Python's bytecode caches of the op modules its workers import, its own .gpuemu folder) never makes the tree
read as dirty, in a repository that does not ignore them; anything else the user changed does."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuemu_ls.engine.report.provenance import git_state


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_the_tools_own_files_leave_the_tree_clean_and_a_users_change_does_not(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "ops.py").write_text("def op(x):\n    return x\n")
    _git(tmp_path, "add", "ops.py")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "ops")
    for cache in ("__pycache__/ops.cpython-311.pyc", "pkg/__pycache__/k.cpython-311.pyc", ".gpuemu/gpuemu.db"):
        (tmp_path / cache).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / cache).write_bytes(b"\0")
    clean = git_state(tmp_path)
    assert clean is not None and clean["dirty"] is False and clean["diff_sha256"] is None
    (tmp_path / "ops.py").write_text("def op(x):\n    return x + 1\n")
    edited = git_state(tmp_path)
    assert edited is not None and edited["dirty"] is True and edited["diff_sha256"]
    (tmp_path / "notes.txt").write_text("x")  # an untracked file of the user's changes the digest
    untracked = git_state(tmp_path)
    assert untracked is not None and untracked["diff_sha256"] != edited["diff_sha256"]
