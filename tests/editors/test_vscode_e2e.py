"""The VS Code extension (editors/vscode): its Node unit tests and type check when its npm dependencies
are installed, and the end-to-end test in real VS Code (code-server + headless Chromium) on opt-in.

    GPUEMU_VSCODE_E2E=1 .venv/bin/python -m pytest tests/editors/test_vscode_e2e.py

The end-to-end test runs editors/vscode/scripts/e2e.sh, which installs what is missing (Debian chromium,
ripgrep and libkrb5-dev, npm packages, code-server 4.100.3), packages the .vsix and drives VS Code: a few
minutes from cold, about a minute once installed. Its screenshots go to editors/vscode/test-artifacts/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "editors" / "vscode"
SERVER = Path(sys.executable).parent / "gpuemu-ls"


def npm(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", "run", "--silent", *args], cwd=EXT, capture_output=True, text=True, timeout=timeout, check=False
    )


needs_node_modules = pytest.mark.skipif(
    shutil.which("npm") is None or not (EXT / "node_modules" / ".bin" / "tsx").exists(),
    reason="run `npm ci` in editors/vscode first",
)


@needs_node_modules
def test_extension_typechecks() -> None:
    proc = npm("typecheck")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_node_modules
def test_extension_unit_tests() -> None:
    proc = npm("test")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.skipif(os.environ.get("GPUEMU_VSCODE_E2E") != "1", reason="set GPUEMU_VSCODE_E2E=1 to run VS Code")
def test_vscode_end_to_end() -> None:
    artifacts = EXT / "test-artifacts"
    env = {**os.environ, "GPUEMU_E2E_SERVER": str(SERVER), "GPUEMU_E2E_ARTIFACTS": str(artifacts)}
    proc = subprocess.run(
        ["bash", str(EXT / "scripts" / "e2e.sh")], capture_output=True, text=True, timeout=1800, env=env, check=False
    )
    results = artifacts / "results.json"
    steps = json.loads(results.read_text())["steps"] if results.is_file() else []
    failed = [f"{s['name']}: {s.get('error', '')[:500]}" for s in steps if not s["ok"]]
    assert proc.returncode == 0 and steps and not failed, "\n".join(failed) or (
        proc.stdout[-6000:] + proc.stderr[-3000:]
    )
    shots = ("0-first-run-problems.png", "1-squiggle.png", "2-problems.png", "3-quick-fix.png", "4-repro-tab.png")
    shots += ("5-testing-view.png", "6-test-item-at-def.png", "7-failure-peek-diff.png", "8-case-children.png")
    shots += ("9-debug-profile-why-not.png", "9-toml-completion.png")
    for shot in shots:
        assert (artifacts / shot).is_file(), shot
