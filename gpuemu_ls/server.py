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
import os
import signal
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import RPCRequest

from ._version import __version__
from .diagnostics.code_actions import COMMANDS
from .diagnostics.diagnostics import CONFIG_CODES, config_diagnostics, workspace_diagnostics
from .diagnostics.ranges import op_at_line
from .engine.config.blocks import around, changed_lines, renumbered
from .engine.config.keys import CONFIG_NAME
from .engine.config.load import find_workspace, load_config
from .engine.config.model import Config
from .engine.errors import ConfigError
from .engine.run.zygote import get_zygote, run_ops_in_background
from .engine.safe_read import read_text
from .features.commands import command_handler, run_requested
from .features.params import checked, run_params, uri_to_path
from .features.progress import job_progress, run_ended
from .features.registration import register_optional_features, setup_watching
from .features.test_explorer import DISCOVER_OPS, OP_STATE, RUN_OPS, discover, op_state
from .options import ServerOptions
from .session import priority
from .session.jobs import Job, JobRunner
from .session.publisher import Publisher
from .session.runlog import RunLog
from .session.watcher import FileWatcher, StorePoller
from .session.workspace import WorkspaceSession, find_roots

log = logging.getLogger("gpuemu-ls")
EXPERIMENTAL = {"gpuemu": {"discoverOps": True, "runOps": True, "opState": True, "protocolVersion": 1}}
FIRST_RUN = "first run"
#: The least time between two workspace/codeLens/refresh requests.
LENS_REFRESH_S = 1.0
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
                self.answer_error(data["id"], JsonRpcInvalidParams(detail))
                return _Answered()
            raise

    def answer_error(self, msg_id: Any, error: JsonRpcException) -> None:
        """An error answer; to an id that is not a string or a number, with ``"id": null`` written out, as
        JSON-RPC 2.0 asks (pygls would leave the member out, and a client then cannot tell it is an answer)."""
        if _reply_id(msg_id) is not None:
            self._send_response(msg_id, None, error.to_response_error())
        else:
            self._send_data(
                {"jsonrpc": self.VERSION, "id": None, "error": {"code": error.code, "message": error.message}}
            )

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Answered):
            return
        if isinstance(message, dict) or getattr(message, "jsonrpc", None) != self.VERSION:
            # pygls keeps objects without "jsonrpc" as plain dicts, and drops other versions unanswered
            msg_id, method = _get(message, "id"), _get(message, "method")
            if method is not None and msg_id is not None:
                self.answer_error(msg_id, JsonRpcInvalidRequest('not a JSON-RPC 2.0 request ("jsonrpc": "2.0")'))
            return
        msg_id = _get(message, "id")
        if msg_id is not None and _reply_id(msg_id) is None:
            # an id that is neither a string nor a number (cattrs may read {"weird": true} as one): a request is
            # answered with a null id, as JSON-RPC says for an id that cannot be read; anything else is dropped
            if _get(message, "method") is not None:
                self.answer_error(msg_id, JsonRpcInvalidRequest("a request id must be a string or a number"))
            return
        if self._shutdown and isinstance(message, RPCRequest) and message.method != lsp.EXIT:
            error = JsonRpcInvalidRequest(f"{message.method}: the server is shutting down")
            self._send_response(message.id, None, error.to_response_error())
            return
        with priority.interactive():  # background threads wait at their next safe point (session/priority.py)
            super().handle_message(message)


def _get(message: Any, key: str) -> Any:
    return message.get(key) if isinstance(message, dict) else getattr(message, key, None)


def _reply_id(msg_id: Any) -> Any:
    """The id to answer with: JSON-RPC ids are strings or numbers; anything else is answered with null."""
    return msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None


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
        self.sent: dict[Path, list[lsp.Diagnostic]] = {}  # what the client was last sent for each file
        self.lens_refresh: asyncio.TimerHandle | None = None  # a lens refresh waiting for its turn
        self.lens_refreshed = float("-inf")  # when the last one was asked for (the loop's clock)
        self.edit_checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuemu-edit-check")
        self.publisher = Publisher(lambda s: workspace_diagnostics(s, trusted=self.options.trusted), self._deliver)
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
        if s.config is not None:  # the indexes a first hover and save use, made off the loop meanwhile
            self.edit_checker.submit(self._indexes, s.config, s)
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
        return self._open_text(s.config_path) or read_text(s.config_path)

    # --- diagnostics ---------------------------------------------------------------------------
    def publish(self, s: WorkspaceSession, *, reread: bool = False) -> Future[None]:
        """Rebuild the workspace's diagnostics off the event loop (after rereading the store where ``reread``)
        and send the files whose diagnostics changed; a burst of asks is one rebuild (session/publisher.py).
        The future is done once they were sent (awaited on the loop, it resumes after them)."""
        return self.publisher.request(s, reread=reread)

    def _deliver(self, s: WorkspaceSession, diags: dict[Path, list[lsp.Diagnostic]], reread: bool) -> None:
        self.post(self._send_diagnostics, s, diags)
        if reread:
            self.post(self._refresh_lenses)

    def _send_diagnostics(self, s: WorkspaceSession, diags: dict[Path, list[lsp.Diagnostic]]) -> None:
        before = self.published.get(s.root, set())
        for path in set(diags) | before | {s.config_path}:  # gpuemu.toml always: tells the client a run ended
            now = diags.get(path, [])
            if path != s.config_path and self.sent.get(path) == now:
                continue  # one op's run ended: the other 999 ops' files are not sent again
            self.sent[path] = now
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=path.as_uri(), diagnostics=now))
        self.published[s.root] = {p for p, d in diags.items() if d}
        if s.store_error and s.store_error != s.store_error_shown:  # a damaged or unreadable store: say so once
            s.store_error_shown = s.store_error
            self.message(f"gpuemu: {s.store_error}", lsp.MessageType.Error)

    def refresh_and_publish(self, s: WorkspaceSession) -> None:
        """Reread the store and publish, both off the event loop."""
        self.publish(s, reread=True)

    def _refresh_lenses(self) -> None:
        """Ask the client to refresh its lenses, at most once a second with the last ask always honoured: each
        refresh has the editor ask for every lens of gpuemu.toml again, 1,000 of them, as often as runs end."""
        if self.lens_refresh is not None or self.loop is None:
            return
        wait = max(0.0, self.lens_refreshed + LENS_REFRESH_S - self.loop.time())
        self.lens_refresh = self.loop.call_later(wait, self._lens_refresh_now)

    def _lens_refresh_now(self) -> None:
        self.lens_refresh = None
        self.lens_refreshed = self.loop.time() if self.loop is not None else 0.0
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
        job_progress(self, job, kind, event)
        if job.kind in ("validate", "lint"):
            if kind in ("finished", "cancelled", "failed"):
                job.session.stale = True  # a discoverOps answered before the refresh below rereads first
                run_ended(self, job, kind, event)
            self.protocol.notify(OP_STATE, op_state(job, kind, event))
        if kind == "failed" and job.kind != "task":  # a task's caller answers for it, once (features/commands.py)
            self.message(f"gpuemu: {job.kind} {job.name} failed: {event.get('error')}", lsp.MessageType.Error)
            log.error("job %s failed: %s", job.name, event.get("traceback"))
        if kind in ("finished", "cancelled", "failed") and job.kind in ("validate", "lint"):
            self.refresh_and_publish(job.session)

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

        first = None
        if text is not None and s.loaded_text is not None:  # the edited entry first, then the whole file
            first = self.edit_checker.submit(self._check_edit, s, s.loaded_text, text, gen)

        def work() -> None:
            priority.background()
            if first is not None:
                first.exception()  # the whole check waits: run beside it, the entry's took 0.5 s, not 40 ms
            if s.generation != gen:
                return
            old = s.saved_config  # what was on disk before, not the unsaved buffer didChange loaded
            s.load(text, saved=saved)
            if s.config is not None:  # positions and indexes made here, not at the next hover or save
                self._indexes(s.config, s)
            s.loaded_generation = gen
            if s.generation != gen:
                return
            self.publish(s)  # built on the publisher's thread, sent from the loop
            if then is not None:
                self.post(then, old)

        s.loader.submit(work)

    @staticmethod
    def _indexes(cfg: Config, s: WorkspaceSession) -> None:
        """A config's TOML positions, op-by-line and op-by-file indexes (each takes a while at 1,000 ops)."""
        op_at_line(cfg, 0)
        s.ops_by_file(cfg)

    def _check_edit(self, s: WorkspaceSession, before: str, text: str, gen: int) -> None:
        """The edited part of gpuemu.toml checked on its own, so a problem typed into a 1,000-op file shows in
        milliseconds, not after the whole file's check (half a second, seconds while ops validate); shown only
        where it finds one and the whole check has not answered yet, which then has the last word."""
        if s.generation != gen:
            return
        try:
            with priority.interactive():
                part = around(text, *changed_lines(before, text))
                if part is None:
                    return
                load_config(s.root, text=part.text)
        except ConfigError as exc:
            if s.generation == gen and s.loaded_generation < gen:
                problems = [renumbered(p, part) for p in exc.problems]
                self.post(self._send_config_problems, s, gen, config_diagnostics(s.config_path, problems))

    def _send_config_problems(self, s: WorkspaceSession, gen: int, found: dict[Path, list[lsp.Diagnostic]]) -> None:
        """gpuemu.toml's diagnostics with the edited entry's problems in place of its config problems (the rest
        of what it shows, a failing op's entry, stays); the whole check replaces them."""
        if s.loaded_generation >= gen:
            return
        shown = [d for d in self.sent.get(s.config_path, []) if d.code not in CONFIG_CODES]
        self._send_diagnostics(s, {**self._shown(s), s.config_path: found.get(s.config_path, []) + shown})

    def _shown(self, s: WorkspaceSession) -> dict[Path, list[lsp.Diagnostic]]:
        """What the client was last sent for the workspace's files."""
        return {p: self.sent.get(p, []) for p in self.published.get(s.root, set())}

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
        # both layers (top level and "gpuemu") are read, and trust fails closed: see ServerOptions.merged
        ls.options, ls.option_problems = ServerOptions().merged(params.initialization_options, initial=True)
        ls.jobs = JobRunner(ls._job_event_from_thread, ls.options.jobs)
        ls.loop = asyncio.get_running_loop()
        ls.protocol.trace = params.trace or lsp.TraceValue.Off  # then `$/setTrace` (pygls keeps it)
        if ls.options.trusted:
            get_zygote()  # the fork server warms up (imports) while the client finishes initializing
        register_optional_features(ls)
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
                if cfg:  # not an object (but not null): trust is lowered, see ServerOptions.merged
                    ls.options, problems = ls.options.merged(cfg[0])
                    ls.option_problems += problems
            except Exception as exc:
                log.warning("workspace/configuration failed: %s", exc)
        for p in ls.option_problems:
            ls.message(p, lsp.MessageType.Warning)
        await setup_watching(ls)
        ls.poller = StorePoller(
            lambda: list(ls.sessions.values()),
            ls.refresh_and_publish,  # the publisher takes asks from any thread: no hop through the loop
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
        """Answered at once (clients kill a server that takes 3-5 s): every run is cancelled now, and the
        wait for them to stop, then the closing of watchers and stores, happens off the event loop."""
        ls.shut_down = True
        ls.jobs.cancel_all()

        def finish() -> None:
            ls.jobs.shutdown()  # the running ones stop at their next poll; no store closes under a writer
            for closer in (ls.watcher, ls.poller):
                if closer is not None:
                    closer.close()
            ls.publisher.close()
            for s in list(ls.sessions.values()):
                s.close()

        threading.Thread(target=finish, name="gpuemu-shutdown", daemon=True).start()

    @server.feature(lsp.EXIT)
    def exit_(ls: GpuemuServer, _params: Any) -> None:
        terminate(ls, 0 if ls.shut_down else 1)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: GpuemuServer, params: lsp.DidOpenTextDocumentParams) -> None:
        path, s = _file_session(ls, params.text_document.uri)
        if path is None or s is None:
            return
        if path == s.config_path and params.text_document.text != s.loaded_text:
            # an unsaved buffer, or a file that changed on disk unseen (watch off, a checkout while busy)
            ls.reload(s, params.text_document.text, saved=params.text_document.text == _read_text(path))
        if ls.options.run_on_open == "off" or s.config is None:
            return  # runOnOpen is the one switch: opening any file, gpuemu.toml included, runs nothing
        ops, kernels = s.affected(path)
        # gpuemu.toml names every op: opening it validates only those never validated (a checkout gives it a
        # new time, and 1,000 stored verdicts are not stale for that); any other file, its ops older than it
        mtime = -1.0 if path == s.config_path else _mtime(path)
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
        path, s = _file_session(ls, params.text_document.uri)
        if path is None or s is None:
            return
        ls.handled_mtime[path] = _mtime(path)
        ls.on_changed(s, {path}, "save")

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: GpuemuServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        by_session: dict[Path, set[Path]] = {}
        for ch in params.changes:
            path, s = _file_session(ls, ch.uri)
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
        if raw is not None:  # not an object: trust is lowered, see ServerOptions.merged
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
        checked(DISCOVER_OPS, params, ())  # no parameters: nothing, or an object
        # the statuses agree with every opState already sent: views are made current off the event loop
        for s in list(ls.sessions.values()):
            await asyncio.to_thread(s.fresh)
        return {"workspaces": [discover(ls, s) for s in ls.sessions.values()]}

    @server.feature(RUN_OPS)
    async def run_ops(ls: GpuemuServer, params: Any) -> dict[str, Any]:
        return await run_requested(ls, run_params(params))

    for name in COMMANDS:
        server.command(name)(command_handler(name))
    return server


def _file_session(ls: GpuemuServer, uri: str) -> tuple[Path | None, WorkspaceSession | None]:
    """The file a URI names, and the workspace session it belongs to (None, None: not a file)."""
    path = uri_to_path(uri)
    return path, ls.session_for(path) if path is not None else None


#: The largest LSP message body read: a whole document travels in didOpen/didChange, and the largest file the
#: server reads is 16 MiB; a body four times that is no editor's. ``Content-Length: 1099511627776`` was a
#: MemoryError that killed the server.
MAX_FRAME_BYTES = 64 << 20
#: What a refused body becomes: a notification pygls ignores (``$/`` methods are optional), so the stream
#: stays in step and the server keeps serving.
_REFUSED_FRAME = b'{"jsonrpc": "2.0", "method": "$/gpuemu/refusedFrame", "params": {}}'


class FrameCap:
    """stdin for pygls' reader, with a cap on a message body: a larger one is read through and dropped (in
    1 MiB pieces: memory stays bounded), and the server logs it and goes on."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def readline(self) -> bytes:
        return self.stream.readline(MAX_FRAME_BYTES)

    def read(self, n: int = -1) -> bytes:
        if 0 <= n <= MAX_FRAME_BYTES:
            return self.stream.read(n)
        log.warning("an LSP message of %d bytes is over the %d MiB cap: dropped", n, MAX_FRAME_BYTES >> 20)
        left = n
        while left > 0:
            got = self.stream.read(min(left, 1 << 20))
            if not got:
                return b""  # the client is gone
            left -= len(got)
        return _REFUSED_FRAME


def _read_text(path: Path) -> str | None:
    try:
        return read_text(path)
    except (OSError, UnicodeDecodeError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


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
    # the event loop answers the editor while job threads run Python (planning a run, reading the store):
    # hand the GIL over every 1 ms, not 5, so a message waits less behind them at each step of its way
    sys.setswitchinterval(0.001)
    # ... and the processes that run ops give way to it for the CPU (docs/lsp.md, "Responsiveness while ops run")
    run_ops_in_background()
    server = create_server()
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io(stdin=FrameCap(sys.stdin.buffer))  # type: ignore[arg-type]
    terminate(server, 0)  # the client is gone without `exit`: the same end, no thread may hold it up
    return 0


if __name__ == "__main__":  # python -m gpuemu_ls.server
    sys.exit(serve_main(sys.argv[1:]))
