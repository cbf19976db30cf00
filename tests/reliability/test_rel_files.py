"""Files, read and written (issue 30): every workspace file is read through one helper that checks its type and
size before reading (a FIFO never hangs a reader, a sparse 1 GiB file costs nothing); every file a user owns
is written all or nothing (a failed write leaves the old file); reports always parse.

Faults are real: FIFOs, sparse files, a file-size limit (RLIMIT_FSIZE, what a full disk or a quota does to a
write), exception messages with ANSI colours, control bytes and lone surrogates from real op code.
"""

from __future__ import annotations

import ast
import asyncio
import os
import resource
import signal
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import relkit
from lsprotocol import types as lsp

PACKAGE = relkit.REPO / "gpuemu_ls"
GIB = 1 << 30


# --- one read helper -------------------------------------------------------------------------------------
def test_no_bare_reads_in_the_server_the_sessions_or_the_config() -> None:
    """features/, session/ and engine/config/ read workspace files only through engine/safe_read.py: a bare
    ``open()``, ``Path.read_text`` or ``read_bytes`` there would hang on a FIFO or read a sparse GiB whole."""
    found = []
    for folder in ("features", "session", "engine/config"):
        for path in (PACKAGE / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name == "open" or (isinstance(f, ast.Attribute) and name in ("read_text", "read_bytes")):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}()")
    assert not found, "read these through gpuemu_ls.engine.safe_read:\n" + "\n".join(found)


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _sparse(path: Path, size: int) -> None:
    with path.open("wb") as fh:
        fh.truncate(size)  # no disk used: reads as zeros


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):  # the peak
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.asyncio
@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
@pytest.mark.parametrize("what", ["fifo-toml", "sparse-toml", "fifo-py", "sparse-py"])
async def test_a_fifo_or_a_huge_file_never_hangs_or_bloats_the_server(tmp_path: Path, what: str, trusted: bool) -> None:
    root = relkit.good_ws(tmp_path / "ws")
    toml = root / "gpuemu.toml"
    text = toml.read_text()
    if what == "fifo-toml":
        _fifo(toml)
    elif what == "sparse-toml":
        _sparse(toml, GIB)
    else:
        target = root / "zz_odd.py"
        (_fifo if what == "fifo-py" else lambda p: _sparse(p, GIB))(target)
    client = await relkit.start_server(root, {**relkit.QUIET, "trusted": trusted})
    relkit.record("server", started=1)
    try:
        # the buffer as an editor shows it, then requests that read the workspace's files behind it
        relkit.open_doc(client, toml, text)
        line = next(i for i, s in enumerate(text.splitlines()) if s.startswith("module = "))
        done = await asyncio.wait_for(
            client.text_document_completion_async(
                lsp.CompletionParams(lsp.TextDocumentIdentifier(toml.as_uri()), lsp.Position(line, len('module = "')))
            ),
            60,
        )
        assert done is not None
        hover = await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(toml.as_uri()), lsp.Position(line, 2))
            ),
            60,
        )
        assert hover is not None
        found = await relkit.request(client, "gpuemu/discoverOps", {}, timeout=60)
        assert found["workspaces"], found
        relkit.save_doc(client, toml)
        assert await relkit.answers(client, root), f"the server stopped answering ({what})"
        assert _rss_mb(client.server_pid) < 600, f"the server's memory grew to {_rss_mb(client.server_pid):.0f} MB"
        relkit.record("bad_input", cases=1)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)


@pytest.mark.parametrize("what", ["fifo", "sparse"])
def test_the_cli_refuses_the_same_files_with_a_message(tmp_path: Path, what: str) -> None:
    root = relkit.good_ws(tmp_path / "ws")
    toml = root / "gpuemu.toml"
    (_fifo(toml) if what == "fifo" else _sparse(toml, GIB))
    done = relkit.run_cli(root, "test", timeout=60)
    assert done.returncode == 2 and "gpuemu.toml" in done.stderr, done.stderr
    assert ("regular file" in done.stderr) if what == "fifo" else ("MB" in done.stderr), done.stderr


# --- writes: all or nothing ---------------------------------------------------------------------------------
def _file_size_limit(limit: int) -> Any:
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


CAL_PY = """\
import numpy as np


def noisy(x):
    xf = np.asarray(x, dtype=np.float32)
    return (xf * np.float32(1 + 3e-5)).astype(x.dtype)  # a few ulps off: calibration proposes a tolerance


def reference(x):
    return np.asarray(x, dtype=np.float64)
"""


def test_calibrate_write_that_fails_leaves_gpuemu_toml_as_it_was(tmp_path: Path) -> None:
    toml = relkit.HEADER.format(name="cal", validation="", quick=2) + relkit.op_block(
        "noisy", 'module = "kern:noisy"\nreference = "kern:reference"'
    )
    toml += "\n" + "".join(f"# padding line {i:06d} to make the file larger than the write limit\n" for i in range(400))
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": CAL_PY})
    before = (root / "gpuemu.toml").read_bytes()
    limit = len(before) // 2  # the new file cannot be written whole
    done = relkit.run_cli(root, "calibrate", "--op", "noisy", "--write", preexec_fn=_file_size_limit(limit))
    assert done.returncode in (1, 2), done.stdout + done.stderr
    assert (root / "gpuemu.toml").read_bytes() == before, "gpuemu.toml was changed by a write that failed"
    assert "as it was" in done.stderr or done.returncode == 1, done.stderr
    assert not list(root.glob(".gpuemu.toml.*.partial")), "a partial file was left behind"
    # and without the limit the same command writes it, keeping comments
    done = relkit.run_cli(root, "calibrate", "--op", "noisy", "--write", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    after = (root / "gpuemu.toml").read_text()
    assert "padding line 000399" in after and "tolerances" in after
    relkit.record("faults", injected=1)


HOSTILE_PY = """\
def colour(x):
    raise ValueError("\\x1b[31mred\\x1b[0m bell\\x07 nul\\x00 soh\\x01 lone \\udcff surrogate")


def reference(x):
    return x * 1.0
"""


@pytest.mark.parametrize("fmt", ["junit", "text", "json", "sarif", "markdown"])
def test_reports_of_hostile_messages_are_complete_and_parse(tmp_path: Path, fmt: str) -> None:
    toml = relkit.HEADER.format(name="hostile", validation="", quick=2) + relkit.op_block(
        "colour", 'module = "kern:colour"\nreference = "kern:reference"'
    )
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": HOSTILE_PY})
    out = tmp_path / f"report.{fmt}"
    done = relkit.run_check(root, "--quick", "--format", fmt, "--output", str(out))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    text = out.read_text(encoding="utf-8")  # complete, and valid UTF-8 (the lone surrogate escaped)
    assert "colour" in text and "surrogate" in text
    if fmt == "junit":
        assert "\x1b" not in text and "\x00" not in text
        tree = ET.fromstring(text)  # an XML 1.0 parser accepts it
        assert any("red" in (e.get("message") or "") + (e.text or "") for e in tree.iter("error"))
    # the same through `gpuemu report` from the store
    done = relkit.run_cli(root, "report", "--format", "junit", "--output", str(tmp_path / "stored.xml"))
    ET.fromstring((tmp_path / "stored.xml").read_text(encoding="utf-8"))
    relkit.record("bad_input", cases=1)


def test_a_report_that_cannot_be_written_whole_keeps_the_previous_one(tmp_path: Path) -> None:
    """`gpuemu report` reads the store only, so a file-size limit fails the report's own write and nothing else:
    the previous report stays whole (Path.write_text had truncated it first)."""
    root = relkit.good_ws(tmp_path / "ws", ops=24)
    out = tmp_path / "report.json"
    done = relkit.run_check(root, "--quick", "--format", "json", "--output", str(out))
    assert done.returncode == 0, done.stderr
    previous = out.read_bytes()
    limit = 40 << 10  # above what reading the store needs (its 32 KiB shared-memory file), below the report
    assert len(previous) > limit + (8 << 10), len(previous)
    done = relkit.run_cli(root, "report", "--format", "json", "--output", str(out), preexec_fn=_file_size_limit(limit))
    assert done.returncode == 2 and "as it was" in done.stderr, done.stderr
    assert out.read_bytes() == previous
    relkit.record("faults", injected=1)


@pytest.mark.parametrize("where", ["GPUEMU_STORE", "workspace"])
def test_a_store_path_past_sqlites_limit_is_explained(tmp_path: Path, where: str) -> None:
    """SQLite opens no database whose absolute path is over 512 bytes; it said only "unable to open database
    file". The message now names the limit and what to do, exit 2, in the CLI and the gate."""
    deep = tmp_path
    while len(os.fsencode(deep)) < 560:
        deep = deep / ("d" * 60)
    if where == "workspace":
        root = relkit.good_ws(deep / "ws")
        env = relkit.child_env()
    else:
        root = relkit.good_ws(tmp_path / "ws")
        env = relkit.child_env({"GPUEMU_STORE": str(deep / "gpuemu.db")})
    for run in (relkit.run_cli(root, "test", "--quick", env=env), relkit.run_check(root, "--quick", env=env)):
        assert run.returncode == 2, run.stdout[-1500:] + run.stderr[-1500:]
        assert "512 bytes" in run.stderr and "GPUEMU_STORE" in run.stderr, run.stderr
        assert "Traceback" not in run.stderr
    relkit.record("bad_input", cases=1)
