"""``gpuemu-ls``: the language server (pygls). Wiring only: features call into session/, engine/, diagnostics/.

Validation runs in background jobs (threads driving worker processes), never on the event loop;
every notification a job produces is handed to the loop with ``call_soon_threadsafe``. Options come
from ``initializationOptions`` and ``workspace/configuration`` and are checked at initialize, where
only the enabled features are registered. Test Explorer speaks ``gpuemu/discoverOps``,
``gpuemu/runOps`` and ``gpuemu/opState``, advertised under ``experimental.gpuemu``.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import math
import os
import re
import signal
import sys
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import RPCRequest

from ._version import __version__
from .engine.config.load import CONFIG_NAME, MAX_ITERATIONS, MAX_SEED, find_workspace
from .engine.run.zygote import get_zygote
from .features.code_actions import (
    CALIBRATE,
    COMMANDS,
    MINIMIZE,
    REPRODUCE,
    RUN_ALL,
    RUN_OP,
    RUN_QUICK,
    RUN_THOROUGH,
    code_actions,
    code_lenses,
)
from .features.diagnostics import workspace_diagnostics
from .features.hover import kernel_hover, op_hover
from .features.ranges import op_header_range, op_target
from .features.toml_completion import TRIGGER_CHARACTERS, toml_completions
from .features.toml_definition import toml_definition
from .features.toml_hover import toml_key_hover
from .features.toml_symbols import flat_symbols, toml_symbols
from .options import MODES, ServerOptions
from .session.jobs import Job, JobRunner
from .session.runlog import RunLog
from .session.watcher import FileWatcher, StorePoller
from .session.workspace import WorkspaceSession, find_roots

log = logging.getLogger("gpuemu-ls")
EXPERIMENTAL = {"gpuemu": {"discoverOps": True, "runOps": True, "opState": True, "protocolVersion": 1}}
DISCOVER_OPS, RUN_OPS, OP_STATE = "gpuemu/discoverOps", "gpuemu/runOps", "gpuemu/opState"
FIRST_RUN = "first run"
#: The most verbose window/logMessage type each ``logLevel`` lets through.
LOG_THRESHOLD = {"error": 1, "warning": 2, "info": 3, "log": 4}


class _Answered:
    """A request already answered with an error while it was read (pygls then has nothing to dispatch)."""


class GpuemuProtocol(LanguageServerProtocol):
    """Adds the Test Explorer messages to the advertised capabilities, under ``experimental``; answers every
    request, even one pygls cannot read (wrong params, no ``jsonrpc``, after shutdown), which it would drop."""

    initialized_once = False

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Any:
        if self.initialized_once:  # refused before anything changes: options (trust) are set once
            raise JsonRpcInvalidRequest("initialize was already received; restart the server to change its options")
        result = yield from super().lsp_initialize(params)
        result.capabilities.experimental = EXPERIMENTAL
        self.initialized_once = True
        return result

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        """A cancel for a request already answered is routine (the client raced the answer): a debug line, not
        the warning pygls logs, which editors show as an error in the server's output."""
        if msg_id not in self._request_futures:
            log.debug("$/cancelRequest for %s, which was already answered", msg_id)
            return
        super()._handle_cancel_notification(msg_id)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "method" in data and "id" in data:  # a request: its sender waits for an answer
                error = exc if isinstance(exc, JsonRpcInvalidParams) else JsonRpcInvalidParams()
                detail = f"{error.message}: the parameters of {data.get('method')!r} do not have the expected shape"
                self._send_response(_reply_id(data["id"]), None, JsonRpcInvalidParams(detail).to_response_error())
                return _Answered()
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Answered):
            return
        if isinstance(message, dict) or getattr(message, "jsonrpc", None) != self.VERSION:
            # pygls keeps objects without "jsonrpc" as plain dicts, and drops other versions unanswered
            msg_id, method = _get(message, "id"), _get(message, "method")
            if method is not None and msg_id is not None:
                error = JsonRpcInvalidRequest('not a JSON-RPC 2.0 request ("jsonrpc": "2.0")')
                self._send_response(_reply_id(msg_id), None, error.to_response_error())
            return
        if self._shutdown and isinstance(message, RPCRequest) and message.method != lsp.EXIT:
            error = JsonRpcInvalidRequest(f"{message.method}: the server is shutting down")
            self._send_response(message.id, None, error.to_response_error())
            return
        super().handle_message(message)


def _get(message: Any, key: str) -> Any:
    return message.get(key) if isinstance(message, dict) else getattr(message, key, None)


def _reply_id(msg_id: Any) -> Any:
    """The id to answer with: JSON-RPC ids are strings or numbers; anything else is answered with null."""
    return msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def uri_to_path(uri: str) -> Path | None:
    """The file a ``file:`` URI names; None for any other URI (``untitled:``, ``git:``) or none at all."""
    if not isinstance(uri, str):
        return None
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    try:
        return Path(unquote(parsed.path)).resolve()
    except (ValueError, OSError):  # a NUL byte, a path too long to resolve
        return None


def request_path(uri: Any) -> Path | None:
    """The file a request's document URI names (None: not a file); a string that is not a URI at all is
    the client's error, answered with InvalidParams."""
    if not isinstance(uri, str) or not _SCHEME.match(uri):
        raise JsonRpcInvalidParams(f"not a document URI: {str(uri)[:200]!r}")
    return uri_to_path(uri)


class GpuemuServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "gpuemu-ls", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Full, protocol_cls=GpuemuProtocol
        )
        self.options = ServerOptions()
        self.option_problems: list[str] = []
        self.sessions: dict[Path, WorkspaceSession] = {}
        self.jobs = JobRunner(self._job_event_from_thread)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.published: dict[Path, set[Path]] = {}
        self.running: dict[tuple[Path, str], str] = {}
        self.tokens: dict[int, str] = {}
        self.token_jobs: dict[str, Job] = {}
        self.handled_mtime: dict[Path, float] = {}
        self.watcher: FileWatcher | None = None
        self.poller: StorePoller | None = None
        self.client_watches = False
        self.lock = threading.Lock()
        self.shut_down = False  # `shutdown` was answered: `exit` then ends with status 0
        self.runlog = RunLog()
        self.batch_jobs: dict[str, list[Job]] = {}  # a run's progress token -> its jobs (cancelling it stops them)
        self.first_run_done: set[Path] = set()
        self.ready = False  # `initialized` was handled: a workspace opened later gets its first run at once

    # --- helpers -----------------------------------------------------------------------------
    def post(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the event loop (from any thread)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def supports(self, *path: str) -> bool:
        obj: Any = self.client_capabilities
        for p in path:
            obj = getattr(obj, p, None)
            if obj is None:
                return False
        return bool(obj)

    def message(self, text: str, kind: lsp.MessageType = lsp.MessageType.Info) -> None:
        self.window_show_message(lsp.ShowMessageParams(kind, text))

    def log_line(self, text: str, kind: lsp.MessageType = lsp.MessageType.Info, verbose: str | None = None) -> None:
        """A line of the server's log: ``window/logMessage`` (down to ``logLevel``), and ``$/logTrace`` while the
        client's trace setting is on (``verbose`` added at ``verbose``)."""
        if kind <= LOG_THRESHOLD.get(self.options.log_level, 3):
            self.window_log_message(lsp.LogMessageParams(kind, f"gpuemu: {text}"))
        trace = self.protocol.trace
        if trace in (lsp.TraceValue.Messages, lsp.TraceValue.Verbose):
            self.log_trace(lsp.LogTraceParams(text, verbose if trace == lsp.TraceValue.Verbose else None))

    def session_for(self, path: Path) -> WorkspaceSession | None:
        """The innermost workspace holding ``path``; one is opened for a gpuemu.toml found above it."""
        best = None
        for root, s in self.sessions.items():
            if path.resolve().is_relative_to(root) and (best is None or len(root.parts) > len(best.root.parts)):
                best = s
        if best is None:
            found = find_workspace(path.parent)
            if found is not None:
                return self.add_session(found)
        return best

    def add_session(self, root: Path, *, publish: bool = True) -> WorkspaceSession:
        root = root.resolve()
        if root in self.sessions:
            return self.sessions[root]
        s = WorkspaceSession(root, store_override=self.options.store_path)
        self.sessions[root] = s
        s.load(self._open_text(s.config_path), saved=True)
        s.refresh()
        if self.watcher is not None:
            self.watcher.watch(s)
        if publish:
            self.publish(s)
            if self.ready:
                self.first_run(s)
        return s

    def first_run(self, s: WorkspaceSession) -> None:
        """Validate every op once, in quick mode, when a trusted workspace opens with no stored result, so a
        fresh checkout shows its verdicts without a save (``runOnOpen``); stored results are shown instead."""
        if s.root in self.first_run_done or self.options.run_on_open == "off" or not self.options.trusted:
            return
        self.first_run_done.add(s.root)
        if s.config is None or not s.config.ops or s.views or s.store_error:
            return
        self.validate(s, [o.name for o in s.config.ops], [], FIRST_RUN, mode="quick")

    def _open_text(self, path: Path) -> str | None:
        try:
            doc = self.workspace.get_text_document(path.as_uri())
            return doc.source if doc.version is not None else None
        except Exception:
            return None

    def _toml_text(self, s: WorkspaceSession) -> str:
        return self._open_text(s.config_path) or s.config_path.read_text(encoding="utf-8")

    # --- diagnostics ---------------------------------------------------------------------------
    def publish(self, s: WorkspaceSession) -> None:
        diags = workspace_diagnostics(s, trusted=self.options.trusted)
        before = self.published.get(s.root, set())
        for path in set(diags) | before | {s.config_path}:  # gpuemu.toml always: tells the client a run ended
            self.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(uri=path.as_uri(), diagnostics=diags.get(path, []))
            )
        self.published[s.root] = {p for p, d in diags.items() if d}
        if s.store_error and s.store_error != s.store_error_shown:  # a damaged or unreadable store: say so once
            s.store_error_shown = s.store_error
            self.message(f"gpuemu: {s.store_error}", lsp.MessageType.Error)

    def refresh_and_publish(self, s: WorkspaceSession) -> None:
        """Reread the store off the event loop, then publish on it."""

        def work() -> None:
            s.refresh()
            self.post(self.publish, s)
            self.post(self._refresh_lenses)

        threading.Thread(target=work, name="gpuemu-refresh", daemon=True).start()

    def _refresh_lenses(self) -> None:
        if self.options.code_lens and self.supports("workspace", "code_lens", "refresh_support"):
            try:
                self.workspace_code_lens_refresh(None)
            except Exception:
                pass

    # --- validation ----------------------------------------------------------------------------
    def validate(
        self,
        s: WorkspaceSession,
        ops: Sequence[str],
        kernels: Sequence[str],
        reason: str,
        mode: str | None = None,
        iterations: int | None = None,
    ) -> list[Job]:
        if not self.options.trusted or s.config is None:
            return []
        jobs = [
            self.jobs.validate(
                s, op, mode=mode or self.options.mode, iterations=iterations or self.options.iterations, reason=reason
            )
            for op in ops
        ]
        if self.options.lint:
            jobs += [self.jobs.lint(s, k, reason) for k in kernels]
        batch = self.runlog.start(jobs, reason, mode or self.options.mode, str(s.root))
        if batch is not None:
            self.log_line(self.runlog.start_line(batch))
            if (batch.total > 1 or reason == FIRST_RUN) and self.supports("window", "work_done_progress"):
                batch.token = f"gpuemu-run-{batch.id}"
                self.batch_jobs[batch.token] = jobs
                self.work_done_progress.create(batch.token)
                self.work_done_progress.begin(
                    batch.token,
                    lsp.WorkDoneProgressBegin(
                        title=f"gpuemu: {reason}: {batch.what()}",
                        cancellable=True,
                        percentage=0,
                        message=batch.status(),
                    ),
                )
        return jobs

    def _run_ended(self, job: Job, kind: str, event: dict[str, Any]) -> None:
        """The log line of an op or kernel that ended, and of its run when it was the last; the run's progress."""
        result = event.get("result")
        line, batch, over = self.runlog.finish(job, kind, result)
        outcome = result.outcomes[0] if job.kind == "validate" and getattr(result, "outcomes", None) else None
        detail = "\n".join(t for t in (getattr(outcome, "message", ""), getattr(outcome, "diagnosis", "")) if t)
        self.log_line(line, verbose=detail or None)
        if batch is None:
            return
        if batch.token is not None and not over:
            self.work_done_progress.report(
                batch.token,
                lsp.WorkDoneProgressReport(
                    message=batch.status(), percentage=int(100 * batch.finished / batch.total), cancellable=True
                ),
            )
        if over:
            self.log_line(self.runlog.end_line(batch))
            if batch.token is not None:
                self.work_done_progress.end(batch.token, lsp.WorkDoneProgressEnd(message=batch.summary()))
                self.batch_jobs.pop(batch.token, None)

    def _job_event_from_thread(self, event: dict[str, Any]) -> None:
        self.post(self._job_event, event)

    def _job_event(self, event: dict[str, Any]) -> None:
        job: Job = event["job"]
        kind = event["type"]
        key = (job.session.root, job.name)
        if job.kind == "validate":
            if kind in ("queued", "started", "progress"):
                self.running[key] = f"running, {job.done} of {job.total} cases" if job.total else "queued"
            elif self.running.get(key) is not None:
                self.running.pop(key, None)
        token = self.tokens.get(job.id)
        if kind == "started" and job.kind in ("validate", "lint") and self.supports("window", "work_done_progress"):
            token = f"gpuemu-{job.id}"
            self.tokens[job.id] = token
            self.token_jobs[token] = job
            self.work_done_progress.create(token)
            what = "Validating" if job.kind == "validate" else "Linting"
            self.work_done_progress.begin(
                token,
                lsp.WorkDoneProgressBegin(
                    title=f"gpuemu: {what} {job.name}",
                    cancellable=True,
                    percentage=0,
                    message=f"{job.mode} ({job.reason})" if job.kind == "validate" else job.reason,
                ),
            )
        elif kind == "progress" and token:
            pct = int(100 * job.done / job.total) if job.total else None
            self.work_done_progress.report(
                token,
                lsp.WorkDoneProgressReport(
                    message=f"{job.done} of {job.total} cases, {job.failed} not passed",
                    percentage=pct,
                    cancellable=True,
                ),
            )
        elif kind in ("finished", "cancelled", "failed") and token:
            done = {
                "finished": "done",
                "cancelled": "cancelled (superseded or stopped)",
                "failed": f"internal error: {event.get('error')}",
            }[kind]
            self.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=done))
            self.tokens.pop(job.id, None)
            self.token_jobs.pop(token, None)
        if job.kind in ("validate", "lint"):
            if kind in ("finished", "cancelled", "failed"):
                job.session.stale = True  # a discoverOps answered before the refresh below rereads first
                self._run_ended(job, kind, event)
            self._op_state(job, kind, event)
        if kind == "failed":
            self.message(f"gpuemu: {job.kind} {job.name} failed: {event.get('error')}", lsp.MessageType.Error)
            log.error("job %s failed: %s", job.name, event.get("traceback"))
        if kind in ("finished", "cancelled", "failed") and job.kind in ("validate", "lint"):
            self.refresh_and_publish(job.session)

    def _op_state(self, job: Job, kind: str, event: dict[str, Any]) -> None:
        state = {
            "queued": "queued",
            "started": "running",
            "progress": "running",
            "cancelled": "cancelled",
            "failed": "errored",
        }.get(kind)
        payload: dict[str, Any] = {
            "workspace": str(job.session.root),
            "id": _item_id(job.kind, job.name),
            "name": job.name,
            "kind": "kernel" if job.kind == "lint" else "op",
            "done": job.done,
            "total": job.total,
            "failedCases": job.failed,
        }
        if kind == "finished":
            result = event.get("result")
            if job.kind == "validate" and result is not None and result.outcomes:
                o = result.outcomes[0]
                payload.update(
                    state=o.status,
                    message=o.message,
                    diagnosis=o.diagnosis,
                    failures=[_case_brief(c) for c in o.failures[:20]],
                    cases=len(o.cases),
                )
            elif job.kind == "lint" and result:
                e = result[0]
                payload.update(
                    state=e["status"],
                    message=e.get("summary") or e.get("message", ""),
                    failures=[
                        {
                            "message": f.get("message"),
                            "file": f.get("file"),
                            "line": f.get("line"),
                            "code": f.get("code"),
                        }
                        for f in e.get("findings", [])
                    ],
                )
            else:
                payload.update(state="errored", message="nothing ran")
        else:
            payload["state"] = state
            if kind == "progress":
                case = event.get("case")
                if case is not None and case.status != "passed":
                    payload["lastFailure"] = _case_brief(case)
        self.protocol.notify(OP_STATE, payload)

    # --- file events -----------------------------------------------------------------------------
    def reload(self, s: WorkspaceSession, text: str | None, then: Any = None, *, saved: bool = False) -> None:
        """Reload a workspace's config off the event loop (a big gpuemu.toml takes a while to check).

        Loads run one at a time per workspace, newest wins: a load queued behind a newer one is skipped,
        so a burst of keystrokes costs one check. ``then(old_config)`` runs on the loop afterwards.
        """
        with self.lock:
            s.generation = getattr(s, "generation", 0) + 1
            gen = s.generation
            if getattr(s, "loader", None) is None:
                s.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuemu-config")

        def work() -> None:
            if s.generation != gen:
                return
            old = s.saved_config  # what was on disk before, not the unsaved buffer didChange loaded
            s.load(text, saved=saved)
            if s.generation != gen:
                return
            self.post(self.publish, s)
            if then is not None:
                self.post(then, old)

        s.loader.submit(work)

    def on_changed(self, s: WorkspaceSession, paths: set[Path], reason: str) -> None:
        """Files changed on disk (a save, a checkout): reload the config if needed, validate what is affected."""
        ops: set[str] = set()
        kernels: set[str] = set()
        for path in paths:
            if path == s.config_path:
                continue
            o, k = s.affected(path)
            ops |= set(o)
            kernels |= set(k)
        if s.config_path in paths:

            def after(old: Any) -> None:
                new = s.config
                changed_ops, changed_kernels = set(ops), set(kernels)
                if new is not None:
                    changed_ops |= {o.name for o in new.ops if old is None or _changed(old, o.name, o)}
                    changed_kernels |= {k.name for k in new.kernels if old is None or _kchanged(old, k)}
                if self.options.on_save and (changed_ops or changed_kernels):
                    self.validate(s, sorted(changed_ops), sorted(changed_kernels), reason)

            self.reload(s, self._open_text(s.config_path) if reason == "save" else None, after, saved=True)
            return
        if self.options.on_save and (ops or kernels):
            self.validate(s, sorted(ops), sorted(kernels), reason)

    def watched_change(self, s: WorkspaceSession, paths: set[Path]) -> None:
        fresh = set()
        for p in paths:
            try:
                mtime = p.stat().st_mtime
            except OSError:
                mtime = -1.0
            if self.handled_mtime.get(p) != mtime:  # the editor's own save was handled already
                self.handled_mtime[p] = mtime
                fresh.add(p)
        if fresh:
            self.on_changed(s, fresh, "file changed on disk")


def _item_id(kind: str, name: str) -> str:
    return f"{'kernel' if kind in ('lint', 'kernel') else 'op'}:{name}"


def _case_brief(case: Any) -> dict[str, Any]:
    st = case.stats()
    return {
        "seed": case.seed,
        "status": case.status,
        "kind": case.kind,
        "dtype": case.spec.dtype,
        "shapes": {k: list(v) for k, v in case.spec.shapes.items()},
        "layout": case.spec.layout,
        "distribution": case.spec.distribution,
        "maxAbs": st["max_abs"],
        "tolerance": case.tolerance,
        "message": (case.message or "").strip().splitlines()[0][:300] if case.message else "",
        "replay": f"gpuemu reproduce --op {case.op} --seed {case.seed}",
        "worst": _worst_brief(case),
    }


def _worst_brief(case: Any) -> dict[str, Any] | None:
    """The worst element of a failing case (op and reference values there, for a client's diff), or None."""
    w = case.worst()
    if w is None or w.worst_index is None:
        return None
    return {
        "output": w.output,
        "index": [int(i) for i in w.worst_index],
        "op": _json_number(w.worst_op),
        "ref": _json_number(w.worst_ref),
        "allowed": _json_number(w.worst_allowed),
        "firstIndex": [int(i) for i in w.first_index] if w.first_index is not None else None,
        "mismatches": w.mismatches,
        "total": w.total,
        "examples": {
            k: {"index": list(v.get("index") or []), "op": _json_number(v.get("op")), "ref": _json_number(v.get("ref"))}
            for k, v in (w.examples or {}).items()
        },
    }


def _json_number(x: Any) -> float | str | None:
    """A float for JSON: NaN and infinities as the strings "nan", "inf", "-inf" (JSON has no such numbers)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def _changed(old: Any, name: str, new_op: Any) -> bool:
    try:
        before = old.op(name)
    except KeyError:
        return True
    return before.__dict__ | {"index": 0} != new_op.__dict__ | {"index": 0}


def _kchanged(old: Any, k: Any) -> bool:
    try:
        before = old.kernel(k.name)
    except KeyError:
        return True
    return before.__dict__ | {"index": 0} != k.__dict__ | {"index": 0}


def create_server() -> GpuemuServer:
    server = GpuemuServer()

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: GpuemuServer, params: lsp.InitializeParams) -> None:
        raw = params.initialization_options
        raw = raw.get("gpuemu", raw) if isinstance(raw, dict) else raw
        ls.options, ls.option_problems = ServerOptions().merged(raw, initial=True)
        ls.jobs = JobRunner(ls._job_event_from_thread, ls.options.jobs)
        ls.loop = asyncio.get_running_loop()
        ls.protocol.trace = params.trace or lsp.TraceValue.Off  # then `$/setTrace` (pygls keeps it)
        if ls.options.trusted:
            get_zygote()  # the fork server warms up (imports) while the client finishes initializing
        _register_optional_features(ls)
        # workspaces now, so that documents opened before `initialized` completes find them;
        # their diagnostics wait for `initialized` (nothing may be published before it)
        folders = [uri_to_path(f.uri) for f in params.workspace_folders or []]
        if not folders and (params.root_uri or params.root_path):
            folders = [uri_to_path(params.root_uri) if params.root_uri else Path(params.root_path or ".")]
        for folder in (f for f in folders if f is not None):
            for root in find_roots(folder):
                ls.add_session(root, publish=False)

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: GpuemuServer, params: lsp.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        if ls.supports("workspace", "configuration"):
            try:
                cfg = await ls.workspace_configuration_async(
                    lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="gpuemu")])
                )
                if cfg and isinstance(cfg[0], dict):
                    ls.options, problems = ls.options.merged(cfg[0])
                    ls.option_problems += problems
            except Exception as exc:
                log.warning("workspace/configuration failed: %s", exc)
        for p in ls.option_problems:
            ls.message(p, lsp.MessageType.Warning)
        await _setup_watching(ls)
        ls.poller = StorePoller(
            lambda: list(ls.sessions.values()),
            lambda s: ls.post(ls.refresh_and_publish, s),
            ls.options.poll_store_seconds,
        )
        ls.poller.start()
        for s in list(ls.sessions.values()):  # opened at initialize: stored results and config problems now
            ls.publish(s)
        ls.ready = True
        for s in list(ls.sessions.values()):  # nothing stored yet: validate once (runOnOpen)
            ls.first_run(s)

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: GpuemuServer, _params: Any) -> None:
        ls.shut_down = True
        ls.jobs.shutdown()
        for closer in (ls.watcher, ls.poller):
            if closer is not None:
                closer.close()
        for s in ls.sessions.values():
            s.close()

    @server.feature(lsp.EXIT)
    def exit_(ls: GpuemuServer, _params: Any) -> None:
        terminate(ls, 0 if ls.shut_down else 1)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: GpuemuServer, params: lsp.DidOpenTextDocumentParams) -> None:
        path = uri_to_path(params.text_document.uri)
        s = ls.session_for(path) if path is not None else None
        if s is None:
            return
        if path == s.config_path and params.text_document.text != s.loaded_text:
            # an unsaved buffer, or a file that changed on disk unseen (watch off, a checkout while busy)
            ls.reload(s, params.text_document.text, saved=params.text_document.text == _read_text(path))
        if not ls.options.on_open or s.config is None:
            return
        ops, kernels = s.affected(path)
        mtime = _mtime(path)
        stale = [
            o
            for o in ops
            if ((v := s.view("op", o)) is None or v.finished_at < mtime) and not ls.jobs.is_live(s, "validate", o)
        ]
        stale_k = [k for k in kernels if (v := s.view("kernel", k)) is None or v.finished_at < mtime]
        if stale or stale_k:
            ls.validate(s, stale, stale_k, "open")

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: GpuemuServer, params: lsp.DidChangeTextDocumentParams) -> None:
        path = uri_to_path(params.text_document.uri)
        if path is None or path.name != CONFIG_NAME:
            return
        s = ls.session_for(path)
        if s is not None:  # live config diagnostics from the unsaved buffer; nothing runs
            ls.reload(s, ls.workspace.get_text_document(params.text_document.uri).source)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: GpuemuServer, params: lsp.DidSaveTextDocumentParams) -> None:
        path = uri_to_path(params.text_document.uri)
        s = ls.session_for(path) if path is not None else None
        if s is None:
            return
        ls.handled_mtime[path] = _mtime(path)
        ls.on_changed(s, {path}, "save")

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: GpuemuServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        by_session: dict[Path, set[Path]] = {}
        for ch in params.changes:
            path = uri_to_path(ch.uri)
            s = ls.session_for(path) if path is not None else None
            if s is not None and path is not None and s.owns(path):
                by_session.setdefault(s.root, set()).add(path)
        for root, paths in by_session.items():
            ls.watched_change(ls.sessions[root], paths)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: GpuemuServer, params: lsp.DidChangeConfigurationParams) -> None:
        raw = params.settings.get("gpuemu") if isinstance(params.settings, dict) else None
        if raw is None and ls.supports("workspace", "configuration"):
            try:
                got = await ls.workspace_configuration_async(
                    lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="gpuemu")])
                )
                raw = got[0] if got else None
            except Exception:
                raw = None
        if isinstance(raw, dict):
            ls.options, problems = ls.options.merged(raw)
            for p in problems:
                ls.message(p, lsp.MessageType.Warning)
            for s in ls.sessions.values():
                ls.publish(s)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: GpuemuServer, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        for f in params.event.removed:
            gone = uri_to_path(f.uri)
            for root in [r for r in ls.sessions if gone is not None and r.is_relative_to(gone)]:
                ls.sessions.pop(root).close()
        for f in params.event.added:
            added = uri_to_path(f.uri)
            for root in find_roots(added) if added is not None else []:
                ls.add_session(root)

    @server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def progress_cancel(ls: GpuemuServer, params: lsp.WorkDoneProgressCancelParams) -> None:
        job = ls.token_jobs.get(str(params.token))
        if job is not None:
            job.cancel.set()
        for job in ls.batch_jobs.get(str(params.token), []):  # a whole run
            job.cancel.set()

    @server.feature(DISCOVER_OPS)
    async def discover_ops(ls: GpuemuServer, params: Any) -> dict[str, Any]:
        _checked(DISCOVER_OPS, params, ())  # no parameters: nothing, or an object
        # the statuses agree with every opState already sent: views are made current off the event loop
        for s in list(ls.sessions.values()):
            await asyncio.to_thread(s.fresh)
        return {"workspaces": [_discover(ls, s) for s in ls.sessions.values()]}

    @server.feature(RUN_OPS)
    async def run_ops(ls: GpuemuServer, params: Any) -> dict[str, Any]:
        return await _run_ops(ls, _run_params(params))

    for name in COMMANDS:
        server.command(name)(_command_handler(name))
    return server


def _plain(value: Any) -> Any:
    """pygls hands untyped params over as namedtuple ``Object`` s; turn them back into plain JSON values."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


async def _setup_watching(ls: GpuemuServer) -> None:
    watch = ls.options.watch
    dynamic = ls.supports("workspace", "did_change_watched_files", "dynamic_registration")
    if watch in ("auto", "client") and dynamic:
        globs = ["**/gpuemu.toml", "**/*.py", "**/*.cu", "**/*.cuh", "**/*.h", "**/*.ptx"]
        try:
            await ls.client_register_capability_async(
                lsp.RegistrationParams(
                    registrations=[
                        lsp.Registration(
                            id="gpuemu-watch",
                            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                                watchers=[lsp.FileSystemWatcher(glob_pattern=g) for g in globs]
                            ),
                        )
                    ]
                )
            )
            ls.client_watches = True
            return
        except Exception as exc:
            log.warning("client refused file watching (%s); watching from the server", exc)
    if watch in ("auto", "server") or (watch == "client" and not dynamic):
        ls.watcher = FileWatcher(lambda s, paths: ls.post(ls.watched_change, s, paths))
        for s in ls.sessions.values():
            ls.watcher.watch(s)
        ls.watcher.start()


def _register_optional_features(ls: GpuemuServer) -> None:
    """Only the features the options enable, and the client can use, are registered (and so advertised)."""
    if ls.supports("text_document", "completion"):

        @ls.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS))
        def completion(ls_: GpuemuServer, params: lsp.CompletionParams) -> lsp.CompletionList | None:
            got = _toml_document(ls_, params.text_document.uri)
            if got is None:
                return None
            items = toml_completions(got[0], params.position.line, params.position.character, got[1])
            return lsp.CompletionList(is_incomplete=False, items=items)

    if ls.supports("text_document", "definition"):

        @ls.feature(lsp.TEXT_DOCUMENT_DEFINITION)
        def definition(ls_: GpuemuServer, params: lsp.DefinitionParams) -> lsp.Location | None:
            got = _toml_document(ls_, params.text_document.uri)
            return toml_definition(got[0], params.position.line, params.position.character, got[1]) if got else None

    if ls.supports("text_document", "document_symbol"):

        @ls.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
        def symbols(
            ls_: GpuemuServer, params: lsp.DocumentSymbolParams
        ) -> list[lsp.DocumentSymbol] | list[lsp.SymbolInformation] | None:
            got = _toml_document(ls_, params.text_document.uri)
            if got is None:
                return None
            found = toml_symbols(got[0])
            if ls_.supports("text_document", "document_symbol", "hierarchical_document_symbol_support"):
                return found
            return flat_symbols(found, params.text_document.uri)

    if ls.options.hover:

        @ls.feature(lsp.TEXT_DOCUMENT_HOVER)
        def hover(ls_: GpuemuServer, params: lsp.HoverParams) -> lsp.Hover | None:
            return _hover(ls_, params)

    if ls.options.code_actions:

        @ls.feature(
            lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix])
        )
        def actions(ls_: GpuemuServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
            path = request_path(params.text_document.uri)
            s = ls_.session_for(path) if path is not None else None
            if s is None or s.config is None:
                return None
            return code_actions(s, list(params.context.diagnostics), ls_._toml_text(s)) or None

    if ls.options.code_lens:

        @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
        def lenses(ls_: GpuemuServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
            path = request_path(params.text_document.uri)
            s = ls_.session_for(path) if path is not None else None
            if s is None or path is None:
                return None
            running = {op: text for (root, op), text in ls_.running.items() if root == s.root}
            return code_lenses(s, path, running) or None


def _toml_document(ls: GpuemuServer, uri: Any) -> tuple[str, Path] | None:
    """(the buffer's text, its workspace root) when ``uri`` is a gpuemu.toml; None for any other document."""
    path = request_path(uri)
    if path is None or path.name != CONFIG_NAME:
        return None
    try:
        return ls.workspace.get_text_document(uri).source, path.parent
    except (OSError, UnicodeDecodeError):
        return None


def _hover(ls: GpuemuServer, params: lsp.HoverParams) -> lsp.Hover | None:
    path = request_path(params.text_document.uri)
    s = ls.session_for(path) if path is not None else None
    if s is None or path is None:
        return None
    cfg = s.config
    line = params.position.line
    if path == s.config_path:  # an op or kernel entry's header and name: its results; any other key: its docs
        for op in cfg.ops if cfg is not None else ():
            rng = op_header_range(cfg, op)
            if rng.start.line <= line <= rng.end.line and cfg.positions is not None:
                target = op_target(cfg, op)
                beside = target is None or not target[0].is_file() or target[0].resolve() == cfg.path.resolve()
                view = s.view("op", op.name)
                text = op_hover(view, op.name, ls.running.get((s.root, op.name)), beside_diagnostic=beside)
                return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), rng)
        for i, k in enumerate(cfg.kernels if cfg is not None else ()):
            head = cfg.positions.key(("kernels", i)) if cfg.positions else None
            name = cfg.positions.value(("kernels", i, "name")) if cfg.positions else None
            if head is not None and head.line - 1 <= line <= (name or head).end_line - 1:
                return lsp.Hover(
                    lsp.MarkupContent(lsp.MarkupKind.Markdown, kernel_hover(s.view("kernel", k.name), k.name))
                )
        got = _toml_document(ls, params.text_document.uri)
        return toml_key_hover(got[0], line, params.position.character) if got else None
    if cfg is None:
        return None
    line += 1
    for op in cfg.ops:
        target = op_target(cfg, op)
        if target and target[0].resolve() == path and target[1].start.line == params.position.line:
            text = op_hover(s.view("op", op.name), op.name, ls.running.get((s.root, op.name)), beside_diagnostic=True)
            return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), target[1])
    if path.suffix in (".cu", ".cuh"):
        for k in cfg.kernels:
            if cfg.resolve(k.source) == path:
                view = s.view("kernel", k.name)
                decl = (view.detail.get("source") or {}).get("line") if view else None
                if decl is None or decl == line:
                    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, kernel_hover(view, k.name)))
    return None


def _discover(ls: GpuemuServer, s: WorkspaceSession) -> dict[str, Any]:
    cfg = s.config
    items: list[dict[str, Any]] = []
    if cfg is not None:
        for op in cfg.ops:
            view = s.view("op", op.name)
            target = op_target(cfg, op)
            rng = op_header_range(cfg, op)
            items.append(
                {
                    "id": _item_id("op", op.name),
                    "name": op.name,
                    "kind": "op",
                    "uri": cfg.path.as_uri(),
                    "range": _range_json(rng),
                    "sourceUri": target[0].as_uri() if target else None,
                    "sourceRange": _range_json(target[1]) if target else None,
                    "status": view.status if view else "unknown",
                    "message": view.message if view else "",
                    "diagnosis": view.diagnosis if view else "",
                    "running": (s.root, op.name) in ls.running,
                }
            )
        for i, k in enumerate(cfg.kernels):
            view = s.view("kernel", k.name)
            src = cfg.resolve(k.source)
            line = ((view.detail.get("source") or {}).get("line") if view else None) or 1
            items.append(
                {
                    "id": _item_id("kernel", k.name),
                    "name": k.name,
                    "kind": "kernel",
                    "uri": cfg.path.as_uri(),
                    "range": _range_json(op_header_range_kernel(cfg, i)),
                    "sourceUri": src.as_uri(),
                    "sourceRange": {
                        "start": {"line": line - 1, "character": 0},
                        "end": {"line": line - 1, "character": 0},
                    },
                    "status": view.status if view else "unknown",
                    "message": (view.detail.get("summary") if view else "") or "",
                }
            )
    return {
        "root": str(s.root),
        "uri": s.root.as_uri(),
        "config": s.config_path.as_uri(),
        "configError": [str(p) for p in s.problems],
        "trusted": ls.options.trusted,
        "items": items,
    }


def op_header_range_kernel(cfg: Any, index: int) -> lsp.Range:
    from .features.ranges import kernel_header_range

    return kernel_header_range(cfg, index)


def _range_json(r: lsp.Range) -> dict[str, Any]:
    return {
        "start": {"line": r.start.line, "character": r.start.character},
        "end": {"line": r.end.line, "character": r.end.character},
    }


def _select(ls: GpuemuServer, params: dict[str, Any]) -> list[tuple[WorkspaceSession, list[str], list[str]]]:
    """Which (workspace, ops, kernels) a run request names; everything when it names nothing."""
    wanted = params.get("ids", params.get("ops"))
    roots = [Path(params["workspace"]).resolve()] if params.get("workspace") else list(ls.sessions)
    out = []
    for root in roots:
        s = ls.sessions.get(root) or (ls.add_session(root) if (root / CONFIG_NAME).is_file() else None)
        if s is None or s.config is None:
            continue
        ops = [o.name for o in s.config.ops]
        kernels = [k.name for k in s.config.kernels]
        if wanted is not None:  # an empty list names nothing (absent: everything)
            names = {w.split(":", 1)[-1] for w in wanted if not w.startswith("kernel:")}
            knames = {w.split(":", 1)[-1] for w in wanted if w.startswith("kernel:")} | (names & set(kernels))
            ops = [o for o in ops if o in names]
            kernels = [k for k in kernels if k in knames]
        out.append((s, ops, kernels))
    return out


async def _run_ops(ls: GpuemuServer, params: dict[str, Any]) -> dict[str, Any]:
    if not ls.options.trusted:
        return {"error": "workspace not trusted: nothing runs", "results": []}
    mode = params.get("mode") or ls.options.mode
    jobs: list[Job] = []
    for s, ops, kernels in _select(ls, params):
        jobs += ls.validate(s, ops, kernels, "run request", mode=mode, iterations=params.get("iterations"))
    try:
        await asyncio.gather(*(asyncio.wrap_future(j.future) for j in jobs if j.future is not None))
    except asyncio.CancelledError:
        for j in jobs:
            j.cancel.set()
        raise
    results = []
    for j in jobs:
        view = j.session.view("kernel" if j.kind == "lint" else "op", j.name)
        j.session.refresh()
        view = j.session.view("kernel" if j.kind == "lint" else "op", j.name)
        results.append(
            {
                "id": _item_id(j.kind, j.name),
                "name": j.name,
                "workspace": str(j.session.root),
                "status": "cancelled" if j.cancel.is_set() else (view.status if view else "not_run"),
                "message": view.message if view else "",
                "diagnosis": view.diagnosis if view else "",
            }
        )
    for s in {j.session.root: j.session for j in jobs}.values():
        ls.publish(s)
    return {"results": results}


def _command_handler(name: str) -> Any:
    async def handler(ls: GpuemuServer, *args: Any) -> Any:
        return await _command(ls, name, _command_params(name, args))

    handler.__name__ = name.replace(".", "_")
    return handler


async def _command(ls: GpuemuServer, name: str, params: dict[str, Any]) -> Any:
    if name in (RUN_OP, RUN_ALL, RUN_QUICK, RUN_THOROUGH):
        mode = {RUN_QUICK: "quick", RUN_THOROUGH: "thorough"}.get(name, params.get("mode"))
        sel = {"workspace": params.get("workspace"), "ids": [params["op"]] if "op" in params else None, "mode": mode}
        return await _run_ops(ls, sel)
    if not ls.options.trusted:
        ls.message("gpuemu: this workspace is not trusted, so its code does not run", lsp.MessageType.Warning)
        return {"error": "not trusted"}
    root = Path(params.get("workspace") or next(iter(ls.sessions), Path.cwd())).resolve()
    s = ls.sessions.get(root)
    if s is None or s.config is None:
        ls.message(f"gpuemu: no usable gpuemu.toml in {root}", lsp.MessageType.Error)
        return {"error": "no workspace"}
    op_name = params["op"]
    if op_name not in {o.name for o in s.config.ops}:
        return {"error": f"no op {op_name!r} in {s.config_path}"}
    try:
        if name == REPRODUCE:
            return await _reproduce(ls, s, op_name, params["seed"], minimized=params.get("minimized", False))
        if name == MINIMIZE:
            return await _minimize(ls, s, op_name, params["seed"])
        if name == CALIBRATE:
            return await _calibrate(ls, s, op_name, params.get("iterations", 100))
    except Exception as exc:  # the engine call failed: an answer, never a server error
        what = f"{name.removeprefix('gpuemu.')} {op_name}"
        ls.message(f"gpuemu: {what}: {exc}", lsp.MessageType.Warning)
        return {"error": str(exc)}
    return None


# --- request and command parameters: checked before anything runs ------------------------------------
def _integer(value: Any, low: int, high: int) -> int | None:
    """``value`` as an integer in low..high (JSON numbers, integral floats from Lua, digit strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and low <= value <= high else None


def _param(what: str, key: str, value: Any) -> Any:
    """One checked parameter, normalized; InvalidParams naming ``what`` and ``key`` when it is not usable."""
    if key in ("workspace", "op"):
        if isinstance(value, str) and value:
            return value
        raise JsonRpcInvalidParams(f"{what}: {key} must be a non-empty string, got {value!r}")
    if key in ("ids", "ops"):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise JsonRpcInvalidParams(f"{what}: {key} must be a list of strings, got {value!r}")
    if key == "mode":
        if value in MODES:
            return value
        raise JsonRpcInvalidParams(f"{what}: mode must be one of {', '.join(MODES)}, got {value!r}")
    if key == "iterations":
        number = _integer(value, 1, MAX_ITERATIONS)
        if number is not None and not isinstance(value, str):
            return number
        raise JsonRpcInvalidParams(f"{what}: iterations must be an integer in 1..{MAX_ITERATIONS}, got {value!r}")
    if key == "minimized":
        if isinstance(value, bool):
            return value
        raise JsonRpcInvalidParams(f"{what}: minimized must be true or false, got {value!r}")
    if key == "seed":
        number = _integer(value, 0, MAX_SEED)
        if number is not None:
            return number
        raise JsonRpcInvalidParams(f"{what}: seed must be an integer in 0..{MAX_SEED}, got {value!r}")
    raise JsonRpcInvalidParams(f"{what}: unknown parameter {key!r}")


#: Keys any LSP client may add to a request's params (progress tokens): accepted, unused.
_PROGRESS_KEYS = ("workDoneToken", "partialResultToken")


def _checked(what: str, raw: Any, keys: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
    """An object of parameters checked key by key (null or absent keys are left out); anything else, an
    unknown key included, is InvalidParams: a request this server misreads must not run something."""
    plain = _plain(raw)
    if plain is None:
        plain = {}
    shape = ", ".join(f"{k}{'' if k in required else '?'}" for k in keys)
    if not isinstance(plain, dict):
        raise JsonRpcInvalidParams(f"{what} takes an object {{{shape}}}, got {type(plain).__name__}")
    unknown = [k for k in plain if k not in keys and k not in _PROGRESS_KEYS]
    if unknown:
        raise JsonRpcInvalidParams(f"{what} takes an object {{{shape}}}; unknown: {', '.join(map(repr, unknown))}")
    out = {k: _param(what, k, v) for k, v in plain.items() if k in keys and v is not None}
    missing = [k for k in required if k not in out]
    if missing:
        raise JsonRpcInvalidParams(f"{what}: {', '.join(missing)} required")
    return out


RUN_KEYS = ("workspace", "ids", "ops", "mode", "iterations")
COMMAND_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # command -> (keys, required keys)
    RUN_OP: (("workspace", "op", "mode"), ("op",)),
    RUN_ALL: (("workspace", "op", "mode"), ()),
    RUN_QUICK: (("workspace", "op"), ()),
    RUN_THOROUGH: (("workspace", "op"), ()),
    REPRODUCE: (("workspace", "op", "seed", "minimized"), ("op", "seed")),
    MINIMIZE: (("workspace", "op", "seed"), ("op", "seed")),
    CALIBRATE: (("workspace", "op", "iterations"), ("op",)),
}


def _run_params(params: Any) -> dict[str, Any]:
    """``gpuemu/runOps`` parameters: an object or nothing; ``[]``, a bad mode or a bad count is InvalidParams
    (never "run everything")."""
    return _checked(RUN_OPS, params, RUN_KEYS)


def _command_params(name: str, args: Sequence[Any]) -> dict[str, Any]:
    """A command's one argument object (none at all: ``{}``), checked like a request's parameters."""
    if len(args) > 1:
        raise JsonRpcInvalidParams(f"{name} takes one argument object, got {len(args)} arguments")
    keys, required = COMMAND_KEYS[name]
    return _checked(name, args[0] if args else None, keys, required)


async def _with_progress(ls: GpuemuServer, s: WorkspaceSession, title: str, fn: Any) -> Any:
    """Run ``fn(job)`` as a task job with work-done progress, awaiting its result."""
    token = None
    if ls.supports("window", "work_done_progress"):
        token = f"gpuemu-task-{uuid.uuid4().hex}"
        await ls.work_done_progress.create_async(token)
        ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(title=title, cancellable=True))
    job = ls.jobs.task(s, title, fn)
    if token:
        ls.token_jobs[token] = job
    try:
        assert job.future is not None
        out = await asyncio.wrap_future(job.future)
        if job.error is not None:
            raise job.error
        if job.cancel.is_set():
            raise RuntimeError("cancelled")
        return out
    finally:
        if token:
            ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="done"))
            ls.token_jobs.pop(token, None)


async def _reproduce(
    ls: GpuemuServer, s: WorkspaceSession, op_name: str, seed: int, *, minimized: bool = False
) -> dict[str, Any]:
    from .engine.cases.generate import generate_inputs
    from .engine.run.validate import RunOptions, replay_spec, run_validation
    from .engine.store.db import Store
    from .engine.tools.repro import write_repro

    cfg = s.config
    assert cfg is not None
    op = cfg.op(op_name)

    def work(job: Job) -> dict[str, Any]:
        store = Store(s.store_file)
        try:
            if minimized:  # the case `gpuemu minimize` stored (its shapes), as `gpuemu reproduce --minimized`
                found = store.find_minimized(op.name, seed)
                if found is None:
                    raise ValueError(f"no minimized case for op {op.name!r} seed {seed}: minimize it first")
                (spec, snap), source = found, "minimized snapshot"
            else:
                spec, snap, source = replay_spec(cfg, op, seed, store)
            result = run_validation(
                cfg,
                RunOptions(mode="reproduce", ops=[op.name], source="server", cancel=job.cancel),
                store=store,
                specs_by_op={op.name: [spec]},
                snapshots={op.name: {seed: snap}} if snap is not None else None,
            )
        finally:
            store.close()
        case = result.outcomes[0].cases[0] if result.outcomes and result.outcomes[0].cases else None
        inputs = snap if snap is not None else generate_inputs(op, spec).logical
        repro = write_repro(cfg, op, spec, inputs, case, label="_min" if minimized else "")
        return {
            "repro": str(repro),
            "case": spec.to_dict(),
            "status": case.status if case else "not_run",
            "source": source,
            "kind": case.kind if case else None,
            "message": (case.message if case else "")[:2000],
            "report": "\n".join(c.report() for c in case.comparisons) if case else "",
        }

    out = await _with_progress(ls, s, f"gpuemu: reproduce {op_name} seed {seed}", work)
    await _show(ls, Path(out["repro"]))
    verdict = "still fails" if out["status"] != "passed" else "passes now"
    ls.message(f"gpuemu: {op_name} seed {seed} {verdict} ({out['source']}); reproduction: {out['repro']}")
    return out


async def _show(ls: GpuemuServer, path: Path) -> None:
    if ls.supports("window", "show_document", "support"):
        try:
            await ls.window_show_document_async(lsp.ShowDocumentParams(uri=path.as_uri(), take_focus=True))
        except Exception as exc:
            log.warning("showDocument failed: %s", exc)


async def _minimize(ls: GpuemuServer, s: WorkspaceSession, op_name: str, seed: int) -> dict[str, Any]:
    from .engine.store.db import Store
    from .engine.tools.minimize import describe, minimize, store_minimized
    from .engine.tools.repro import write_repro

    cfg = s.config
    assert cfg is not None
    op = cfg.op(op_name)

    def work(job: Job) -> dict[str, Any]:
        store = Store(s.store_file)
        try:
            res = minimize(cfg, op, seed, store, cancel=job.cancel)
            store_minimized(store, cfg, res, command="gpuemu-ls minimize")
        finally:
            store.close()
        repro = write_repro(cfg, op, res.minimized.spec, res.minimized_inputs, res.minimized, label="_min")
        return {**describe(res), "repro": str(repro)}

    out = await _with_progress(ls, s, f"gpuemu: minimize {op_name} seed {seed}", work)
    s.refresh()
    ls.publish(s)
    shapes = " ".join(f"{k}={v}" for k, v in out["minimized"]["shapes"].items())
    ls.message(f"gpuemu: {op_name} seed {seed} minimized to {shapes} in {out['trials']} trials")
    return out


async def _calibrate(ls: GpuemuServer, s: WorkspaceSession, op_name: str, iterations: int) -> dict[str, Any]:
    """Calibrate, then show the edit and ask before applying it; a calibration that would hide a bug is
    refused with its reason and offers nothing to apply."""
    from .engine.tools.calibrate import CalibrationRefused, calibrate, tolerance_text

    cfg = s.config
    assert cfg is not None
    op = cfg.op(op_name)

    def work(job: Job) -> list[Any]:
        return calibrate(cfg, op, iterations=iterations)

    try:
        proposals = await _with_progress(ls, s, f"gpuemu: calibrate {op_name}", work)
    except CalibrationRefused as exc:
        ls.message(f"gpuemu: {exc}", lsp.MessageType.Error)
        return {"refused": exc.reasons, "applied": False}
    text = ls._toml_text(s)
    new = tolerance_text(cfg, op, proposals, text)
    change = "; ".join(
        f"{p.dtype}: atol {p.current[0]:g} -> {p.atol:.2g}, rtol {p.current[1]:g} -> {p.rtol:.2g}" for p in proposals
    )
    answer = await ls.window_show_message_request_async(
        lsp.ShowMessageRequestParams(
            lsp.MessageType.Warning,
            f"gpuemu: set the tolerance of {op_name} in gpuemu.toml? {change}. "
            "Only for an op known to be correct: a wider tolerance hides errors.",
            actions=[lsp.MessageActionItem("Apply"), lsp.MessageActionItem("Cancel")],
        )
    )
    proposed = {"proposals": [p.to_dict() for p in proposals], "change": change}
    if getattr(answer, "title", None) != "Apply":
        return {**proposed, "applied": False}
    lines = text.split("\n")
    edit = lsp.WorkspaceEdit(
        changes={
            cfg.path.as_uri(): [
                lsp.TextEdit(lsp.Range(lsp.Position(0, 0), lsp.Position(len(lines) - 1, len(lines[-1]))), new)
            ]
        }
    )
    applied = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit, label=f"calibrate {op_name}"))
    return {**proposed, "applied": bool(getattr(applied, "applied", False))}


#: How long ``exit`` lets cancelled jobs record that they stopped before the process ends.
EXIT_GRACE_S = 0.4


def terminate(ls: GpuemuServer, code: int) -> None:
    """End the process now, whatever runs (``exit``, or the client gone): cancel every job, kill every
    process this server started (the zygote, its workers, fresh-interpreter workers, what ops started),
    give the jobs a moment to record that they stopped, and leave with ``os._exit``, because a job thread
    deep in an engine call (planning a million cases, a store write waiting on a lock) would otherwise keep
    the interpreter alive long after the client left."""
    try:
        ls.jobs.cancel_all()
        _kill_descendants()
        ls.jobs.shutdown(wait=EXIT_GRACE_S)
        _kill_descendants()  # anything started in the meantime
    except BaseException:  # nothing may stop the exit
        log.exception("while exiting")
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe: nothing left to flush into
                pass
        logging.shutdown()
        os._exit(code)


def _kill_descendants() -> None:
    """SIGKILL every live descendant of this process, found through /proc (children and their children,
    collected before any is killed, since a killed parent's children move to another parent)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: the zygote still ends when its control socket closes with this process
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree: list[int] = []
    frontier = [os.getpid()]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        tree += frontier
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def serve_main(argv: Sequence[str]) -> int:
    """``gpuemu-ls [--stdio] [--tcp HOST:PORT] [--log-file FILE] [-v]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="gpuemu-ls", description="gpuemu language server (LSP over stdio).")
    parser.add_argument("--stdio", action="store_true", help="use stdio (the default; editors add it)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP port instead of stdio")
    parser.add_argument("--log-file", metavar="FILE", help="write the server log there")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=f"gpuemu-ls {__version__}")
    args = parser.parse_args(list(argv))
    level = logging.DEBUG if args.verbose else logging.INFO
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=level)
    else:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING if not args.verbose else level)
    faulthandler.enable()  # a crash of the server itself leaves its Python stacks in the editor's log
    server = create_server()
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
    terminate(server, 0)  # the client is gone without `exit`: the same end, no thread may hold it up
    return 0


if __name__ == "__main__":  # python -m gpuemu_ls.server
    sys.exit(serve_main(sys.argv[1:]))
