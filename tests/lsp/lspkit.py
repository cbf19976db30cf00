"""Machinery of the gpuemu-ls end-to-end tests: the real server as a subprocess, driven by a pytest-lsp client.

Nothing here fakes the server: ``Launcher.start(root, ...)`` launches ``python -m gpuemu_ls.server`` over stdio
(or ``--tcp``), initializes it with the recorded VS Code or Neovim client capabilities, and hands back a
:class:`GpuemuClient` that behaves like an editor would: it answers ``window/showDocument``,
``workspace/applyEdit`` (applied to its in-memory copy of the files), ``window/workDoneProgress/create``,
``client/registerCapability`` and ``workspace/configuration``, and records every ``publishDiagnostics``,
``$/progress``, ``window/showMessage`` and ``gpuemu/opState`` the server sends, with timestamps.

Client fix (see /work/shared/DESIGN.md, verified toolchain facts): lsprotocol 2025.0.0 structures any
``Command | CodeAction`` object that has a ``command`` key as a bare ``Command``, so a Python client reads a
``CodeAction`` carrying a command as a ``Command`` (losing kind, diagnostics, edit). ``fixed_converter``
registers a structure hook that yields ``CodeAction`` for such objects. Custom messages (``gpuemu/*``)
are kept as plain dicts instead of pygls' namedtuples.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Union

import pytest
import pytest_lsp
from kit.cli import env as child_env
from kit.ops import op_toml, project_toml
from kit.workspace import EXAMPLES
from lsprotocol import types as lsp
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage, default_converter
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, LanguageClient

SERVER_CMD = [sys.executable, "-m", "gpuemu_ls.server"]
CAPABILITIES = {"vscode": "visual-studio-code", "neovim": "neovim"}
#: init options that keep every run small: quick mode, a handful of cases, fast store polling; no first run of
#: every op when the workspace opens (tests/lsp/test_first_run.py turns it on where it is the subject)
FAST: dict[str, Any] = {"mode": "quick", "iterations": 6, "pollStoreSeconds": 0.3, "runOnOpen": "off"}
FINAL_STATES = {"passed", "failed", "edge", "not_judged", "error", "not_run", "cancelled", "errored"}
DEFAULT_TIMEOUT = 60.0


# --- the client's converter --------------------------------------------------------------------------
_CODE_ACTION_ONLY_KEYS = ("kind", "diagnostics", "edit", "isPreferred", "disabled", "data")


def fixed_converter() -> Any:
    """pygls' default converter, with CodeAction-vs-Command fixed and custom messages kept as dicts."""
    converter = default_converter()

    def code_action_or_command(obj: Any, _type: Any) -> lsp.Command | lsp.CodeAction:
        if isinstance(obj, dict) and (
            any(k in obj for k in _CODE_ACTION_ONLY_KEYS) or isinstance(obj.get("command"), dict)
        ):
            return converter.structure(obj, lsp.CodeAction)
        return converter.structure(obj, lsp.Command)

    converter.register_structure_hook(Union[lsp.Command, lsp.CodeAction], code_action_or_command)  # noqa: UP007

    def raw(obj: dict[str, Any], cls: type) -> Any:  # no namedtuples: messages we define stay dicts
        return cls(**obj)

    for cls in (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage):
        converter.register_structure_hook(cls, raw)
    return converter


# --- text edits -------------------------------------------------------------------------------------
def _offset(text: str, pos: lsp.Position) -> int:
    lines = text.split("\n")
    line = min(pos.line, len(lines) - 1)
    return sum(len(x) + 1 for x in lines[:line]) + min(pos.character, len(lines[line]))


def apply_text_edits(text: str, edits: Iterable[lsp.TextEdit]) -> str:
    """Apply LSP text edits (all relative to ``text``), last first."""
    spans = sorted(
        ((_offset(text, e.range.start), _offset(text, e.range.end), e.new_text) for e in edits),
        key=lambda s: (s[0], s[1]),
        reverse=True,
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def uri_path(uri: str) -> Path:
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(uri).path))


def uri_of(path: Path) -> str:
    return path.resolve().as_uri()


def line_of(text: str, needle: str, start: int = 0) -> int:
    """0-based index of the first line at or after ``start`` containing ``needle``."""
    for i, line in enumerate(text.split("\n")):
        if i >= start and needle in line:
            return i
    raise AssertionError(f"{needle!r} not in text")


# --- the client ---------------------------------------------------------------------------------------
class GpuemuClient(LanguageClient):
    """A pytest-lsp client that records what an editor would see, with helpers to wait for it."""

    def __init__(self, kind: str) -> None:
        super().__init__(converter_factory=fixed_converter)
        self.kind = kind
        self.root: Path | None = None
        self.init_result: lsp.InitializeResult | None = None
        self.op_states: list[dict[str, Any]] = []
        self.registrations: list[lsp.Registration] = []
        self.applied_edits: list[lsp.ApplyWorkspaceEditParams] = []
        self.message_requests: list[lsp.ShowMessageRequestParams] = []
        self.message_answer: str | None = "Apply"  # the action the "user" picks in a showMessageRequest
        self.progress_log: list[tuple[float, str, Any]] = []  # (time, token, begin/report/end value)
        self.created_tokens: list[str] = []
        self.configuration_requests: list[lsp.ConfigurationParams] = []
        self.lens_refreshes = 0
        self.diagnostic_log: list[tuple[float, str, list[lsp.Diagnostic]]] = []
        self.files: dict[str, str] = {}  # in-memory copies the client edits (uri -> text)
        self.versions: dict[str, int] = {}  # open documents
        self.log_file: Path | None = None
        self.traces: list[lsp.LogTraceParams] = []  # $/logTrace

    # what the server sent -------------------------------------------------------------------------
    def diags(self, target: Path | str) -> list[lsp.Diagnostic]:
        return list(self.diagnostics.get(_uri(target), []))

    def gpuemu_diags(self, target: Path | str, op: str | None = None) -> list[lsp.Diagnostic]:
        out = [d for d in self.diags(target) if d.source == "gpuemu"]
        return [d for d in out if op is None or (isinstance(d.data, dict) and d.data.get("op") == op)]

    def states(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        return [s for s in self.op_states[since:] if s.get("name") == name]

    def message_texts(self) -> list[str]:
        return [m.message for m in self.messages]

    # waiting ----------------------------------------------------------------------------------------
    async def wait_for(self, pred: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, what: str = "condition") -> Any:
        """Poll ``pred`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            got = pred()
            if got:
                return got
            if self._server is not None and self._server.returncode is not None:
                raise AssertionError(f"server exited ({self._server.returncode}) while waiting for {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.debug_tail()}")
            await asyncio.sleep(0.02)

    async def wait_diagnostics(
        self,
        target: Path | str,
        pred: Callable[[list[lsp.Diagnostic]], Any] = bool,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        missing_ok: bool = False,
    ) -> list[lsp.Diagnostic]:
        """The diagnostics last published for ``target`` once they satisfy ``pred`` (``missing_ok``: a file
        nothing was ever published for counts as having none)."""
        uri = _uri(target)

        def check() -> list[lsp.Diagnostic] | None:
            if uri not in self.diagnostics:
                return [] if missing_ok and pred([]) else None
            d = list(self.diagnostics[uri])
            return d if pred(d) else None

        got = await self.wait_for(
            lambda: (check(),) if check() is not None else None,
            timeout,
            f"diagnostics on {uri_path(uri).name} matching {getattr(pred, '__name__', pred)}",
        )
        return got[0]

    async def wait_op_diagnostic(
        self, target: Path | str, op: str, timeout: float = DEFAULT_TIMEOUT, *, code: str | None = None
    ) -> lsp.Diagnostic:
        """The first diagnostic of ``op`` (with ``code``, if given) published on ``target``."""

        def mine(d: lsp.Diagnostic) -> bool:
            return _op_of(d) == op and (code is None or d.code == code)

        diags = await self.wait_diagnostics(target, lambda ds: any(mine(d) for d in ds), timeout)
        return next(d for d in diags if mine(d))

    async def wait_state(
        self, name: str, states: Iterable[str] = FINAL_STATES, since: int = 0, timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """The first ``gpuemu/opState`` of ``name`` in ``states`` received at index ``since`` or later."""
        wanted = set(states)
        return await self.wait_for(
            lambda: next(
                (s for s in self.op_states[since:] if s.get("name") == name and s.get("state") in wanted), None
            ),
            timeout,
            f"opState of {name} in {sorted(wanted)}",
        )

    def debug_tail(self) -> str:
        states = [(s.get("name"), s.get("state"), s.get("done"), s.get("total")) for s in self.op_states[-12:]]
        log = ""
        if self.log_file is not None and self.log_file.exists():
            log = "\n".join(line[:400] for line in self.log_file.read_text(errors="replace").splitlines()[-30:])
        return f"opStates: {states}\nmessages: {self.message_texts()[-6:]}\nserver log tail:\n{log}"

    # acting like an editor --------------------------------------------------------------------------
    def open(self, path: Path, text: str | None = None, language: str | None = None) -> str:
        uri = uri_of(path)
        text = path.read_text(encoding="utf-8") if text is None else text
        self.files[uri] = text
        self.versions[uri] = 1
        lang = language or {".py": "python", ".toml": "toml", ".cu": "cuda"}.get(path.suffix, "plaintext")
        self.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri=uri, language_id=lang, version=1, text=text))
        )
        return uri

    def change(self, path: Path, text: str) -> None:
        """An unsaved edit of an open buffer (full-text sync)."""
        uri = uri_of(path)
        if uri not in self.versions:
            self.open(path)
        self.versions[uri] += 1
        self.files[uri] = text
        self.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                [lsp.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def save(self, path: Path, text: str | None = None) -> None:
        """What an editor does on :w / Ctrl+S: (open,) change the buffer, write the file, didSave."""
        uri = uri_of(path)
        if uri not in self.versions:
            self.open(path)
        if text is not None:
            if text != self.files.get(uri):
                self.change(path, text)
            path.write_text(text, encoding="utf-8")
        else:
            path.write_text(self.files[uri], encoding="utf-8")
        self.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))

    def close_doc(self, path: Path) -> None:
        uri = uri_of(path)
        self.versions.pop(uri, None)
        self.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))

    async def request(self, method: str, params: Any = None, timeout: float = DEFAULT_TIMEOUT) -> Any:
        return await asyncio.wait_for(
            self.protocol.send_request_async(method, params if params is not None else {}), timeout
        )

    async def execute(self, command: str, *args: Any, timeout: float = DEFAULT_TIMEOUT) -> Any:
        return await asyncio.wait_for(
            self.workspace_execute_command_async(lsp.ExecuteCommandParams(command=command, arguments=list(args))),
            timeout,
        )

    async def code_actions(self, path: Path, diagnostics: list[lsp.Diagnostic]) -> list[lsp.CodeAction | lsp.Command]:
        rng = diagnostics[0].range
        got = await self.text_document_code_action_async(
            lsp.CodeActionParams(
                lsp.TextDocumentIdentifier(uri_of(path)), rng, lsp.CodeActionContext(diagnostics=diagnostics)
            )
        )
        return list(got or [])

    async def hover(self, path: Path, line: int, character: int = 0) -> lsp.Hover | None:
        return await self.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(uri_of(path)), lsp.Position(line, character))
        )

    async def code_lens(self, path: Path) -> list[lsp.CodeLens]:
        got = await self.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri_of(path))))
        return list(got or [])

    def text(self, path: Path) -> str:
        """The client's copy of a file (edited by workspace/applyEdit), else the file on disk."""
        return self.files.get(uri_of(path)) or path.read_text(encoding="utf-8")

    def progress(self, token: str) -> list[Any]:
        return [v for _, t, v in self.progress_log if t == token]

    def progress_tokens(self, title_part: str) -> list[str]:
        """Tokens whose begin title contains ``title_part``, in the order they began."""
        return [
            t for _, t, v in self.progress_log if isinstance(v, lsp.WorkDoneProgressBegin) and title_part in v.title
        ]


def _uri(target: Path | str) -> str:
    return target if isinstance(target, str) else uri_of(target)


def _op_of(d: lsp.Diagnostic) -> str | None:
    return d.data.get("op") if isinstance(d.data, dict) else None


# --- client-side handlers (what the editor answers) -------------------------------------------------------
def _apply_edit(client: GpuemuClient, params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
    client.applied_edits.append(params)
    edit = params.edit
    per_uri: dict[str, list[lsp.TextEdit]] = {}
    for uri, edits in (edit.changes or {}).items():
        per_uri.setdefault(uri, []).extend(edits)
    for dc in edit.document_changes or []:
        if isinstance(dc, lsp.TextDocumentEdit):
            per_uri.setdefault(dc.text_document.uri, []).extend(e for e in dc.edits if isinstance(e, lsp.TextEdit))
        else:
            return lsp.ApplyWorkspaceEditResult(applied=False, failure_reason=f"unsupported {type(dc).__name__}")
    for uri, edits in per_uri.items():
        base = client.files.get(uri)
        if base is None:
            base = uri_path(uri).read_text(encoding="utf-8")
        client.files[uri] = apply_text_edits(base, edits)
    return lsp.ApplyWorkspaceEditResult(applied=True)


def _show_message_request(client: GpuemuClient, params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem | None:
    client.message_requests.append(params)
    titles = [a.title for a in params.actions or []]
    return lsp.MessageActionItem(client.message_answer) if client.message_answer in titles else None


def _show_document(client: GpuemuClient, params: lsp.ShowDocumentParams) -> lsp.ShowDocumentResult:
    client.shown_documents.append(params)
    return lsp.ShowDocumentResult(success=True)


def _register_capability(client: GpuemuClient, params: lsp.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)
    return None


def _unregister_capability(client: GpuemuClient, params: lsp.UnregistrationParams) -> None:
    return None


def _work_done_create(client: GpuemuClient, params: lsp.WorkDoneProgressCreateParams) -> None:
    client.created_tokens.append(str(params.token))
    client.progress_reports.setdefault(params.token, [])
    return None


def _progress(client: GpuemuClient, params: lsp.ProgressParams) -> None:
    value = params.value if isinstance(params.value, dict) else {}
    kind = value.get("kind")
    type_ = {
        "begin": lsp.WorkDoneProgressBegin,
        "report": lsp.WorkDoneProgressReport,
        "end": lsp.WorkDoneProgressEnd,
    }.get(kind)
    if type_ is None:
        return
    v = client.protocol._converter.structure(value, type_)
    client.progress_reports.setdefault(params.token, []).append(v)
    client.progress_log.append((time.monotonic(), str(params.token), v))


def _configuration(client: GpuemuClient, params: lsp.ConfigurationParams) -> list[Any]:
    client.configuration_requests.append(params)
    return [client.get_configuration(section=item.section, scope_uri=item.scope_uri) for item in params.items]


def _code_lens_refresh(client: GpuemuClient, params: None) -> None:
    client.lens_refreshes += 1


def _publish_diagnostics(client: GpuemuClient, params: lsp.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.diagnostic_log.append((time.monotonic(), params.uri, list(params.diagnostics)))


def _log_trace(client: GpuemuClient, params: lsp.LogTraceParams) -> None:
    client.traces.append(params)


def _op_state(client: GpuemuClient, params: Any) -> None:
    state = dict(params) if isinstance(params, dict) else params
    state["_t"] = time.monotonic()
    client.op_states.append(state)


CLIENT_FEATURES: dict[str, Callable[..., Any]] = {
    **DEFAULT_CLIENT_FEATURES,
    lsp.WORKSPACE_APPLY_EDIT: _apply_edit,
    lsp.WINDOW_SHOW_DOCUMENT: _show_document,
    lsp.WINDOW_SHOW_MESSAGE_REQUEST: _show_message_request,
    lsp.CLIENT_REGISTER_CAPABILITY: _register_capability,
    lsp.CLIENT_UNREGISTER_CAPABILITY: _unregister_capability,
    lsp.WINDOW_WORK_DONE_PROGRESS_CREATE: _work_done_create,
    lsp.PROGRESS: _progress,
    lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _publish_diagnostics,
    lsp.WORKSPACE_CONFIGURATION: _configuration,
    lsp.WORKSPACE_CODE_LENS_REFRESH: _code_lens_refresh,
    lsp.LOG_TRACE: _log_trace,
    "gpuemu/opState": _op_state,
}


def make_client(kind: str, configuration: dict[str, Any] | None = None) -> GpuemuClient:
    client = GpuemuClient(kind)
    if configuration is not None:
        client.set_configuration(configuration)
    for method, fn in CLIENT_FEATURES.items():
        client.feature(method)(fn)
    return client


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """kit.cli's child environment (no store override, no user defaults), unbuffered, plus ``extra``."""
    return child_env(PYTHONUNBUFFERED="1", **(extra or {}))


async def start_cli(root: Path, *args: str, pipe: bool = False) -> asyncio.subprocess.Process:
    """``gpuemu ARGS`` (python -m gpuemu_ls) in ``root`` as an asyncio process, with ``server_env()``; its
    output piped (``pipe``) or discarded."""
    stream = asyncio.subprocess.PIPE if pipe else asyncio.subprocess.DEVNULL
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuemu_ls", *args, cwd=str(root), env=server_env(), stdout=stream, stderr=stream
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- launching ------------------------------------------------------------------------------------------
class Launcher:
    """Starts real servers for one test and shuts them all down afterwards."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.clients: list[GpuemuClient] = []
        self.procs: list[asyncio.subprocess.Process] = []

    @property
    def capabilities(self) -> lsp.ClientCapabilities:
        return pytest_lsp.client_capabilities(CAPABILITIES[self.kind])

    async def start(
        self,
        root: Path,
        options: dict[str, Any] | None = None,
        *,
        configuration: dict[str, Any] | None = None,
        tcp: bool = False,
        initialize: bool = True,
    ) -> GpuemuClient:
        """A client connected to a fresh server whose workspace folder is ``root``, initialized."""
        client = make_client(self.kind, configuration)
        client.root = root.resolve()
        client.log_file = self.tmp_path / f"server-{len(self.clients)}.log"
        args = ["--log-file", str(client.log_file)]
        if tcp:
            port = free_port()
            proc = await asyncio.create_subprocess_exec(
                *SERVER_CMD,
                "--tcp",
                f"127.0.0.1:{port}",
                *args,
                env=server_env(),
                cwd=str(root),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            self.procs.append(proc)
            deadline = time.monotonic() + 30
            while True:
                try:
                    await client.start_tcp("127.0.0.1", port)
                    break
                except OSError:
                    if proc.returncode is not None or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        else:
            await client.start_io(*SERVER_CMD, *args, env=server_env(), cwd=str(root))
        self.clients.append(client)
        if initialize:
            folder = lsp.WorkspaceFolder(uri=uri_of(root), name=root.name)
            client.init_result = await asyncio.wait_for(
                client.initialize_session(
                    lsp.InitializeParams(
                        capabilities=self.capabilities,
                        root_uri=uri_of(root),
                        workspace_folders=[folder],
                        initialization_options=FAST if options is None else options,
                    )
                ),
                60,
            )
        return client

    async def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                if client.error is None and client.capabilities is not None:
                    await asyncio.wait_for(client.shutdown_async(None), 10)
                    client.exit(None)
            server = client._server
            if server is not None:
                try:
                    await asyncio.wait_for(server.wait(), 10)
                except (asyncio.TimeoutError, TimeoutError):
                    with contextlib.suppress(ProcessLookupError):
                        server.kill()
                    await server.wait()
            client._stop_event.set()
            if client._stderr_forwarder is not None:
                client._stderr_forwarder.cancel()
            for task in client._async_tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*client._async_tasks, return_exceptions=True)
        for proc in self.procs:
            if proc.returncode is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


# --- workspaces -------------------------------------------------------------------------------------------
_BLOCK_SPLIT = re.compile(r"^\[\[ops\]\]\s*$", re.M)


def buggy_blocks() -> tuple[str, dict[str, str]]:
    """examples/buggy/gpuemu.toml as (header, {op name: its [[ops]] block}), comments between blocks dropped."""
    text = (EXAMPLES / "buggy" / "gpuemu.toml").read_text(encoding="utf-8")
    parts = _BLOCK_SPLIT.split(text)
    header = _strip_trailing_comments(parts[0])
    blocks = {}
    for body in parts[1:]:
        block = "[[ops]]" + _strip_trailing_comments(body)
        name = re.search(r'^name\s*=\s*"([^"]+)"', block, re.M)
        assert name is not None
        blocks[name.group(1)] = block
    return header, blocks


def _strip_trailing_comments(chunk: str) -> str:
    lines = chunk.rstrip("\n").split("\n")
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return "\n".join(lines) + "\n"


def buggy_toml(ops: Iterable[str], *, extra: str = "", replace: dict[str, str] | None = None) -> str:
    header, blocks = buggy_blocks()
    # the editor tests' quick runs are 6 cases: keep them float32 (the half-precision cases quick mode adds
    # by default are planning's business, tested in tests/engine and tests/cli)
    header += '\n[ci]\nquick_dtypes = ["float32"]\n'
    text = header + "".join("\n" + blocks[o] for o in ops) + extra
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def make_buggy_workspace(dest: Path, ops: Iterable[str], **kw: Any) -> Path:
    """A copy of examples/buggy whose gpuemu.toml holds only ``ops`` (the kernels and refs all come along)."""
    shutil.copytree(EXAMPLES / "buggy", dest, ignore=shutil.ignore_patterns(".gpuemu", "__pycache__", "*.md"))
    (dest / "gpuemu.toml").write_text(buggy_toml(ops, **kw), encoding="utf-8")
    return dest


TINY_HEADER = project_toml(
    project={"name": "tiny", "framework": "numpy"}, validation={"dtypes": ["float32"], "seed": 7}
)


def tiny_op(name: str, module: str, reference: str, *, extra: str = "") -> str:
    """A ``[[ops]]`` entry over one input x of shape [B, N] (B up to 8, N up to 64); ``extra`` is raw TOML."""
    return op_toml(name, module=module, reference=reference, extra=extra, dims={"B": (1, 8, 4), "N": (1, 64, 16)})


#: an op that takes ``DELAY`` seconds per case (GIL-free sleep), and passes
SLOW_PY = """\
import time

DELAY = {delay}


def slow_double(x):
    time.sleep(DELAY)
    return x * 2


def reference(x):
    return x * 2.0
"""


# --- reporting measured latencies --------------------------------------------------------------------------
def record_latency(request: pytest.FixtureRequest, name: str, seconds: float) -> None:
    """Keep a measurement with the test report; the terminal summary lists them all."""
    request.node.user_properties.append((f"latency:{name}", round(seconds, 4)))
    print(f"latency {name}: {seconds * 1000:.0f} ms")
