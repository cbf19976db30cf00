"""Machinery of the reliability and security suite: real CLIs, real servers, real workers, real SQLite.

Nothing here fakes a component. ``run_cli`` / ``run_check`` start ``python -m gpuemu_ls`` and the
``gpuemu-ls --check`` entry point as subprocesses; ``start_server`` launches ``python -m
gpuemu_ls.server`` over stdio and drives it with a pytest-lsp client; ``worker_pids`` finds worker
processes through ``/proc`` (children of the zygote ``python -m gpuemu_ls.engine.run.zygote``, or
``python -m gpuemu_ls.engine.run.worker`` processes when ``GPUEMU_NO_ZYGOTE=1``); store helpers open the
SQLite file directly. ``record`` adds to the figures the suite reports (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kit.ops import DOUBLE_PY
from kit.workspace import write_ws
from lsprotocol import types as lsp

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / ".results"
PY = sys.executable
CLI = [PY, "-m", "gpuemu_ls"]
CHECK = [PY, "-c", "import sys; from gpuemu_ls.cli import server_main; sys.exit(server_main())", "--check"]
SERVER_CMD = [PY, "-m", "gpuemu_ls.server"]
ZYGOTE_MARK = "gpuemu_ls.engine.run.zygote"
WORKER_MARK = "gpuemu_ls.engine.run.worker"
#: Options that keep a server quiet and small: nothing runs unless a test asks, no file watching.
QUIET = {
    "mode": "quick",
    "iterations": 1,
    "onSave": False,
    "runOnOpen": "off",
    "watch": "off",
    "pollStoreSeconds": 0.5,
}
LONG = 120.0  # generous: the machine running this suite is shared and loaded


# --- figures -------------------------------------------------------------------------------------
def run_uid() -> str:
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID") or os.environ.get("GPUEMU_REL_RUN")
    if not uid:
        uid = os.environ["GPUEMU_REL_RUN"] = uuid.uuid4().hex
    return uid


def record(category: str, **counts: int) -> None:
    """Add measured counts to the suite's figures (one JSON line per call, one file per process)."""
    RESULTS.mkdir(exist_ok=True)
    line = {"cat": category, "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], **counts}
    with open(RESULTS / f"records-{run_uid()}-{os.getpid()}.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


# --- environment and subprocesses ---------------------------------------------------------------
def child_env(extra: dict[str, str] | None = None, *, no_zygote: bool = False) -> dict[str, str]:
    """The environment of a CLI/server child: no pytest variables, no user config, no store override."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GPUEMU_"))}
    env["GPUEMU_USER_CONFIG"] = "/nonexistent/gpuemu-user-config.toml"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if no_zygote:
        env["GPUEMU_NO_ZYGOTE"] = "1"
    env.update(extra or {})
    return env


def run_cli(
    root: Path,
    *args: str,
    timeout: float = LONG,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    workspace_flag: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``gpuemu [-C root] ARGS`` as a real subprocess."""
    cmd = [*CLI, *(["-C", str(root)] if workspace_flag else []), *args]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=str(cwd or root),
        preexec_fn=preexec_fn,
        check=False,
    )


def start_cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``gpuemu -C root ARGS`` started in ``root`` and left running, its output piped (read it with communicate)."""
    return subprocess.Popen(
        [*CLI, "-C", str(root), *args],
        env=env or child_env(),
        cwd=str(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_check(
    root: Path,
    *args: str,
    timeout: float = LONG,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``gpuemu-ls --check ROOT ARGS`` (the CI gate's own entry point) as a real subprocess."""
    return subprocess.run(
        [*CHECK, str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=str(root if root.is_dir() else root.parent),
        preexec_fn=preexec_fn,
        check=False,
    )


def drop_dac_caps() -> None:
    """preexec_fn: without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH even root obeys file modes (chmod 000)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: dropped from the bounding set before exec
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")


def no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text


# --- processes through /proc -------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest[0], int(rest[1])  # state, ppid


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ppids() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[0] not in ("Z", "X"):
                out[int(entry)] = st[1]
    return out


def descendants(pid: int) -> list[int]:
    parents = ppids()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt = [c for c, p in parents.items() if p in frontier]
        found += nxt
        frontier = nxt
    return found


def worker_pids(top: int) -> list[int]:
    """Live worker processes under ``top``: forked children of a zygote, or ``-m ...engine.worker`` processes."""
    parents = ppids()
    out = []
    for pid in descendants(top):
        cl = cmdline(pid)
        if WORKER_MARK in cl or (ZYGOTE_MARK in cl and ZYGOTE_MARK in cmdline(parents.get(pid, 0))):
            out.append(pid)
    return out


def zygote_pids(top: int) -> list[int]:
    parents = ppids()
    return [p for p in descendants(top) if ZYGOTE_MARK in cmdline(p) and ZYGOTE_MARK not in cmdline(parents.get(p, 0))]


def gpuemu_processes() -> list[int]:
    """Every live process of this machine that runs gpuemu code (workers, zygotes, servers, CLIs)."""
    return [p for p in ppids() if "gpuemu_ls" in cmdline(p)]


def wait_until(pred: Callable[[], Any], timeout: float = LONG, what: str = "condition", step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


def wait_gone(pids: Iterable[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive after ``timeout`` seconds (empty when all are gone)."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_all(pids: Iterable[int]) -> None:
    """Clean-up of processes a test started (by pid, never by name)."""
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


# --- workspaces ----------------------------------------------------------------------------------
HEADER = """[project]
name = "{name}"

[validation]
dtypes = ["float32"]
{validation}
[ci.quick]
iterations = {quick}
"""


def op_block(
    name: str,
    body: str,
    *,
    dims: str = "B = { min = 1, max = 4, default = 2 }\nN = { min = 2, max = 16, default = 8 }",
    layouts: str = '["contiguous"]',
    distributions: str = '["normal"]',
) -> str:
    """An [[ops]] entry with one small input ``x[B, N]``; ``body`` holds module/reference/op_script/timeout lines."""
    return (
        f'\n[[ops]]\nname = "{name}"\n{body.strip()}\nlayouts = {layouts}\ndistributions = {distributions}\n'
        f'[ops.inputs.x]\nshape = ["B", "N"]\n[ops.dims]\n{dims}\n'
    )


GOOD_PY = DOUBLE_PY


def good_ws(root: Path, *, name: str = "good", quick: int = 2, ops: int = 1, validation: str = "") -> Path:
    toml = HEADER.format(name=name, validation=validation, quick=quick)
    for i in range(ops):
        toml += op_block(f"double{i}" if ops > 1 else "double", 'module = "kern:double"\nreference = "kern:reference"')
    return write_ws(root, toml, {"kern.py": GOOD_PY})


def case_params(cases: Iterable[Any], bug: Callable[[Any], str | None]) -> list[Any]:
    """One pytest param per case, by name; a case with a known bug (``bug(case)``) is a strict xfail with it."""
    import pytest

    return [
        pytest.param(c.name, marks=[pytest.mark.xfail(strict=True, reason=bug(c))] if bug(c) else [], id=c.name)
        for c in cases
    ]


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line of ``path`` holding ``needle``."""
    for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in text:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


# --- the store -----------------------------------------------------------------------------------
def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    return conn


def integrity(path: Path) -> str:
    conn = connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def counts(path: Path) -> dict[str, int]:
    conn = connect(path)
    try:
        return {
            t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
            for t in ("runs", "cases", "op_results", "snapshots")
        }
    finally:
        conn.close()


def fingerprint(path: Path) -> dict[str, Any]:
    """What the store holds now, to check later that every one of these rows is still there unchanged."""
    conn = connect(path)
    try:
        out: dict[str, Any] = {}
        for table, key in (("runs", "id"), ("cases", "id"), ("op_results", "run_id, op, kind"), ("snapshots", "id")):
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            out[table] = {_row_key(table, r): hashlib.sha256(repr(r).encode()).hexdigest() for r in rows}
        return out
    finally:
        conn.close()


def _row_key(table: str, row: tuple[Any, ...]) -> str:
    return repr(row[:3]) if table == "op_results" else repr(row[0])


def intact_since(path: Path, before: dict[str, Any]) -> list[str]:
    """Rows of ``before`` that are missing or changed now (``runs`` may only gain finished_at/status)."""
    now = fingerprint(path)
    problems = []
    for table, rows in before.items():
        for key, digest in rows.items():
            if key not in now[table]:
                problems.append(f"{table} row {key} lost")
            elif now[table][key] != digest and table != "runs":
                problems.append(f"{table} row {key} changed")
    return problems


def store_rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# --- the language server -------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """pygls hands custom messages over as namedtuples: back to plain JSON values."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


CAPS = lsp.ClientCapabilities(
    window=lsp.WindowClientCapabilities(work_done_progress=True),
    text_document=lsp.TextDocumentClientCapabilities(
        synchronization=lsp.TextDocumentSyncClientCapabilities(did_save=True),
        publish_diagnostics=lsp.PublishDiagnosticsClientCapabilities(related_information=True),
        hover=lsp.HoverClientCapabilities(content_format=[lsp.MarkupKind.Markdown]),
        code_action=lsp.CodeActionClientCapabilities(),
        code_lens=lsp.CodeLensClientCapabilities(),
        completion=lsp.CompletionClientCapabilities(),
        definition=lsp.DefinitionClientCapabilities(),
        document_symbol=lsp.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
    ),
    workspace=lsp.WorkspaceClientCapabilities(workspace_folders=True, configuration=False),
)


def _converter() -> Any:
    """pygls' converter, but responses and notifications keep plain dicts (no namedtuple per object: a
    10,000-op discoverOps answer would otherwise cost the test client seconds)."""
    from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage, default_converter

    converter = default_converter()

    def raw(obj: dict[str, Any], cls: type) -> Any:
        return cls(**obj)

    for cls in (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage):
        converter.register_structure_hook(cls, raw)
    return converter


def make_client() -> Any:
    """pytest-lsp's test client (its default features), recording ``gpuemu/opState`` in ``client.op_states``."""
    from pytest_lsp.client import LanguageClient, register_lsp_features

    client = LanguageClient(converter_factory=_converter)
    register_lsp_features(client)
    client.op_states = []

    @client.feature("gpuemu/opState")
    def _op_state(params: Any) -> None:
        client.op_states.append(plain(params))

    return client


async def start_server(
    root: Path,
    options: dict[str, Any] | None = None,
    *,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    log_file: Path | None = None,
) -> Any:
    """A pytest-lsp client connected to a fresh ``python -m gpuemu_ls.server`` on ``root``, initialized.

    The client records ``gpuemu/opState`` notifications in ``client.op_states``; ``client.server_pid``
    is the server's pid.
    """
    client = make_client()

    args = ["--log-file", str(log_file)] if log_file else []
    await client.start_io(*SERVER_CMD, *args, env=env or child_env(), cwd=str(root), preexec_fn=preexec_fn)
    client.server_pid = client._server.pid
    client.log_file = log_file
    await asyncio.wait_for(
        client.initialize_session(
            lsp.InitializeParams(
                capabilities=CAPS,
                root_uri=root.resolve().as_uri(),
                workspace_folders=[lsp.WorkspaceFolder(uri=root.resolve().as_uri(), name=root.name)],
                initialization_options=QUIET if options is None else options,
            )
        ),
        LONG,
    )
    return client


async def request(client: Any, method: str, params: Any = None, timeout: float = LONG) -> Any:
    return plain(
        await asyncio.wait_for(
            client.protocol.send_request_async(method, params if params is not None else {}), timeout
        )
    )


async def answers(client: Any, root: Path | None = None, timeout: float = 60.0) -> bool:
    """The server is alive and answers a custom request (discoverOps) and a standard one (hover)."""
    assert client._server.returncode is None, f"server exited with {client._server.returncode}"
    got = await request(client, "gpuemu/discoverOps", {}, timeout)
    assert isinstance(got, dict) and "workspaces" in got, got
    if root is not None:
        await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(
                    lsp.TextDocumentIdentifier((root / "gpuemu.toml").resolve().as_uri()), lsp.Position(0, 0)
                )
            ),
            timeout,
        )
    return True


async def wait_for(pred: Callable[[], Any], timeout: float = LONG, what: str = "condition", client: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if client is not None and client._server.returncode is not None:
            raise AssertionError(f"server exited ({client._server.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


def diags(client: Any, path: Path) -> list[lsp.Diagnostic]:
    return list(client.diagnostics.get(path.resolve().as_uri(), []))


def open_doc(client: Any, path: Path, text: str | None = None, version: int = 1) -> None:
    text = path.read_text(encoding="utf-8", errors="replace") if text is None else text
    lang = {".py": "python", ".toml": "toml", ".cu": "cuda"}.get(path.suffix, "plaintext")
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=path.resolve().as_uri(), language_id=lang, version=version, text=text)
        )
    )


def change_doc(client: Any, path: Path, text: str, version: int) -> None:
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(uri=path.resolve().as_uri(), version=version),
            [lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def save_doc(client: Any, path: Path) -> None:
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(path.resolve().as_uri())))


async def stop_server(client: Any, timeout: float = 60.0) -> int | None:
    """Shut the server down the LSP way (shutdown, exit); its exit code (None if it had to be killed)."""
    server = client._server
    code: int | None = None
    try:
        if server.returncode is None:
            await asyncio.wait_for(client.shutdown_async(None), timeout)
            client.exit(None)
            await asyncio.wait_for(server.wait(), timeout)
        code = server.returncode
    except (asyncio.TimeoutError, TimeoutError, RuntimeError, ConnectionError, BrokenPipeError):
        code = None
    finally:
        await force_close(client)
    return code


def clean_exit(code: int | None) -> None:
    """The suite's figures count a server that did not exit 0 (``stop_server``'s code); then it must have."""
    record("server", unexpected_exits=int(code != 0))
    assert code == 0, f"the server exited with {code}"


async def force_close(client: Any) -> None:
    server = client._server
    if server is not None and server.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            server.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait(), 10)
    client._stop_event.set()
    if client._stderr_forwarder is not None:
        client._stderr_forwarder.cancel()
    for task in list(client._async_tasks):
        task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.gather(*client._async_tasks, return_exceptions=True)


# --- finding every process a run started, wherever it was reparented ------------------------------
TAG_VAR = "GPUEMU_REL_TAG"


def new_tag() -> str:
    return uuid.uuid4().hex


def tagged(tag: str) -> list[int]:
    """Live processes whose environment holds ``GPUEMU_REL_TAG=tag`` (children inherit it: workers, zygotes,
    anything an op started), so leftovers are found even after they were reparented to init."""
    needle = f"{TAG_VAR}={tag}".encode()
    out = []
    for pid in ppids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(pid)
    return out


async def execute(client: Any, command: str, *args: Any, timeout: float = LONG) -> Any:
    """``workspace/executeCommand`` with plain JSON arguments; the result as plain JSON."""
    got = await asyncio.wait_for(
        client.workspace_execute_command_async(lsp.ExecuteCommandParams(command=command, arguments=list(args))), timeout
    )
    return plain(got)
