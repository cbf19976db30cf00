"""Running the real ``gpuemu`` CLI (``python -m gpuemu_ls``) and ``gpuemu-ls --check`` as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: the test venv's scripts folder (gpuemu, gpuemu-ls)
VENV_BIN = Path(sys.executable).parent
#: the installed ``gpuemu`` console script
GPUEMU_SCRIPT = VENV_BIN / "gpuemu"

#: no user defaults (~/.config/gpuemu/config.toml) leak into the runs: this path can never exist
NO_USER_CONFIG = str(Path(os.devnull) / "gpuemu-user-config.toml")

_CHECK = "import sys; from gpuemu_ls.cli import server_main; sys.exit(server_main(sys.argv[1:]))"


def env(**extra: str) -> dict[str, str]:
    """The test process's environment with the venv's scripts (gpuemu, gpuemu-ls) first on PATH."""
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    e.pop("GPUEMU_STORE", None)
    e.setdefault("GPUEMU_USER_CONFIG", NO_USER_CONFIG)
    e.update(extra)
    return e


def gpuemu(
    *args: str,
    cwd: Path,
    timeout: float = 600,
    environ: dict[str, str] | None = None,
    python: Path | str = sys.executable,
) -> subprocess.CompletedProcess:
    """`gpuemu ARGS` (``python -m gpuemu_ls``, the test venv's interpreter unless ``python``) in ``cwd``."""
    return subprocess.run(
        [str(python), "-m", "gpuemu_ls", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=environ or env(),
    )


def check(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`gpuemu-ls --check ARGS` through the server entry point (the same function the script calls)."""
    return subprocess.run(
        [sys.executable, "-c", _CHECK, "--check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env(),
    )


def out(proc: subprocess.CompletedProcess) -> str:
    """stdout and stderr tails, for assertion messages."""
    return f"rc={proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


def jdoc(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    """The process's stdout as JSON (an assertion error showing the output when it is not)."""
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:  # pragma: no cover - shown on failure only
        raise AssertionError(f"not JSON ({exc}):\n{out(proc)}") from None


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment for child processes: no pytest/xdist variables of this run leak into them."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTEST_XDIST"))}
    e.pop("TRITON_INTERPRET", None)
    return e


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
