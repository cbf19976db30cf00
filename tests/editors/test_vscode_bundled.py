"""The bundled variant of the VS Code extension (editors/vscode/scripts/build-bundled.sh): gpuemu-ls's package
and every dependency installed into ``bundled/libs`` with ``pip --target``, started the way the extension starts
it (``python -P -c <entry>`` with ``PYTHONPATH=bundled/libs``, entry point read from src/serverPath.ts) by a
Python that has none of them installed, answers an LSP ``initialize`` and publishes a diagnostic for a broken
gpuemu.toml. Slow (pip builds and installs the package: about a minute), so marked ``slow``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_PATH_TS = ROOT / "editors" / "vscode" / "src" / "serverPath.ts"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def _entry() -> str:
    text = SERVER_PATH_TS.read_text(encoding="utf-8")
    m = re.search(r'export const BUNDLED_ENTRY = "([^"]+)";', text)
    assert m, "BUNDLED_ENTRY not found in serverPath.ts"
    assert 'args: ["-P", "-c", BUNDLED_ENTRY, ...args]' in text, "the extension's command line changed"
    return m.group(1)


def _frame(msg: dict) -> bytes:
    body = json.dumps(msg).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read(stream) -> dict:  # type: ignore[no-untyped-def]
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    assert length, "the server closed its output"
    return json.loads(stream.read(length))


@pytest.mark.slow
def test_the_bundled_libraries_run_the_server_without_any_install(tmp_path: Path) -> None:
    libs = tmp_path / "bundled" / "libs"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(libs), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = str(libs)
    env["PATH"] = "/usr/bin:/bin"  # no venv, no gpuemu-ls on PATH
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "numpy.py").write_text("raise SystemExit('the workspace shadowed numpy')\n", encoding="utf-8")
    where = subprocess.run(
        [
            BASE_PYTHON,
            "-P",
            "-c",
            "import gpuemu_ls, numpy, pygls, ml_dtypes; print(gpuemu_ls.__file__, numpy.__file__)",
        ],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert where.returncode == 0, where.stderr
    assert all(p.startswith(str(libs)) for p in where.stdout.split()), where.stdout

    (ws / "gpuemu.toml").write_text('[validation]\ndtypes = ["float33"]\n', encoding="utf-8")
    proc = subprocess.Popen(
        [BASE_PYTHON, "-P", "-c", _entry()], cwd=ws, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        uri = ws.as_uri()
        init = {
            "processId": os.getpid(),
            "rootUri": uri,
            "capabilities": {},
            "workspaceFolders": [{"uri": uri, "name": "ws"}],
        }
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        proc.stdin.flush()
        reply = _read(proc.stdout)
        assert reply.get("id") == 1 and reply["result"]["serverInfo"]["name"] == "gpuemu-ls", reply
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        proc.stdin.flush()
        published = None
        for _ in range(200):
            msg = _read(proc.stdout)
            if msg.get("method") == "textDocument/publishDiagnostics" and msg["params"]["uri"].endswith("gpuemu.toml"):
                published = msg["params"]["diagnostics"]
                if published:
                    break
        assert published and any("float33" in d["message"] for d in published), published
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None}))
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
